//! TLS for every PostgreSQL connection evolve makes, configured with
//! libpq's connection parameters.
//!
//! [`connect`](crate::connect) reads them from the connection string, in
//! either form (`postgres://h/db?sslmode=verify-full&sslrootcert=/ca.pem`
//! or `host=h dbname=db sslmode=verify-full sslrootcert=/ca.pem`), else
//! from the connection service, else from `PGSSLMODE`, `PGSSLROOTCERT`,
//! `PGSSLCERT` and `PGSSLKEY`;
//! [`tls_settings`](crate::tls_settings) gives them to callers that open
//! sessions of their own (the pipeline's replication sessions). TLS is
//! rustls with the ring provider; no OpenSSL.
//!
//! # `sslmode`
//!
//! | `sslmode`           | encrypted                                   | server certificate checked                                   |
//! |---------------------|---------------------------------------------|--------------------------------------------------------------|
//! | `disable`           | never                                       | -                                                            |
//! | `allow`             | only if the server refuses a plain session  | as `prefer`                                                  |
//! | `prefer` (default)  | if the server offers TLS, else plain        | chain against `sslrootcert` if given, else not at all        |
//! | `require`           | always; fails if the server has no TLS      | chain against `sslrootcert` if given (as `verify-ca`), else not at all |
//! | `verify-ca`         | always                                      | chain against `sslrootcert` (required)                       |
//! | `verify-full`       | always                                      | chain against `sslrootcert` (required), and the host name or IP address connected to against the certificate's names |
//!
//! "Not at all" means the session is encrypted but the server is not
//! authenticated: whoever sits on the path can impersonate it. The
//! handshake's signatures are still checked against the certificate the
//! server sent. Only `verify-full` protects against impersonation; use it
//! (with the name the certificate was issued for) for anything that crosses
//! a network you do not control.
//!
//! # Other parameters
//!
//! - `sslrootcert`: a PEM file of the CA certificates to trust (an
//!   intermediate CA works too). For public CAs name the system bundle,
//!   e.g. `/etc/ssl/certs/ca-certificates.crt`. A self-signed server
//!   certificate may be its own CA, as with psql: when the certificate the
//!   server presents is itself in the file (and self-signed), its signature
//!   and validity dates are checked, and under `verify-full` the host name.
//! - `sslcert` and `sslkey`: a client certificate (PEM, with any
//!   intermediates after it) and its unencrypted private key (PEM: PKCS#8,
//!   PKCS#1 or SEC1), for `cert` authentication or `clientcert=verify-*`.
//!   Both or neither.
//! - `sslnegotiation`: `postgres` (default) or `direct` (PostgreSQL 17),
//!   handled by tokio-postgres.
//!
//! # Differences from libpq
//!
//! - Nothing is read from `~/.postgresql/` (`root.crt`, `postgresql.crt`,
//!   `postgresql.key`): name the files in the connection string, the
//!   service or the `PGSSL*` variables. `sslrootcert=system` is refused for
//!   the same reason: name the bundle file.
//! - Host names are matched against the certificate's subjectAltName only,
//!   never its common name.
//! - A file that is named but cannot be read is an error in every mode
//!   (libpq ignores a missing `sslrootcert` under `prefer` and `require`).
//! - A TLS handshake that fails under `prefer` or `allow` is an error, not a
//!   retry in plain text.
//! - No channel binding (SCRAM authentication works, as `SCRAM-SHA-256`
//!   without `-PLUS`; `channel_binding=require` fails), no CRLs (`sslcrl`),
//!   no encrypted keys (`sslpassword`), no `ssl_min_protocol_version`:
//!   these keys are refused as unknown.
//! - As in libpq, connections over Unix-domain sockets never use TLS,
//!   whatever the mode.
//!
//! Errors name the target (`user@host:port/db`, never the password) and
//! say what failed: `server does not support TLS but sslmode=require`,
//! `certificate verify failed: ...`, `cannot read sslrootcert /x/ca.pem:
//! No such file or directory`.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

use crate::x509;

