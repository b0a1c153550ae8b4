//! The world's own money: what an order costs, read from its body by the world's rules, never by
//! the function's. `process_orders::money` and `process_orders::order` are what the simulator
//! judges, so they cannot be what it judges with: a wrong entry in the function's minor-unit
//! table, or a misread amount, would otherwise be written into the bodies and read back the same
//! way, and every check would agree with it. So the world has its own ISO 4217 exponents, its
//! own exact reading of a JSON number's text (by its digits, never through a float), and its own
//! answer to whether two bodies are the same order. The provider's ledger keeps what the function
//! sent; every check holds that against this reading of the body.

use std::fmt;

use serde_json::value::RawValue;

/// A currency code as the world writes and reads it: three ASCII letters, kept upper-case.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Code([u8; 3]);

/// ISO 4217's exponents (the digits of the minor unit) for the codes the world's producers use
/// and a few of their neighbours, from the ISO 4217 list (SIX, amendment 178). Written here
/// rather than taken from the function, so that the function's table is judged, not trusted.
const EXPONENTS: [(&[u8; 3], u32); 13] = [
    (b"EUR", 2),
    (b"USD", 2),
    (b"GBP", 2),
    (b"CHF", 2),
    (b"JPY", 0),
    (b"KRW", 0),
    (b"ISK", 0),
    (b"KWD", 3),
    (b"BHD", 3),
    (b"OMR", 3),
    (b"TND", 3),
    (b"CLF", 4),
    (b"UYW", 4),
];

impl Code {
    /// The euro: the template's `DEFAULT_CURRENCY`, unless it names another.
    pub const EUR: Self = Self(*b"EUR");

    /// The code `text` names: three ASCII letters in either case.
    pub fn parse(text: &str) -> Option<Self> {
        let bytes: [u8; 3] = text.as_bytes().try_into().ok()?;
        bytes
            .iter()
            .all(u8::is_ascii_alphabetic)
            .then(|| Self(bytes.map(|b| b.to_ascii_uppercase())))
    }

    /// The code, upper-case.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("???")
    }

    /// Its minor unit's digits, if the world knows the code (it never sends one it does not).
    pub fn minor_digits(self) -> Option<u32> {
        EXPONENTS
            .iter()
            .find(|(code, _)| **code == self.0)
            .map(|(_, digits)| *digits)
    }
}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an order costs: whole minor units of its currency. Two bodies are the same order when
/// they name the same id and the same price, however their numbers are spelled (`10.5`, `10.50`,
/// `1.05e1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Price {
    /// Minor units (cents, yen, fils).
    pub minor: u64,
    /// The currency.
    pub currency: Code,
}

impl Price {
    /// What the provider was sent: minor units and a code, as the charge request carried them
    /// (the ledger's side of every comparison). `None` for a code that is not three letters.
    pub fn sent(minor: u64, code: &str) -> Option<Self> {
        Some(Self {
            minor,
            currency: Code::parse(code)?,
        })
    }

    /// The JSON number a producer writes for it: `1234` yen, `12.34` dollars, `1.234` dinars.
    /// `None` for a currency the world has no exponent for.
    pub fn decimal(&self) -> Option<String> {
        let digits = self.currency.minor_digits()?;
        if digits == 0 {
            return Some(self.minor.to_string());
        }
        let text = format!("{:0>width$}", self.minor, width = digits as usize + 1);
        let (whole, fraction) = text.split_at(text.len() - digits as usize);
        Some(format!("{whole}.{fraction}"))
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.minor, self.currency)
    }
}

/// The largest amount the world sends: 2^53 - 1 minor units, which every JSON reader holds.
const MAX_MINOR: u128 = (1 << 53) - 1;

