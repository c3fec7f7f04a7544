//! The TLS client side every outbound connection of toolhost shares (remote MCP servers, a
//! syslog receiver): rustls with the ring provider, trusting the public web's roots, or only
//! the certificate authorities of a PEM file the operator names.

use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::{self, PemObject};

/// Why a TLS configuration could not be made from the operator's files; each names its file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: pem::Error },
    #[error("bad certificate in {}: {source}", path.display())]
    BadCertificate { path: PathBuf, source: pem::Error },
    #[error("unusable certificate in {}: {source}", path.display())]
    Unusable { path: PathBuf, source: rustls::Error },
    #[error("{} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("TLS setup failed: {0}")]
    Setup(rustls::Error),
}

/// The authorities of a PEM file, each certificate usable (also a TLS listener's client CA).
///
/// # Errors
/// The file cannot be read, or a certificate in it is bad or unusable; the error names it.
pub fn roots_of(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })?;
    for cert in certs {
        let cert = cert.map_err(|source| TlsError::BadCertificate { path: path.to_path_buf(), source })?;
        roots.add(cert).map_err(|source| TlsError::Unusable { path: path.to_path_buf(), source })?;
    }
    Ok(roots)
}

/// A client configuration trusting `ca_file`'s authorities, or the public web's roots.
///
/// # Errors
/// The file cannot be read or holds no usable certificate; the message names it.
pub fn client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, TlsError> {
    let roots = match ca_file {
        Some(path) => {
            let roots = roots_of(path)?;
            if roots.is_empty() {
                return Err(TlsError::NoCertificate(path.to_path_buf()));
            }
            roots
        }
        None => rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() },
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