/// The parameters read into [`TlsSettings`].
pub(crate) const TLS_KEYS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// libpq's `sslmode`: whether TLS is used and what of the server's
/// certificate is checked (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Plain first; TLS only if the server refuses the plain session.
    Allow,
    /// TLS if the server offers it, plain otherwise. The default.
    #[default]
    Prefer,
    /// TLS or nothing; the certificate is checked only if `sslrootcert`
    /// is given (then as [`SslMode::VerifyCa`]).
    Require,
    /// TLS, with the certificate chain checked against `sslrootcert`.
    VerifyCa,
    /// TLS, with the chain checked and the host name matched.
    VerifyFull,
}

impl SslMode {
    /// Every mode, in libpq's order.
    pub const ALL: [SslMode; 6] = [
        SslMode::Disable,
        SslMode::Allow,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    /// The mode's name in a connection string, e.g. `verify-full`.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Option<SslMode> {
        SslMode::ALL.into_iter().find(|m| m.as_str() == value)
    }

    /// The session fails unless it is encrypted.
    pub fn requires_tls(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is checked of the server's certificate once TLS is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verification {
    /// Nothing: any certificate is accepted (the handshake's signatures are
    /// still checked against it).
    Unverified,
    /// The chain up to a CA of `sslrootcert`, and validity dates; not the
    /// names in it.
    Chain,
    /// The chain, and that the certificate names the host connected to.
    ChainAndHostName,
}

/// The TLS parameters of a connection string, checked for consistency
/// (files are read only when connecting).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsSettings {
    /// `sslmode`, [`SslMode::Prefer`] when absent.
    pub mode: SslMode,
    /// `sslrootcert`: PEM file of trusted CA certificates.
    pub root_cert: Option<PathBuf>,
    /// `sslcert`: PEM file of the client certificate (chain).
    pub client_cert: Option<PathBuf>,
    /// `sslkey`: PEM file of the client certificate's private key.
    pub client_key: Option<PathBuf>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            mode: SslMode::Prefer,
            root_cert: None,
            client_cert: None,
            client_key: None,
        }
    }
}

