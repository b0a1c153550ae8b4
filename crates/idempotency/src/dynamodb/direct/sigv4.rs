//! SigV4 for the one request shape the direct client sends: a POST to the endpoint's root with
//! the Host, content type and target headers, and the session token when the credentials have
//! one. `aws-sigv4`'s general signer parses the URL again, builds and sorts a header map, formats
//! the scope three times and derives the day's signing key (four HMACs) for every request: about
//! 8% of an order's CPU in the order function this crate was built for (its repository's CPU
//! benchmark). Here the canonical request is written straight into one buffer, and the signing key
//! is kept for its day. The key and the final HMAC are still `aws-sigv4`'s own functions, and
//! the tests check every header against its `sign` over hosts, regions, times, tokens and bodies.
//! Any other shape (an endpoint with a path) is signed by `aws-sigv4` itself.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use sha2::{Digest, Sha256};

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const SERVICE: &str = "dynamodb";

/// The headers a request gains from its signature. Its `Debug` redacts the session token and
/// the authorization, as the SDK's request `Debug` does.
#[derive(PartialEq, Eq)]
pub(super) struct Signature {
    pub date: String,
    pub security_token: Option<String>,
    pub authorization: String,
}

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signature")
            .field("date", &self.date)
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "** redacted **"),
            )
            .field("authorization", &"** redacted **")
            .finish()
    }
}

/// The day's signing key, for one secret in one region. Its `Debug` shows neither the secret
/// nor the key derived from it (which signs anything for a day), as the SDK's `Credentials`
/// redacts its secret.
struct DayKey {
    day: u64,
    region: String,
    secret: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for DayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DayKey")
            .field("day", &self.day)
            .field("region", &self.region)
            .field("secret", &"** redacted **")
            .field("key", &"** redacted **")
            .finish()
    }
}

/// Signs the client's requests; keeps the signing key of the day.
#[derive(Debug, Default)]
pub(super) struct Signer {
    key: Mutex<Option<DayKey>>,
}

impl Signer {
    /// The day's signing key, once one was derived: for a test that searches text for it.
    #[cfg(test)]
    pub(super) fn day_key(&self) -> Option<Vec<u8>> {
        let key = self.key.lock().ok()?;
        Some(key.as_ref()?.key.clone())
    }

