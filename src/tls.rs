//! TLS for every HTTP client of the container: one set of trusted roots, compiled in.
//!
//! Both HTTP stacks would otherwise read and parse the system's trust store at start-up, each on
//! its own: 3 to 5 ms apiece on a cold start, for roots that are the same Mozilla set Lambda's
//! image ships. The roots here come from `webpki-root-certs` (Mozilla's root program, updated
//! with the crate), parsed once per container in about 0.2 ms, and every client gets the same
//! rustls configuration (the AWS SDK's too: see [`crate::aws::http_client`]).

use std::sync::{Arc, OnceLock};

use rustls::RootCertStore;

/// The trusted roots, parsed once per container.
fn roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
        roots
    })
}

/// The rustls configuration of every HTTP client: the compiled-in roots, aws-lc as the crypto
/// provider (as the AWS SDK's own stack), TLS 1.2 and 1.3.
pub fn client_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots().clone())
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_roots_are_mozillas_set() {
        // Mozilla's program has held well over 100 roots for years; a handful would mean a
        // broken build of the crate, not a policy change.
        assert!(roots().len() > 100, "{} roots", roots().len());
        assert!(client_config().is_ok());
    }
}
