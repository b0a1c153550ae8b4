//! Money as exact decimals. An amount is read from the JSON number's own text, never through a
//! float (which would round `0.1` and compare bits), checked against its currency's minor unit,
//! and kept as integer minor units: what the provider receives, what the fingerprint covers and
//! what a look-up is compared with.

use std::fmt;

/// The largest amount accepted, in minor units: 2^53 - 1, the largest integer every JSON
/// reader (JavaScript's included) holds exactly. About 90 trillion in a two-digit currency.
pub const MAX_MINOR: u64 = (1 << 53) - 1;

/// An ISO 4217 currency code: three ASCII letters, kept upper-case.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    /// `DEFAULT_CURRENCY` (EUR): the currency of an order whose body names none.
    pub fn from_env(env: &lambda_kit::Env<'_>) -> Result<Self, lambda_kit::EnvError> {
        let Some(code) = env.text("DEFAULT_CURRENCY") else {
            return Ok(Self::EUR);
        };
        Self::parse(code.trim()).ok_or_else(|| {
            lambda_kit::EnvError::invalid("DEFAULT_CURRENCY", &code, "a three-letter ISO 4217 code")
        })
    }

    /// The euro, `DEFAULT_CURRENCY`'s default.
    pub const EUR: Self = Self(*b"EUR");

    /// The code, if `text` is three ASCII letters (either case; kept upper-case).
    pub fn parse(text: &str) -> Option<Self> {
        let bytes: [u8; 3] = text.as_bytes().try_into().ok()?;
        if !bytes.iter().all(u8::is_ascii_alphabetic) {
            return None;
        }
        Some(Self(bytes.map(|b| b.to_ascii_uppercase())))
    }

    /// The code, upper-case.
    pub fn as_str(&self) -> &str {
        // Three ASCII letters by construction.
        std::str::from_utf8(&self.0).unwrap_or("XXX")
    }

    /// How many digits its minor unit has (ISO 4217's exponent): 0 for the yen, 3 for the
    /// Kuwaiti dinar, 2 for every code not listed as otherwise.
    pub fn minor_digits(&self) -> u32 {
        match &self.0 {
            b"BIF" | b"CLP" | b"DJF" | b"GNF" | b"ISK" | b"JPY" | b"KMF" | b"KRW" | b"PYG"
            | b"RWF" | b"UGX" | b"UYI" | b"VND" | b"VUV" | b"XAF" | b"XOF" | b"XPF" => 0,
            b"BHD" | b"IQD" | b"JOD" | b"KWD" | b"LYD" | b"OMR" | b"TND" => 3,
            b"CLF" | b"UYW" => 4,
            _ => 2,
        }
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An amount of a currency, in its minor units (cents for EUR, yen for JPY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Money {
    /// Minor units, above zero and at most [`MAX_MINOR`].
    pub minor: u64,
    /// The currency the minor units are in.
    pub currency: Currency,
}

impl Money {
    /// The amount a JSON number's text names in `currency`.
    pub fn parse(number: &str, currency: Currency) -> Result<Self, AmountError> {
        Ok(Self {
            minor: minor_units(number, currency.minor_digits())?,
            currency,
        })
    }
}

impl fmt::Display for Money {
    /// `10.50 EUR`, `1500 JPY`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.currency.minor_digits();
        let unit = 10u64.pow(digits);
        match digits {
            0 => write!(f, "{} {}", self.minor, self.currency),
            _ => write!(
                f,
                "{}.{:0width$} {}",
                self.minor / unit,
                self.minor % unit,
                self.currency,
                width = digits as usize
            ),
        }
    }
}

/// Why a JSON value is not an amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// Not a JSON number (a string, `NaN`, ...).
    #[error("amount is not a number")]
    NotNumber,
    /// Zero or below.
    #[error("amount must be greater than zero")]
    NotPositive,
    /// More decimal places than the currency has.
    #[error("amount has more decimal places than its currency allows ({allowed})")]
    TooPrecise {
        /// The currency's decimal places.
        allowed: u32,
    },
    /// Beyond the exact range (2^53 - 1 minor units).
    #[error("amount is larger than {MAX_MINOR} minor units")]
    TooLarge,
}

