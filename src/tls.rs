//! TLS for every HTTP client of the container: one set of trusted roots, compiled in.
//!
//! The system's trust store would cost 3 to 5 ms to read and parse on a cold start (once per
//! HTTP stack), for roots that are the same Mozilla set Lambda's image ships. The roots here
//! come from `webpki-roots` (Mozilla's root program, updated with the crate) as trust anchors
//! compiled into the binary: nothing to read or parse at all. Every client gets the same rustls
//! configuration (the AWS SDK's too: see [`crate::aws::http_client`]).

use std::sync::Arc;

use rustls::RootCertStore;

/// The trusted roots: Mozilla's, as compiled-in trust anchors.
fn roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// The rustls configuration of every HTTP client: the compiled-in roots, aws-lc as the crypto
/// provider (as the AWS SDK's own stack), TLS 1.2 and 1.3.
pub fn client_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots())
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_roots_are_mozillas_set() {
        // Mozilla's program has held well over 100 roots for years; a handful would mean a
        // broken build of the crate, not a policy change.
        let roots = roots();
        assert!(roots.len() > 100, "{} roots", roots.len());
        assert!(client_config().is_ok());
    }
}