impl TlsSettings {
    /// Reads the [`TLS_KEYS`] of a resolved connection string. The error
    /// is the reason, for [`PgError::BadUrl`](crate::PgError::BadUrl).
    pub(crate) fn from_params(params: Vec<(&'static str, String)>) -> Result<TlsSettings, String> {
        let mut settings = TlsSettings::default();
        for (key, value) in params {
            let path = (!value.is_empty()).then(|| PathBuf::from(&value));
            match key {
                "sslmode" => {
                    settings.mode = SslMode::parse(&value).ok_or_else(|| {
                        let all: Vec<&str> = SslMode::ALL.iter().map(|m| m.as_str()).collect();
                        format!(
                            "sslmode \"{value}\" is not one of {}; use one of them (require encrypts, verify-full also checks the server's certificate and name)",
                            all.join(", ")
                        )
                    })?;
                }
                "sslrootcert" => settings.root_cert = path,
                "sslcert" => settings.client_cert = path,
                "sslkey" => settings.client_key = path,
                _ => {}
            }
        }
        if settings.root_cert.as_deref() == Some(Path::new("system")) {
            return Err("sslrootcert=system is not supported; name a PEM file of CA certificates instead, e.g. sslrootcert=/etc/ssl/certs/ca-certificates.crt".into());
        }
        if matches!(settings.mode, SslMode::VerifyCa | SslMode::VerifyFull)
            && settings.root_cert.is_none()
        {
            return Err(format!(
                "sslmode={} needs sslrootcert, the PEM file of the CA certificates to check the server's certificate against",
                settings.mode
            ));
        }
        if settings.client_cert.is_some() != settings.client_key.is_some() {
            return Err("sslcert and sslkey go together: give both (the client certificate and its private key, PEM) or neither".into());
        }
        Ok(settings)
    }

    /// What is checked of the server's certificate when TLS is used
    /// (never, under [`SslMode::Disable`]).
    pub fn verification(&self) -> Verification {
        match self.mode {
            SslMode::VerifyFull => Verification::ChainAndHostName,
            SslMode::VerifyCa => Verification::Chain,
            _ if self.root_cert.is_some() => Verification::Chain,
            _ => Verification::Unverified,
        }
    }
}

// ------------------------------------------------------------ client config

/// The rustls configuration for `settings`: its files read, its verifier
/// chosen. The error is the one-line reason, naming the file.
pub(crate) fn client_config(settings: &TlsSettings) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = match settings.verification() {
        Verification::Unverified => None,
        Verification::Chain | Verification::ChainAndHostName => Some(root_store(settings)?),
    };
    let with_names = match (&roots, settings.verification()) {
        (Some((store, _)), Verification::ChainAndHostName) => Some(
            WebPkiServerVerifier::builder_with_provider(store.clone(), provider.clone())
                .build()
                .map_err(|e| format!("cannot use sslrootcert: {e}"))?,
        ),
        _ => None,
    };
    let verifier = Arc::new(Verifier {
        roots,
        with_names,
        provider: provider.clone(),
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => {
            let chain = read_certificates("sslcert", cert)?;
            let key = read_private_key(key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("cannot use sslcert {} with sslkey: {e}", cert.display()))?
        }
        _ => builder.with_no_client_auth(),
    };
    // What libpq 17 sends; required by servers for sslnegotiation=direct,
    // ignored by older ones.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(Arc::new(config))
}

/// A rustls configuration for evolve's HTTPS clients: the server's
/// certificate chain and host name checked against the CA certificates of
/// `root_cert` (PEM), ALPN `http/1.1`. The error names the file.
pub fn https_client_config(root_cert: &Path) -> Result<Arc<ClientConfig>, String> {
    let settings = TlsSettings {
        mode: SslMode::VerifyFull,
        root_cert: Some(root_cert.to_path_buf()),
        client_cert: None,
        client_key: None,
    };
    let mut config = (*client_config(&settings)?).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of `sslrootcert`, as rustls's trust anchors and as
/// they are (to recognise a self-signed server certificate among them).
type Roots = (Arc<RootCertStore>, Vec<CertificateDer<'static>>);

fn root_store(settings: &TlsSettings) -> Result<Roots, String> {
    let Some(path) = &settings.root_cert else {
        return Err(format!("sslmode={} needs sslrootcert", settings.mode));
    };
    let certs = read_certificates("sslrootcert", path)?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs.iter().cloned());
    if added == 0 {
        return Err(format!(
            "sslrootcert {} holds no usable CA certificate",
            path.display()
        ));
    }
    Ok((Arc::new(roots), certs))
}

fn read_file(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map_err(|e| format!("cannot read {what} {}: {}", path.display(), io_reason(&e)))
}

/// An I/O error's message without the ` (os error 2)` tail.
pub(crate) fn io_reason(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_string(),
        _ => text,
    }
}

fn read_certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_file(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} {} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {} holds no certificate (expected PEM, -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_file("sslkey", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "sslkey {} holds no usable private key (expected an unencrypted PEM key: PKCS#8, PKCS#1 or SEC1): {e}",
            path.display()
        )
    })
}

