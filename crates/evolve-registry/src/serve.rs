//! Serving the router over TCP or TLS (rustls), with a graceful shutdown
//! and a background task that keeps the state current with the log (and,
//! on a Kafka store, knows who writes it).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
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

/// Serves until `shutdown` completes, then lets requests in flight finish
/// (plain TCP) or stops accepting (TLS). Also polls the log for other
/// instances' writes every `poll_interval`.
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
    let result = match tls {
        None => {
            axum::serve(listener, routes)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(config) => serve_tls(listener, TlsAcceptor::from(config), routes, shutdown).await,
    };
    poller.abort();
    result
}

async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    routes: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let routes = routes.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let service = TowerToHyperService::new(routes);
            if let Err(e) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
