//! Provider text is logged only redacted: a gateway in front of the provider may echo the
//! request's `Authorization` header, or a key, in its error body. What survives is the status,
//! the provider's error type and code, and a short detail with anything that looks like a
//! credential replaced.

/// What a credential is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Key prefixes payment providers use for secrets (Stripe's `sk_live_...`, `rk_...`, webhook
/// secrets), followed by the key's own characters.
const KEY_PREFIXES: &[&str] = &["sk_", "rk_", "pk_", "whsec_", "key_", "api_key_"];

/// Authentication schemes whose next word is a credential.
const SCHEMES: &[&str] = &["bearer", "basic", "token", "apikey", "api-key"];

/// `text` with every word that looks like a credential replaced by [`REDACTED`]: the word after
/// an authentication scheme (`Bearer ...`), a word that starts with a provider's key prefix, and
/// any long word that mixes letters and digits (a token, whatever its name).
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut after_scheme = false;
    let mut rest = text;
    while !rest.is_empty() {
        let start = rest.find(is_word).unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
        let word = &rest[..end];
        if word.is_empty() {
            break;
        }
        if after_scheme || looks_like_a_key(word) {
            out.push_str(REDACTED);
        } else {
            out.push_str(word);
        }
        after_scheme = SCHEMES.iter().any(|s| word.eq_ignore_ascii_case(s));
        rest = &rest[end..];
    }
    out
}

/// The characters of a token: letters, digits and the separators keys are made of.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+' | '/' | '=')
}

fn looks_like_a_key(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    if KEY_PREFIXES
        .iter()
        .any(|p| lower.starts_with(p) && word.len() > p.len() + 3)
    {
        return true;
    }
    // A long run of mixed letters and digits is a token (a JWT, a hex or base64 key): no word
    // of an error message looks like that.
    word.len() >= 20
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
}

/// The shortest run of a key's characters that is scrubbed wherever it appears: a gateway may
/// echo a key cut, split or wrapped, and any eight of its characters in a row narrow it down.
pub const MIN_KEY_RUN: usize = 8;

/// `text` with every run of [`MIN_KEY_RUN`] or more characters of `key` (every substring of it
/// that long) replaced by [`REDACTED`], and the whole key wherever it stands if it is shorter.
/// `None` when nothing of it is there.
pub fn scrub_key(text: &str, key: &str) -> Option<String> {
    let (text_bytes, key_bytes) = (text.as_bytes(), key.as_bytes());
    if key.is_empty() {
        return None;
    }
    let window = key_bytes.len().min(MIN_KEY_RUN);
    // Every byte of `text` inside a match of one of the key's windows: overlapping windows of
    // a longer run cover it whole.
    let mut covered = vec![false; text_bytes.len()];
    let mut found = false;
    for piece in key_bytes.windows(window) {
        let mut from = 0;
        while let Some(at) = find(&text_bytes[from..], piece) {
            let start = from + at;
            covered[start..start + window].fill(true);
            found = true;
            from = start + 1;
        }
    }
    if !found {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut index = 0;
    while index < text_bytes.len() {
        if covered[index] {
            out.push_str(REDACTED);
            while index < text_bytes.len() && covered[index] {
                index += 1;
            }
        } else {
            // A run is made of the key's bytes, which are visible ASCII (a header value), so
            // whatever lies outside runs is copied whole characters at a time.
            let width = text[index..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[index..index + width]);
            index += width;
        }
    }
    Some(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_replaced_and_words_are_kept() {
        let cases = [
            (
                "invalid API key in header 'Authorization: Bearer abc'",
                "invalid API key in header 'Authorization: Bearer [redacted]'",
            ),
            ("Basic dXNlcjpwYXNz rejected", "Basic [redacted] rejected"),
            ("No such key: sk_live_51H8xyzABC", "No such key: [redacted]"),
            (
                "token 0123456789abcdef0123456789abcdef expired",
                "token [redacted] expired",
            ),
            (
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl is not valid",
                "[redacted] is not valid",
            ),
            ("card declined", "card declined"),
            (
                "Missing required param: currency.",
                "Missing required param: currency.",
            ),
            ("", ""),
        ];
        for (text, expected) in cases {
            assert_eq!(redact(text), expected, "{text}");
        }
    }

    #[test]
    fn every_run_of_eight_characters_of_the_key_is_scrubbed() {
        const KEY: &str = "QwertyUiopAsdfGhjk";
        let cases = [
            (
                "refused QwertyUiopAsdfGhjk here",
                Some("refused [redacted] here"),
            ),
            // Cut short, or only its end: still eight in a row.
            ("refused QwertyUi", Some("refused [redacted]")),
            ("…dfGhjk and UiopAsdf…", Some("…dfGhjk and [redacted]…")),
            // Seven in a row is not enough to narrow the key down.
            ("refused QwertyU", None),
            ("nothing of it", None),
        ];
        for (text, expected) in cases {
            assert_eq!(scrub_key(text, KEY).as_deref(), expected, "{text}");
        }
        // A key shorter than a run is scrubbed whole.
        assert_eq!(scrub_key("k=abc;", "abc").as_deref(), Some("k=[redacted];"));
        assert_eq!(scrub_key("anything", ""), None);
    }
}