/// The server-certificate check for every mode.
///
/// Without `roots` (`prefer`/`require` without `sslrootcert`): any
/// certificate. With `roots` (`verify-ca`): the chain up to a trusted CA,
/// validity dates and key usage, as rustls's own verifier checks them; with
/// `with_names` too (`verify-full`): that verifier, which also checks the
/// host name. Either way the handshake must be signed by the key of the
/// certificate presented (so the peer holds that key).
///
/// A self-signed server certificate that is itself in `sslrootcert` is
/// trusted as it is, as OpenSSL (and so psql) trusts it: its own signature
/// and validity dates are checked, and under `verify-full` the host name.
/// rustls alone refuses it (`CaUsedAsEndEntity`) when it says `CA:TRUE`, as
/// `openssl req -x509` makes it.
#[derive(Debug)]
struct Verifier {
    roots: Option<Roots>,
    with_names: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some((store, certs)) = &self.roots else {
            return Ok(ServerCertVerified::assertion());
        };
        if certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            self.verify_trusted_self_signed(end_entity, now)?;
            if self.with_names.is_some() {
                let cert = ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&cert, server_name)?;
            }
            return Ok(ServerCertVerified::assertion());
        }
        if x509::parse(end_entity).is_some_and(|c| c.issuer == c.subject) {
            // Self-signed, and not in sslrootcert: no CA there signed it
            // (rustls would say CaUsedAsEndEntity of one with CA:TRUE).
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ));
        }
        if let Some(verifier) = &self.with_names {
            return verifier.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            );
        }
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            store,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl Verifier {
    /// `der`, found in `sslrootcert`, is self-signed (issuer and subject
    /// alike, signed by its own key with an algorithm rustls supports) and
    /// valid at `now`.
    fn verify_trusted_self_signed(&self, der: &[u8], now: UnixTime) -> Result<(), rustls::Error> {
        let bad = |e: CertificateError| rustls::Error::InvalidCertificate(e);
        let cert = x509::parse(der).ok_or(bad(CertificateError::BadEncoding))?;
        if cert.issuer != cert.subject {
            return Err(bad(CertificateError::UnknownIssuer));
        }
        let signed = self
            .provider
            .signature_verification_algorithms
            .all
            .iter()
            .filter(|alg| {
                alg.signature_alg_id().as_ref() == cert.signature_algorithm
                    && alg.public_key_alg_id().as_ref() == cert.key_algorithm
            })
            .any(|alg| {
                alg.verify_signature(cert.key, cert.tbs, cert.signature)
                    .is_ok()
            });
        if !signed {
            return Err(bad(CertificateError::BadSignature));
        }
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now < cert.not_before {
            return Err(bad(CertificateError::NotValidYet));
        }
        if now > cert.not_after {
            return Err(bad(CertificateError::Expired));
        }
        Ok(())
    }
}

// ------------------------------------------------------------ tokio-postgres adapter

/// tokio-postgres's TLS hook over tokio-rustls.
#[derive(Clone)]
pub(crate) struct MakeRustlsConnect {
    config: Arc<ClientConfig>,
}

impl MakeRustlsConnect {
    pub(crate) fn new(config: Arc<ClientConfig>) -> MakeRustlsConnect {
        MakeRustlsConnect { config }
    }
}

impl<S> MakeTlsConnect<S> for MakeRustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = std::convert::Infallible;

    /// Called for every host, Unix sockets included (with an empty
    /// name), whether TLS is then used or not: the name is checked only
    /// when the handshake starts.
    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, Self::Error> {
        Ok(RustlsConnect {
            config: self.config.clone(),
            domain: domain.to_string(),
        })
    }
}

/// One handshake with one host.
pub(crate) struct RustlsConnect {
    config: Arc<ClientConfig>,
    domain: String,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let name = ServerName::try_from(self.domain.clone()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("host \"{}\" is not a name TLS can check: {e}", self.domain),
                )
            })?;
            let stream = tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await?;
            Ok(RustlsStream(stream))
        })
    }
}

/// An established TLS session.
pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    /// No channel binding: SCRAM goes without `-PLUS`.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

// ------------------------------------------------------------ errors

/// The reason for a failed connection when TLS is what failed, phrased
/// for people; `None` for other failures.
pub(crate) fn describe_error(e: &tokio_postgres::Error, settings: &TlsSettings) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let rustls_error = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(r) = rustls_error {
            return Some(describe_rustls_error(r, settings));
        }
        source = s.source();
    }
    let text = crate::error_text(e);
    if text.contains("server does not support TLS") {
        return Some(format!(
            "server does not support TLS but sslmode={}; turn ssl on in the server or use sslmode=prefer",
            settings.mode
        ));
    }
    if text.starts_with("error performing TLS handshake") {
        return Some(format!(
            "TLS handshake failed: {}",
            text.split_once(": ")
                .map_or(text.as_str(), |(_, r)| r)
                .lines()
                .next()
                .unwrap_or("")
        ));
    }
    None
}

