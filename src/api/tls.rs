//! TLS for TCP listeners (required off loopback): rustls with the ring provider. With a client
//! CA, a client may present a certificate; a verified one identifies the caller by its subject
//! (`[[access.agents]] subjects`). Clients without one can still present a bearer token.
//!
//! Handshakes run on their own tasks, each bounded in time, at most [`MAX_HANDSHAKES`] at once:
//! a client that stalls its handshake holds up nobody else.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::door::model::{TlsFiles, TlsPeerInfo};
use crate::listen::{CaFileError, ca_roots};

/// Why a listener's TLS configuration could not be made from its files; each names its file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read certificates from {}: {source}", path.display())]
    ReadCertificates { path: PathBuf, source: pem::Error },
    #[error("cannot read a private key from {}: {source}", path.display())]
    ReadKey { path: PathBuf, source: pem::Error },
    #[error("TLS setup failed: {0}")]
    Setup(rustls::Error),
    #[error(transparent)]
    ClientCaFile(#[from] CaFileError),
    #[error("cannot use {} as the client CA: {source}", path.display())]
    ClientCa { path: PathBuf, source: rustls::server::VerifierBuilderError },
    #[error("{}: {source}", path.display())]
    Certificate { path: PathBuf, source: rustls::Error },
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_HANDSHAKES: usize = 256;

/// A TLS connection and the client certificate subject it was verified with.
pub(crate) struct TlsConnection {
    stream: TlsStream<TcpStream>,
    subject: Option<String>,
}

/// The listener's rustls configuration from its files.
///
/// # Errors
/// A message naming the file that could not be used.
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(Iterator::collect)
        .map_err(|source| TlsError::ReadCertificates { path: files.cert.clone(), source })?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::ReadKey { path: files.key.clone(), source })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().map_err(TlsError::Setup)?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = ca_roots(path)?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|source| TlsError::ClientCa { path: path.clone(), source })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|source| TlsError::Certificate { path: files.cert.clone(), source })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts TCP connections, runs their handshakes, and hands the finished ones over.
pub(crate) fn incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    tracker: &TaskTracker,
    cancel: CancellationToken,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<TlsConnection>> {
    let acceptor = TlsAcceptor::from(config);
    super::gate::accept_each(listener, tracker, cancel, MAX_HANDSHAKES, move |stream| {
        let acceptor = acceptor.clone();
        async move {
            if super::gate::from_a_server(&stream).await {
                return None;
            }
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let subject = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()).and_then(subject_of);
                    Some(TlsConnection { stream, subject })
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "a TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!("a TLS handshake timed out");
                    None
                }
            }
        }
    })
}

/// A certificate's subject in RFC 4514 form (`CN=bot,O=Example`).
fn subject_of(cert: &CertificateDer<'_>) -> Option<String> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(cert.as_ref()).ok()?;
    Some(cert.tbs_certificate().subject().to_string())
}

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = TlsPeerInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        TlsPeerInfo(self.subject.clone())
    }
}

impl AsyncRead for TlsConnection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