/// The minor units a JSON number's text names in a currency of `digits` decimal places: exactly,
/// by its digits. `None` when the text is not a JSON number (RFC 8259's grammar), is not above
/// zero, names a fraction of the minor unit, or is past 2^53 - 1.
pub fn minor_units(number: &str, digits: u32) -> Option<u64> {
    let bytes = number.as_bytes();
    let mut at = 0;
    let take_digits = |at: &mut usize| {
        let from = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        &number[from..*at]
    };
    if bytes.first() == Some(&b'-') {
        // Nothing below zero is an amount; `-0` is not above it.
        return None;
    }
    let whole = take_digits(&mut at);
    if whole.is_empty() || (whole.len() > 1 && whole.starts_with('0')) {
        return None;
    }
    let mut fraction = "";
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        fraction = take_digits(&mut at);
        if fraction.is_empty() {
            return None;
        }
    }
    let mut exponent: i64 = 0;
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        let negative = match bytes.get(at) {
            Some(b'-') => {
                at += 1;
                true
            }
            Some(b'+') => {
                at += 1;
                false
            }
            _ => false,
        };
        let text = take_digits(&mut at);
        if text.is_empty() {
            return None;
        }
        // Anything past a few hundred is out of range either way.
        let magnitude = text.parse::<i64>().unwrap_or(1_000).min(1_000);
        exponent = if negative { -magnitude } else { magnitude };
    }
    if at != bytes.len() {
        return None;
    }
    // value = mantissa * 10^(exponent - fraction's length); minor units = value * 10^digits.
    let mantissa = format!("{whole}{fraction}");
    let significant = mantissa.trim_start_matches('0');
    let kept = significant.trim_end_matches('0');
    if kept.is_empty() {
        return None;
    }
    let scale = exponent - fraction.len() as i64
        + i64::from(digits)
        + (significant.len() - kept.len()) as i64;
    if scale < 0 || kept.len() > 16 {
        // A fraction of the minor unit left over, or more digits than 2^53 has.
        return None;
    }
    let mut minor: u128 = kept.parse().ok()?;
    for _ in 0..scale {
        minor *= 10;
        if minor > MAX_MINOR {
            return None;
        }
    }
    (minor <= MAX_MINOR)
        .then(|| u64::try_from(minor).ok())
        .flatten()
}

/// What an order body names, as the world reads it: its id and its price, in `default` when it
/// names no currency. `None` for a body that is not an order (not a JSON object, no string
/// `order_id`, no amount the world can read exactly, a currency it does not know).
pub fn read(body: &str, default: Code) -> Option<(String, Price)> {
    with_order_fields(body, |fields| read_fields(fields, default))
}

/// The order id a body names, even when the body is not an order: a string `order_id` at the
/// top, or in an SNS notification's `Message` when that is a string. What a person looking at a
/// DLQ copy needs to find the order.
pub fn named_id(body: &str) -> Option<String> {
    with_order_fields(body, |fields| {
        serde_json::from_str(fields.get("order_id")?.get()).ok()
    })
}

/// `read` applied to the fields of the order a body carries: the body's own, or, for an SNS
/// notification (a topic's subscription without raw delivery), those of the JSON string in its
/// `Message`, unwrapped once as SNS wraps once. `None` when either is not a JSON object.
fn with_order_fields<T>(
    body: &str,
    read: impl FnOnce(&std::collections::HashMap<String, &RawValue>) -> Option<T>,
) -> Option<T> {
    let fields: std::collections::HashMap<String, &RawValue> = serde_json::from_str(body).ok()?;
    let notification = fields
        .get("Type")
        .and_then(|kind| serde_json::from_str::<String>(kind.get()).ok())
        .is_some_and(|kind| kind == "Notification");
    if notification && let Some(message) = fields.get("Message") {
        let inner: String = serde_json::from_str(message.get()).ok()?;
        let fields: std::collections::HashMap<String, &RawValue> =
            serde_json::from_str(&inner).ok()?;
        return read(&fields);
    }
    read(&fields)
}

/// The longest order id an order may have: the store's key, a header's value and a path segment
/// all take it (the design's limit).
const LONGEST_ID: usize = 255;

/// Whether `id` reads the same as a store key, an `Idempotency-Key` header and a look-up's path
/// segment, by the world's rule: printable ASCII, spaces only inside, not a dot segment.
fn usable_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= LONGEST_ID
        && id.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !id.starts_with(' ')
        && !id.ends_with(' ')
        && id != "."
        && id != ".."
}