/// The minor units a JSON number's text names, for a currency with `digits` decimal places:
/// `"10.5"` with 2 is 1050, `"1e2"` is 10000, `"10.505"` is too precise. Exact for any text: the
/// digits are shifted, never divided, and nothing is allocated.
pub fn minor_units(number: &str, digits: u32) -> Result<u64, AmountError> {
    let (negative, unsigned) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || (mantissa.contains('.') && !all_digits(fraction)) {
        return Err(AmountError::NotNumber);
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(text) => {
            let magnitude = text.strip_prefix(['+', '-']).unwrap_or(text);
            if !all_digits(magnitude) {
                return Err(AmountError::NotNumber);
            }
            // Past any amount's range either way; the sign decides which error it is.
            let magnitude = magnitude
                .parse::<i64>()
                .unwrap_or(i64::MAX / 4)
                .min(i64::MAX / 4);
            if text.starts_with('-') {
                -magnitude
            } else {
                magnitude
            }
        }
    };
    // value = (whole and fraction's digits as one integer) * 10^(exponent - fraction digits),
    // and minor units are that times 10^digits.
    let joined = || whole.bytes().chain(fraction.bytes());
    let total = whole.len() + fraction.len();
    let leading = joined().take_while(|&b| b == b'0').count();
    if leading == total || negative {
        return Err(AmountError::NotPositive);
    }
    let trailing = joined().rev().take_while(|&b| b == b'0').count();
    let shift = exponent + trailing as i64 - fraction.len() as i64 + i64::from(digits);
    if shift < 0 {
        return Err(AmountError::TooPrecise { allowed: digits });
    }
    let mut minor: u64 = 0;
    for b in joined().skip(leading).take(total - leading - trailing) {
        minor = minor
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(b - b'0')))
            .filter(|m| *m <= MAX_MINOR)
            .ok_or(AmountError::TooLarge)?;
    }
    for _ in 0..shift {
        minor = minor
            .checked_mul(10)
            .filter(|m| *m <= MAX_MINOR)
            .ok_or(AmountError::TooLarge)?;
    }
    Ok(minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_exact_minor_units() {
        let cases: &[(&str, u32, Result<u64, AmountError>)] = &[
            ("10", 2, Ok(1_000)),
            ("10.5", 2, Ok(1_050)),
            ("10.50", 2, Ok(1_050)),
            ("10.500000", 2, Ok(1_050)),
            ("0.1", 2, Ok(10)),
            ("0.30", 2, Ok(30)),
            ("0.01", 2, Ok(1)),
            ("1e2", 2, Ok(10_000)),
            ("1E+2", 2, Ok(10_000)),
            ("150e-2", 2, Ok(150)),
            ("1500", 0, Ok(1_500)),
            ("1.234", 3, Ok(1_234)),
            ("007.5", 2, Ok(750)),
            ("10.005", 2, Err(AmountError::TooPrecise { allowed: 2 })),
            ("10.5", 0, Err(AmountError::TooPrecise { allowed: 0 })),
            ("1e-3", 2, Err(AmountError::TooPrecise { allowed: 2 })),
            (
                "1e-99999999999999999999",
                2,
                Err(AmountError::TooPrecise { allowed: 2 }),
            ),
            (
                "0.1000000000000000055511151231257827",
                2,
                Err(AmountError::TooPrecise { allowed: 2 }),
            ),
            ("0", 2, Err(AmountError::NotPositive)),
            ("0.000", 2, Err(AmountError::NotPositive)),
            ("-0.0", 2, Err(AmountError::NotPositive)),
            ("-5", 2, Err(AmountError::NotPositive)),
            ("0e5", 2, Err(AmountError::NotPositive)),
            ("90071992547409.91", 2, Ok(MAX_MINOR)),
            ("90071992547409.92", 2, Err(AmountError::TooLarge)),
            ("1e400", 2, Err(AmountError::TooLarge)),
            ("1e99999999999999999999", 2, Err(AmountError::TooLarge)),
            ("99999999999999999999999", 0, Err(AmountError::TooLarge)),
            ("\"10\"", 2, Err(AmountError::NotNumber)),
            ("true", 2, Err(AmountError::NotNumber)),
            ("null", 2, Err(AmountError::NotNumber)),
            ("", 2, Err(AmountError::NotNumber)),
            ("1.", 2, Err(AmountError::NotNumber)),
            (".5", 2, Err(AmountError::NotNumber)),
            ("1e", 2, Err(AmountError::NotNumber)),
            ("{}", 2, Err(AmountError::NotNumber)),
        ];
        for (text, digits, expected) in cases {
            assert_eq!(
                minor_units(text, *digits),
                *expected,
                "{text} with {digits}"
            );
        }
    }

    #[test]
    fn currencies_are_three_letters_with_their_minor_unit() {
        let eur = Currency::parse("eur").expect("eur");
        assert_eq!((eur.as_str(), eur.minor_digits()), ("EUR", 2));
        assert_eq!(Currency::parse("JPY").map(|c| c.minor_digits()), Some(0));
        assert_eq!(Currency::parse("KWD").map(|c| c.minor_digits()), Some(3));
        // ISO 4217's exponents other than 2, every one (a charge in CLF is in ten-thousandths:
        // read as cents it would be a hundred times too large).
        let exponents = [
            (
                0,
                "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF",
            ),
            (3, "BHD IQD JOD KWD LYD OMR TND"),
            (4, "CLF UYW"),
            (2, "USD EUR GBP CHF XXX"),
        ];
        for (digits, codes) in exponents {
            for code in codes.split(' ') {
                let currency = Currency::parse(code).expect("a code");
                assert_eq!(currency.minor_digits(), digits, "{code}");
            }
        }
        for bad in ["", "EU", "EURO", "E1R", "\u{e9}UR", "EU "] {
            assert_eq!(Currency::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn money_prints_in_major_units() {
        let money =
            |text, code| Money::parse(text, Currency::parse(code).expect("code")).expect("money");
        assert_eq!(money("10.5", "EUR").to_string(), "10.50 EUR");
        assert_eq!(money("1500", "JPY").to_string(), "1500 JPY");
        assert_eq!(money("0.001", "KWD").to_string(), "0.001 KWD");
    }
}