fn describe_rustls_error(e: &rustls::Error, settings: &TlsSettings) -> String {
    let root = settings
        .root_cert
        .as_deref()
        .map_or_else(String::new, |p| p.display().to_string());
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "certificate verify failed: the server's certificate is not signed by a CA in sslrootcert {root}"
        ),
        rustls::Error::InvalidCertificate(
            c @ (CertificateError::NotValidForName
            | CertificateError::NotValidForNameContext { .. }),
        ) => format!(
            "certificate verify failed: {c}; connect by a name the certificate lists, or use sslmode=verify-ca to skip the name check"
        ),
        rustls::Error::InvalidCertificate(c) => format!("certificate verify failed: {c}"),
        other => format!("TLS handshake failed: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn settings(params: &[(&'static str, &str)]) -> Result<TlsSettings, String> {
        TlsSettings::from_params(params.iter().map(|(k, v)| (*k, v.to_string())).collect())
    }

    #[test]
    fn modes_and_what_they_verify() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.mode, SslMode::Prefer, "libpq's default");
        assert_eq!(s.verification(), Verification::Unverified);
        let s = settings(&[("sslmode", "require")]).unwrap();
        assert_eq!(s.verification(), Verification::Unverified);
        let s = settings(&[("sslmode", "require"), ("sslrootcert", "/ca.pem")]).unwrap();
        assert_eq!(
            s.verification(),
            Verification::Chain,
            "require + root = verify-ca"
        );
        let s = settings(&[("sslrootcert", "/ca.pem"), ("sslmode", "verify-full")]).unwrap();
        assert_eq!(s.verification(), Verification::ChainAndHostName);
        assert_eq!(s.root_cert.as_deref(), Some(Path::new("/ca.pem")));
        let s = settings(&[("sslmode", "verify-ca"), ("sslrootcert", "/ca.pem")]).unwrap();
        assert_eq!(s.verification(), Verification::Chain);
        for mode in SslMode::ALL {
            assert_eq!(SslMode::parse(mode.as_str()), Some(mode));
        }
    }

    #[test]
    fn inconsistent_parameters_are_refused() {
        let e = settings(&[("sslmode", "verify")]).unwrap_err();
        assert_eq!(
            e,
            "sslmode \"verify\" is not one of disable, allow, prefer, require, verify-ca, verify-full; use one of them (require encrypts, verify-full also checks the server's certificate and name)"
        );
        let e = settings(&[("sslmode", "verify-full")]).unwrap_err();
        assert!(
            e.starts_with("sslmode=verify-full needs sslrootcert"),
            "{e}"
        );
        let e = settings(&[("sslmode", "verify-ca"), ("sslrootcert", "")]).unwrap_err();
        assert!(e.starts_with("sslmode=verify-ca needs sslrootcert"), "{e}");
        let e = settings(&[("sslcert", "/c.pem")]).unwrap_err();
        assert!(e.starts_with("sslcert and sslkey go together"), "{e}");
        let e = settings(&[("sslrootcert", "system")]).unwrap_err();
        assert!(e.starts_with("sslrootcert=system is not supported"), "{e}");
    }

    #[test]
    fn unreadable_files_are_named() {
        let s = settings(&[
            ("sslmode", "verify-full"),
            ("sslrootcert", "/nonexistent/evolve/ca.pem"),
        ])
        .unwrap();
        let e = client_config(&s).unwrap_err();
        assert_eq!(
            e,
            "cannot read sslrootcert /nonexistent/evolve/ca.pem: No such file or directory"
        );
        let dir = std::env::temp_dir().join(format!("evolve-pg-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let s = settings(&[
            ("sslmode", "require"),
            ("sslrootcert", empty.to_str().unwrap()),
        ])
        .unwrap();
        let e = client_config(&s).unwrap_err();
        assert!(e.contains("holds no certificate"), "{e}");
        let s = settings(&[
            ("sslcert", empty.to_str().unwrap()),
            ("sslkey", "/nonexistent/evolve/key.pem"),
        ])
        .unwrap();
        let e = client_config(&s).unwrap_err();
        assert!(e.starts_with("sslcert "), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn io_reasons_lose_the_os_error_number() {
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(io_reason(&e), "No such file or directory");
        let e = io::Error::other("plain (words)");
        assert_eq!(io_reason(&e), "plain (words)");
    }
}