fn read_fields(
    fields: &std::collections::HashMap<String, &RawValue>,
    default: Code,
) -> Option<(String, Price)> {
    let order_id: String = serde_json::from_str(fields.get("order_id")?.get()).ok()?;
    if !usable_id(&order_id) {
        return None;
    }
    let currency = match fields.get("currency") {
        None => default,
        Some(code) => Code::parse(&serde_json::from_str::<String>(code.get()).ok()?)?,
    };
    let minor = minor_units(fields.get("amount")?.get(), currency.minor_digits()?)?;
    Some((order_id, Price { minor, currency }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_exactly_by_their_digits() {
        let cases: &[(&str, u32, Option<u64>)] = &[
            ("10", 2, Some(1_000)),
            ("10.5", 2, Some(1_050)),
            ("10.50", 2, Some(1_050)),
            ("1.05e1", 2, Some(1_050)),
            ("1050E-2", 2, Some(1_050)),
            ("0.01", 2, Some(1)),
            ("0.29", 2, Some(29)),
            ("12.34", 2, Some(1_234)),
            ("1.234", 3, Some(1_234)),
            ("1234", 0, Some(1_234)),
            ("12.345", 2, None),
            ("1.5", 0, None),
            ("0", 2, None),
            ("0.00", 2, None),
            ("-5", 2, None),
            ("-0", 2, None),
            ("01", 2, None),
            ("1.", 2, None),
            (".5", 2, None),
            ("1e", 2, None),
            ("\"10\"", 2, None),
            ("ten", 2, None),
            ("90071992547409.91", 2, Some(9_007_199_254_740_991)),
            ("90071992547409.92", 2, None),
            ("1e400", 2, None),
            ("1e-400", 2, None),
            ("100000000000000000000e-20", 2, Some(100)),
        ];
        for (text, digits, expected) in cases {
            assert_eq!(minor_units(text, *digits), *expected, "{text} at {digits}");
        }
    }

    #[test]
    fn a_body_is_read_with_the_worlds_own_exponents() {
        let read = |body| read(body, Code::EUR);
        let price = |minor, code| {
            Some(Price {
                minor,
                currency: Code::parse(code).expect("a code"),
            })
        };
        assert_eq!(
            read(r#"{"order_id": "o-1", "amount": 12.34}"#).map(|r| r.1),
            price(1_234, "EUR")
        );
        assert_eq!(
            read(r#"{"order_id": "o-1", "amount": 1.234, "currency": "KWD"}"#).map(|r| r.1),
            price(1_234, "KWD")
        );
        assert_eq!(
            read(r#"{"order_id": "o-1", "amount": 1234, "currency": "jpy"}"#).map(|r| r.1),
            price(1_234, "JPY")
        );
        let notification =
            r#"{"Type": "Notification", "Message": "{\"order_id\": \"o-1 x\", \"amount\": 2}"}"#;
        assert_eq!(
            read(notification),
            Some((
                "o-1 x".to_owned(),
                Price {
                    minor: 200,
                    currency: Code::EUR
                }
            ))
        );
        let longest = "o".repeat(LONGEST_ID);
        let body = |id: &str| format!(r#"{{"order_id": "{id}", "amount": 1}}"#);
        assert!(super::read(&body(&longest), Code::EUR).is_some());
        assert!(super::read(&body(&format!("{longest}x")), Code::EUR).is_none());
        for not_an_order in [
            r#"{"order_id": "o-1", "amount": "ten"}"#,
            r#"{"order_id": " o-1", "amount": 1}"#,
            r#"{"order_id": "o-1 ", "amount": 1}"#,
            r#"{"order_id": "..", "amount": 1}"#,
            r#"{"order_id": "o-\u0001", "amount": 1}"#,
            r#"{"order_id": "o-\u00e9", "amount": 1}"#,
            r#"{"Type": "Notification", "Message": {"order_id": "o-1", "amount": 1}}"#,
            r#"{"order_id": "o-1", "amount": -5}"#,
            r#"{"amount": 12.5}"#,
            r#"{"order_id": "o-1", "amount": 1, "currency": "XYZ"}"#,
            "order o-1: not JSON",
        ] {
            assert_eq!(read(not_an_order), None, "{not_an_order}");
        }
        let written = |minor, code| {
            Price {
                minor,
                currency: Code::parse(code).expect("a code"),
            }
            .decimal()
        };
        assert_eq!(written(1_234, "JPY").as_deref(), Some("1234"));
        assert_eq!(written(5, "EUR").as_deref(), Some("0.05"));
        assert_eq!(written(1_234, "KWD").as_deref(), Some("1.234"));
    }
}
