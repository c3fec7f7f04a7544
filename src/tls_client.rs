//! The TLS client side every outbound connection of toolhost shares (remote MCP servers, a
//! syslog receiver): rustls with the ring provider, trusting the public web's roots, or only
//! the certificate authorities of a PEM file the operator names.

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A client configuration trusting `ca_file`'s authorities, or the public web's roots.
///
/// # Errors
/// The file cannot be read or holds no usable certificate; the message names it.
pub fn client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|err| format!("bad certificate in {}: {err}", path.display()))?;
                roots.add(cert).map_err(|err| format!("unusable certificate in {}: {err}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("{} holds no certificate", path.display()));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS setup failed: {err}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
