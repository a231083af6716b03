//! Serving the router over TCP or TLS (rustls), with a graceful shutdown
//! and a background task that keeps the state current with the log (and,
//! on a Kafka store, knows who writes it).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::http::{App, router};
use crate::store::Storage;

/// A TLS configuration from PEM files: the certificate chain and its
/// private key. Errors name the file and the way out.
pub fn load_tls(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "TLS key {}: {e}; give a PEM private key (PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, private_key)
    .map_err(|e| {
        format!(
            "TLS certificate {} and key {} do not make a usable pair: {e}",
            cert.display(),
            key.display()
        )
    })?;
    Ok(Arc::new(config))
}

/// How long a connection may take to send a request's headers, from the
/// moment it is opened or its previous request was answered (30 s, the
/// idle timeout of Confluent's Jetty), and, over TLS, to complete its
/// handshake. A connection that sends nothing in that time is closed, so
/// that clients which open connections and stall (no credentials are
/// needed for that: they come with the headers) cannot hold every file
/// descriptor the registry may open.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves until `shutdown` completes, then stops accepting and lets the
/// requests in flight finish (plain TCP and TLS alike). Also polls the
/// log for other instances' writes every `poll_interval`. Connections
/// that stall are closed after [`IDLE_TIMEOUT`].
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let poller = {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let interval = app.registry.settings.poll_interval;
            loop {
                tokio::time::sleep(interval).await;
                if let Err(e) = app.registry.catch_up().await {
                    tracing::warn!(error = %e.message, "could not read the registry log");
                }
                // Who writes, for /metrics.
                if let Storage::Kafka(log) = app.registry.log()
                    && let Err(e) = log.read_writer().await
                {
                    tracing::warn!(error = %e, "could not read the writer topic");
                }
            }
        })
    };
    let routes = router(app);
    let result = accept_loop(listener, tls.map(TlsAcceptor::from), routes, shutdown).await;
    poller.abort();
    result
}

/// Accepts connections until `shutdown`, each served on a task of its own
/// (over TLS when `acceptor` is given), then waits for the requests in
/// flight.
async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    routes: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(routes.clone());
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        match &acceptor {
            None => {
                tokio::spawn(async move {
                    let connection = builder.serve_connection(TokioIo::new(tcp), service);
                    if let Err(e) = watcher.watch(connection.into_owned()).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let stream =
                        match tokio::time::timeout(IDLE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = watcher.watch(connection.into_owned()).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