    /// The signature of a POST of `body` to `host`'s root with the JSON API's content type and
    /// `target`, at `now`, with `credentials`, in `region`.
    pub fn sign(
        &self,
        credentials: &Credentials,
        region: &str,
        host: &str,
        target: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Signature {
        let seconds = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let (date, day) = amz_date(seconds);
        let token = credentials.session_token();
        let signed_headers = if token.is_some() {
            "content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
        } else {
            "content-type;host;x-amz-date;x-amz-target"
        };
        // The canonical request: method, path, query (none), each header as `name:value`,
        // a blank line, the signed header names, the body's hash.
        let mut canonical = String::with_capacity(320 + host.len() + token.map_or(0, str::len));
        canonical.push_str("POST\n/\n\ncontent-type:");
        canonical.push_str(super::wire::CONTENT_TYPE);
        canonical.push_str("\nhost:");
        canonical.push_str(host.trim());
        canonical.push_str("\nx-amz-date:");
        canonical.push_str(&date);
        if let Some(token) = token {
            canonical.push_str("\nx-amz-security-token:");
            canonical.push_str(token.trim());
        }
        canonical.push_str("\nx-amz-target:");
        canonical.push_str(target.trim());
        canonical.push_str("\n\n");
        canonical.push_str(signed_headers);
        canonical.push('\n');
        push_hex(&mut canonical, &Sha256::digest(body));
        let scope = format!("{}/{region}/{SERVICE}/aws4_request", &date[..8]);
        let mut to_sign = String::with_capacity(ALGORITHM.len() + date.len() + scope.len() + 67);
        to_sign.push_str(ALGORITHM);
        to_sign.push('\n');
        to_sign.push_str(&date);
        to_sign.push('\n');
        to_sign.push_str(&scope);
        to_sign.push('\n');
        push_hex(&mut to_sign, &Sha256::digest(canonical.as_bytes()));
        let signature = {
            let mut kept = self
                .key
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let secret = credentials.secret_access_key();
            let current = kept
                .as_ref()
                .is_some_and(|k| k.day == day && k.region == region && k.secret == secret);
            if !current {
                let key = aws_sigv4::sign::v4::generate_signing_key(secret, now, region, SERVICE);
                *kept = Some(DayKey {
                    day,
                    region: region.to_owned(),
                    secret: secret.to_owned(),
                    key: key.as_ref().to_vec(),
                });
            }
            let key = kept.as_ref().map_or(&[][..], |k| k.key.as_slice());
            aws_sigv4::sign::v4::calculate_signature(key, to_sign.as_bytes())
        };
        let authorization = format!(
            "{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credentials.access_key_id()
        );
        Signature {
            date,
            security_token: token.map(str::to_owned),
            authorization,
        }
    }
}

/// `bytes` in lower-case hex at the end of `out`: by table, not by `{:02x}`, whose formatter
/// machinery per byte cost as much as a hash of the body.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// The `x-amz-date` of `seconds` since the epoch (`20261206T043300Z`), and its day number.
fn amz_date(seconds: u64) -> (String, u64) {
    let day = seconds / 86_400;
    let in_day = seconds % 86_400;
    let (year, month, date) = lambda_kit::clock::civil_from_days(day);
    (
        format!(
            "{year:04}{month:02}{date:02}T{:02}{:02}{:02}Z",
            in_day / 3_600,
            in_day % 3_600 / 60,
            in_day % 60
        ),
        day,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    use aws_sigv4::sign::v4;
    use aws_smithy_runtime_api::client::identity::Identity;
    use std::time::Duration;

    /// `aws-sigv4`'s own signature of the same request: the reference.
    fn reference(
        credentials: &Credentials,
        region: &str,
        url: &str,
        host: &str,
        target: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Signature {
        let identity: Identity = credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(SERVICE)
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .expect("params")
            .into();
        let headers = [
            ("content-type", "application/x-amz-json-1.0"),
            ("x-amz-target", target),
            ("host", host),
        ];
        let signable = SignableRequest::new(
            "POST",
            url,
            headers.iter().copied(),
            SignableBody::Bytes(body),
        )
        .expect("signable");
        let (instructions, _) = sign(signable, &params).expect("signed").into_parts();
        let found = |name: &str| {
            instructions
                .headers()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_owned())
        };
        assert_eq!(
            instructions.headers().count(),
            2 + usize::from(credentials.session_token().is_some()),
            "aws-sigv4 adds no header this signer does not"
        );
        Signature {
            date: found("x-amz-date").expect("a date"),
            security_token: found("x-amz-security-token"),
            authorization: found("authorization").expect("an authorization"),
        }
    }

    /// Every header this signer writes is the one `aws-sigv4` writes for the same request, over
    /// hosts with and without ports, regions, credentials with and without a session token,
    /// bodies, targets and times from the epoch to past 2100 (leap days, year ends, midnight),
    /// the signing key kept across requests of one day and renewed at the next or for a new
    /// secret.
    #[test]
    fn signatures_are_aws_sigv4s() {
        let credentials = [
            Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", None, None, "t"),
            Credentials::new(
                "ASIAEXAMPLE",
                "another/secret+key",
                Some("FwoGZXIvYXdzEJr//////////wEaDH+token=".into()),
                None,
                "t",
            ),
        ];
        let places = [
            (
                "eu-west-1",
                "https://dynamodb.eu-west-1.amazonaws.com/",
                "dynamodb.eu-west-1.amazonaws.com",
            ),
            ("us-east-1", "http://127.0.0.1:8000/", "127.0.0.1:8000"),
            (
                "us-gov-west-1",
                "https://dynamodb-fips.us-gov-west-1.amazonaws.com/",
                "dynamodb-fips.us-gov-west-1.amazonaws.com",
            ),
            ("cn-north-1", "http://localhost:4566/", "localhost:4566"),
        ];
        let bodies: [&[u8]; 3] = [
            b"",
            b"{}",
            br#"{"TableName":"orders","Key":{"pk":{"S":"o-\u00e9\n1"}}}"#,
        ];
        let targets = [
            "DynamoDB_20120810.UpdateItem",
            "DynamoDB_20120810.DeleteItem",
        ];
        let mut times = vec![
            0,
            951_782_400,   // 2000-02-29
            1_703_980_799, // 2023-12-30T23:59:59
            1_704_067_199, // 2023-12-31T23:59:59
            1_704_067_200, // 2024-01-01
            1_709_164_800, // 2024-02-29
            1_796_515_200, // 2026-12-06
            4_107_542_399, // 2100-02-28T23:59:59
            4_107_542_400, // 2100-03-01
        ];
        let mut rng = fastrand::Rng::with_seed(7);
        times.extend((0..40).map(|_| rng.u64(0..5_000_000_000)));
        let signer = Signer::default();
        let mut checked = 0;
        for &seconds in &times {
            let now = UNIX_EPOCH
                + Duration::from_secs(seconds)
                + Duration::from_millis(rng.u64(0..1_000));
            for credentials in &credentials {
                for (region, url, host) in places {
                    for body in bodies {
                        for target in targets {
                            let ours = signer.sign(credentials, region, host, target, body, now);
                            let theirs =
                                reference(credentials, region, url, host, target, body, now);
                            assert_eq!(ours, theirs, "{seconds} {region} {host} {target}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, times.len() * 2 * 4 * 3 * 2);
    }

    /// The kept signing key is renewed when the day changes for the same secret and region,
    /// and when the secret changes within a day (rotated credentials).
    #[test]
    fn the_kept_signing_key_follows_the_day_and_the_secret() {
        let first = Credentials::new("AKID1", "secret-one", None, None, "t");
        let rotated = Credentials::new("AKID2", "secret-two", Some("token".into()), None, "t");
        let (region, url, host) = (
            "eu-west-1",
            "https://dynamodb.eu-west-1.amazonaws.com/",
            "dynamodb.eu-west-1.amazonaws.com",
        );
        let signer = Signer::default();
        let day = 1_796_515_200;
        for (credentials, seconds) in [
            (&first, day),
            (&first, day + 60),
            (&first, day + 86_400),
            (&first, day + 86_400 + 1),
            (&rotated, day + 86_400 + 2),
            (&first, day + 86_400 + 3),
            (&first, day + 3 * 86_400),
        ] {
            let now = UNIX_EPOCH + Duration::from_secs(seconds);
            let target = "DynamoDB_20120810.UpdateItem";
            let ours = signer.sign(credentials, region, host, target, b"{}", now);
            let theirs = reference(credentials, region, url, host, target, b"{}", now);
            assert_eq!(ours, theirs, "{seconds} {}", credentials.access_key_id());
        }
    }

    #[test]
    fn dates_are_written_as_amz_dates() {
        assert_eq!(amz_date(0), ("19700101T000000Z".to_owned(), 0));
        assert_eq!(amz_date(1_709_164_800 + 3_723).0, "20240229T010203Z");
        assert_eq!(amz_date(4_107_542_400).0, "21000301T000000Z");
    }
}
