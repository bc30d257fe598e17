//! Native HTTPS: a listener for `axum::serve` that completes TLS handshakes (ALPN `h2` and
//! `http/1.1`) and a certificate that is re-read without a restart, when its files change or
//! on SIGHUP. A file broken at reload keeps the old certificate serving.
//!
//! Handshakes run in their own tasks, so a slow or silent client never holds up `accept`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;

use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; more wait in the kernel's accept queue.
const HANDSHAKES_MAX: usize = 256;
/// How often the certificate files are checked for changes.
const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// The PEM files of the server's certificate chain and private key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Reads and checks the certificate chain and key: both readable PEM, and the key the one the
/// certificate was issued for. Errors name the file and what is wrong with it.
pub fn load(files: &TlsFiles) -> Result<Arc<CertifiedKey>, String> {
    let cert_pem = read(&files.cert, "tls_cert")?;
    let key_pem = read(&files.key, "tls_key")?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls_cert {}: not a PEM certificate chain ({e})", files.cert.display()))?;
    if chain.is_empty() {
        return Err(format!("tls_cert {}: holds no PEM CERTIFICATE block", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("tls_key {}: not a PEM private key ({e})", files.key.display()))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
        format!(
            "tls_key {} does not match the certificate in {} ({e}); give the key the certificate was issued for",
            files.key.display(),
            files.cert.display()
        )
    })?;
    Ok(Arc::new(certified))
}

fn read(path: &Path, setting: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{setting} {}: cannot be read ({e})", path.display()))
}

/// A TLS listener whose accepted streams have finished their handshake.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp` with the certificate in `files` (already checked by [`load`]),
    /// and watches the files until `shutdown`. Accepted sockets get `user_timeout` as their TCP
    /// user timeout (`http/stall.rs`).
    pub(crate) fn start(
        tcp: TcpListener,
        user_timeout: Duration,
        files: TlsFiles,
        first: Arc<CertifiedKey>,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
    ) -> std::io::Result<Self> {
        let local_addr = tcp.local_addr()?;
        let resolver = Arc::new(CurrentCertificate(RwLock::new(first)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (sender, ready) = mpsc::channel(HANDSHAKES_MAX);
        tokio::spawn(accept_loop(tcp, user_timeout, acceptor, sender, shutdown.clone()));
        tokio::spawn(reload_loop(files, resolver, metrics, shutdown));
        Ok(TlsListener { ready, local_addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ends only at shutdown, after axum stopped accepting.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

async fn accept_loop(
    tcp: TcpListener,
    user_timeout: Duration,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    shutdown: Shutdown,
) {
    let handshakes = Arc::new(Semaphore::new(HANDSHAKES_MAX));
    loop {
        let Ok(permit) = handshakes.clone().acquire_owned().await else { return };
        let Some((stream, peer)) = crate::http::stall::accept(&tcp, user_timeout, &shutdown).await else {
            return;
        };
        let acceptor = acceptor.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Re-reads the files when their modification time changes, or on SIGHUP.
async fn reload_loop(
    files: TlsFiles,
    resolver: Arc<CurrentCertificate>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) {
    let mut seen = modified(&files);
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        #[cfg(unix)]
        let signalled = async {
            match hangup.as_mut() {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let signalled = std::future::pending::<Option<()>>();
        let forced = tokio::select! {
            _ = tokio::time::sleep(RELOAD_CHECK_INTERVAL) => false,
            _ = signalled => true,
            _ = shutdown.cancelled() => return,
        };
        let now = modified(&files);
        if !forced && now == seen {
            continue;
        }
        seen = now;
        match load(&files) {
            Ok(certified) => {
                *resolver.0.write().unwrap_or_else(|e| e.into_inner()) = certified;
                metrics.tls_reloads_total().add(["loaded".into()], 1);
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
            }
            Err(reason) => {
                metrics.tls_reloads_total().add(["refused".into()], 1);
                tracing::warn!(%reason, "TLS certificate not reloaded; still serving the previous one")
            }
        }
    }
}

fn modified(files: &TlsFiles) -> (Option<SystemTime>, Option<SystemTime>) {
    let time = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    (time(&files.cert), time(&files.key))
}

/// The certificate handshakes use now; swapped whole at reload.
#[derive(Debug)]
struct CurrentCertificate(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}
