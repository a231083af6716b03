//! Writes sent to an instance that does not write its Kafka store go to
//! the one that does, over HTTP, as Confluent's followers forward to their
//! leader.
//!
//! # Who writes
//!
//! Kafka lets one instance write at a time (the fenced
//! `transactional.id`, see [`crate::kafka`]); this module only decides
//! where a write is sent, so that the writer stays put instead of moving
//! to whichever instance a request reached. When an instance takes over,
//! it commits a record to a side topic, `<topic>_writer` (compacted, one
//! partition, one key): its instance id and its `--advertised-url`, in a
//! transaction of the producer that has just fenced the previous writer.
//! That record can only commit while the new epoch is current, so the last
//! committed record names the instance that took over last: either the
//! writer, or an instance fenced since by one that died before its own
//! record committed. Confluent's `_schemas` topic stays as Confluent
//! reads it: nothing but its records goes there.
//!
//! # A write
//!
//! Every route that appends (registration, deletes, `PUT` and `DELETE`
//! of `/config` and `/mode`) goes through a middleware, after
//! authentication:
//!
//! - A registration that is already a live version is answered from
//!   memory, like a read.
//! - A request that carries [`FORWARDED`] came from another instance: it
//!   is written here, taking over if needed, and never forwarded again,
//!   so requests cannot go round in circles. Only if the writer topic
//!   names another instance that took over since (the forwarder had not
//!   seen it yet) is it declined, with [`NOT_WRITER`]: the forwarder
//!   routes it again.
//! - Otherwise the writer topic is read to its end (unless this instance
//!   holds the producer and the record names it). If the record names
//!   another instance with an address, the request goes there as it came
//!   (method, path, query, body, `Authorization`, `Content-Type`,
//!   `Accept`), and its answer comes back as it is. The writer checks the
//!   credentials again: a caller it refuses is refused. Before answering,
//!   the forwarder reads its log past the writer's last commit
//!   ([`LOG_OFFSET`]), so that its own reads show the write.
//! - If the writer cannot be reached (connection refused, no connection
//!   within [`CONNECT_TIMEOUT`]), or no record names one, the write is
//!   served here: this instance takes over (fencing whoever wrote) and
//!   records itself. A request that reached the writer but got no answer
//!   (it was killed with the request in flight, or took longer than
//!   [`ANSWER_TIMEOUT`]) may have been applied: a registration or a `PUT`
//!   is served here too (doing it again changes nothing), a `DELETE`
//!   fails with 50003 so that the caller looks before it repeats it.
//! - A write served here takes over only from the writer it found
//!   unreachable (or when the record names none, or this instance): if
//!   meanwhile another instance took over, it declines and the request
//!   goes to that one instead. Two instances that lost their writer at the
//!   same moment thus settle on one.
//! - `--writer-eligible false`: the instance never takes over; with no
//!   writer to forward to it answers 50004.
//!
//! The record is never trusted for correctness: a stale one costs a
//! forward to an instance that then declines or takes over, and what
//! keeps two writers from both appending is the fencing and the
//! compare-and-append of the Kafka log.
//!
//! # TLS
//!
//! An `https://` writer is reached over TLS with its certificate chain
//! and host name checked against `--peer-ca` (by default the instance's
//! own `--tls-cert` file). A certificate that does not verify is an error
//! (50003), not a reason to take over. Credentials are sent only in the
//! `Authorization` header, and never appear in logs or errors.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, MatchedPath, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::ApiError;
use crate::http::{App, decode_schema_body};
use crate::kafka::{KafkaLog, WriterRecord};
use crate::store::Storage;

/// The header that marks a forwarded request; its value is the id of the
/// instance that forwarded it.
pub const FORWARDED: &str = "x-evolve-forwarded";

/// The header of the answer to a forwarded request that the instance it
/// reached did not serve because another instance took over writing
/// since; its value is that instance's id. The forwarder routes the
/// request again.
pub const NOT_WRITER: &str = "x-evolve-not-writer";

/// The header of the answer to a forwarded request: the Kafka offset just
/// past the last record the writer committed to the registry's topic. The
/// forwarder reads its log that far before it answers, so that its own
/// reads show the write (Kafka may make a commit readable a moment after
/// it returns).
pub const LOG_OFFSET: &str = "x-evolve-log-offset";

/// How long a forwarder waits to read a forwarded write back.
const READ_BACK: Duration = Duration::from_secs(5);

/// How long connecting to the writer (and the TLS handshake) may take
/// before it counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the writer may take to answer a forwarded write.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of a forwarded answer that is read (answers to writes are
/// small: an id, a list of versions, a configuration).
const MAX_ANSWER: usize = 16 * 1024 * 1024;

/// How many times one write is routed: forwarded, or served here, and
/// declined because another instance took over meanwhile.
const ROUNDS: usize = 4;

// ---- addresses -------------------------------------------------------------

/// An instance's `--advertised-url`: `http[s]://host[:port][/prefix]`,
/// without user, password, query or fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerUrl {
    /// As written, without a trailing slash.
    text: String,
    tls: bool,
    /// The host, IPv6 without brackets.
    host: String,
    port: u16,
    /// `host[:port]` for the `Host` header.
    authority: String,
    /// The path before the API's routes: empty or `/...` without a
    /// trailing slash.
    prefix: String,
}

impl PeerUrl {
    pub fn parse(text: &str) -> Result<PeerUrl, String> {
        // Shown without what could be a password (`user:password@`).
        let shown: String = match (text.find("://"), text.rfind('@')) {
            (Some(start), Some(at)) if at > start => {
                format!("{}***{}", &text[..start + 3], &text[at..])
            }
            _ => text.to_owned(),
        };
        let bad = |why: &str| {
            format!(
                "advertised URL {:?} {why}",
                shown.chars().take(200).collect::<String>()
            )
        };
        let trimmed = text.trim().trim_end_matches('/');
        let lower = trimmed.to_ascii_lowercase();
        let (tls, rest) = if lower.starts_with("https://") {
            (true, &trimmed["https://".len()..])
        } else if lower.starts_with("http://") {
            (false, &trimmed["http://".len()..])
        } else {
            return Err(bad("is not http://host:port or https://host:port"));
        };
        if rest.contains(['?', '#']) {
            return Err(bad(
                "has a query or fragment; give the URL the API is served at",
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad(
                "holds a user or password; other instances read it from the topic, so it must not",
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad("has an unclosed ["))?;
            match after {
                "" => (host, None),
                _ => (
                    host,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad("has something after ] that is not :port"))?,
                    ),
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let valid_host = !host.is_empty()
            && (host.parse::<std::net::IpAddr>().is_ok()
                || host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')));
        if !valid_host {
            return Err(bad("names no valid host"));
        }
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("has a port that is not a number from 1 to 65535"))?,
        };
        if path.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(bad("has spaces or control characters in its path"));
        }
        Ok(PeerUrl {
            text: trimmed.to_owned(),
            tls,
            host: host.to_owned(),
            port,
            authority: authority.to_owned(),
            prefix: path.to_owned(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host (IPv6 without brackets), for `--allowed-host`.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn is_tls(&self) -> bool {
        self.tls
    }
}

impl std::fmt::Display for PeerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

// ---- the client --------------------------------------------------------------

/// How one instance forwards writes: its own address (written into its
/// writer records), whether it may write at all, and the TLS
/// configuration for `https://` writers.
pub struct Forwarder {
    url: Option<PeerUrl>,
    eligible: bool,
    tls: Option<Arc<rustls::ClientConfig>>,
    answered: AtomicU64,
    unreachable: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("url", &self.url)
            .field("eligible", &self.eligible)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Forwarded writes by outcome, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardStats {
    /// The writer answered (whatever the status).
    pub answered: u64,
    /// The writer could not be reached; this instance served the write.
    pub unreachable: u64,
    /// Sent without an answer, or refused by TLS.
    pub failed: u64,
}

/// Why a write could not be forwarded.
#[derive(Debug)]
pub enum ForwardError {
    /// Nothing was sent: no connection (refused, timed out, cut in the
    /// TLS handshake).
    Unreachable(String),
    /// Nothing was sent, and taking over would not help: the writer's
    /// certificate does not verify, or TLS is not configured.
    Refused(String),
    /// The request was sent but no whole answer came: it may have been
    /// applied.
    Unanswered(String),
}

impl Forwarder {
    /// `url`: this instance's advertised address (`None`: other instances
    /// cannot forward to it, and take over instead). `eligible`: whether
    /// it may take over writing. `tls`: how `https://` writers are
    /// checked.
    pub fn new(
        url: Option<PeerUrl>,
        eligible: bool,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Forwarder {
        Forwarder {
            url,
            eligible,
            tls,
            answered: AtomicU64::new(0),
            unreachable: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    pub fn url(&self) -> Option<&PeerUrl> {
        self.url.as_ref()
    }

    pub fn eligible(&self) -> bool {
        self.eligible
    }

    pub fn stats(&self) -> ForwardStats {
        ForwardStats {
            answered: self.answered.load(Ordering::SeqCst),
            unreachable: self.unreachable.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
        }
    }

    /// Sends the request of `parts` with `body` to `to`, marked as
    /// forwarded by instance `from`; the writer's answer as it is.
    pub async fn send(
        &self,
        to: &PeerUrl,
        parts: &Parts,
        body: Bytes,
        from: &str,
    ) -> Result<Response, ForwardError> {
        let result = self.exchange(to, parts, body, from).await;
        let counter = match &result {
            Ok(_) => &self.answered,
            Err(ForwardError::Unreachable(_)) => &self.unreachable,
            Err(_) => &self.failed,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        result
    }

    async fn exchange(
        &self,
        to: &PeerUrl,
        parts: &Parts,
        body: Bytes,
        from: &str,
    ) -> Result<Response, ForwardError> {
        let request = outgoing(to, parts, body, from)?;
        let stream = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect((to.host.as_str(), to.port)),
        )
        .await
        {
            Err(_) => {
                return Err(ForwardError::Unreachable(format!(
                    "{to} accepted no connection within {} s",
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
            Ok(Err(e)) => {
                return Err(ForwardError::Unreachable(format!(
                    "cannot connect to {to}: {e}"
                )));
            }
            Ok(Ok(stream)) => stream,
        };
        let _ = stream.set_nodelay(true);
        if !to.tls {
            return send_on(TokioIo::new(stream), request, to).await;
        }
        let Some(config) = &self.tls else {
            return Err(ForwardError::Refused(format!(
                "the writer {to} serves https; give --peer-ca (the CA certificates its certificate is checked against)"
            )));
        };
        let name = rustls::pki_types::ServerName::try_from(to.host.clone())
            .map_err(|e| ForwardError::Refused(format!("{to}: {e}")))?;
        let handshake = tokio_rustls::TlsConnector::from(Arc::clone(config)).connect(name, stream);
        match tokio::time::timeout(CONNECT_TIMEOUT, handshake).await {
            Err(_) => Err(ForwardError::Unreachable(format!(
                "the TLS handshake with {to} took more than {} s",
                CONNECT_TIMEOUT.as_secs()
            ))),
            Ok(Err(e)) => {
                let tls_problem = e
                    .get_ref()
                    .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
                if tls_problem {
                    Err(ForwardError::Refused(format!(
                        "TLS with the writer {to} failed: {e}; check --peer-ca and the writer's certificate"
                    )))
                } else {
                    Err(ForwardError::Unreachable(format!(
                        "TLS with the writer {to} failed: {e}"
                    )))
                }
            }
            Ok(Ok(tls)) => send_on(TokioIo::new(tls), request, to).await,
        }
    }
}

/// The forwarded request: the same method, path, query and body, the
/// caller's `Authorization`, `Content-Type` and `Accept`, `Host` the
/// writer's, and [`FORWARDED`].
fn outgoing(
    to: &PeerUrl,
    parts: &Parts,
    body: Bytes,
    from: &str,
) -> Result<hyper::Request<Full<Bytes>>, ForwardError> {
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut builder = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(format!("{}{path}", to.prefix))
        .header(header::HOST, &to.authority)
        .header(FORWARDED, from);
    for name in [header::AUTHORIZATION, header::CONTENT_TYPE, header::ACCEPT] {
        for value in parts.headers.get_all(&name) {
            builder = builder.header(&name, value);
        }
    }
    builder
        .body(Full::new(body))
        .map_err(|e| ForwardError::Refused(format!("cannot forward the request to {to}: {e}")))
}

async fn send_on<T>(
    io: TokioIo<T>,
    request: hyper::Request<Full<Bytes>>,
    to: &PeerUrl,
) -> Result<Response, ForwardError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let exchange = async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| ForwardError::Unreachable(format!("{to}: {e}")))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| ForwardError::Unanswered(format!("{to} gave no answer: {e}")))?;
        let (head, body) = response.into_parts();
        let bytes = Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| ForwardError::Unanswered(format!("reading the answer of {to}: {e}")))?
            .to_bytes();
        let mut answer = Response::new(Body::from(bytes));
        *answer.status_mut() = head.status;
        for (name, value) in &head.headers {
            let hop_by_hop = [
                header::CONNECTION,
                header::TRANSFER_ENCODING,
                header::CONTENT_LENGTH,
                header::TE,
                header::TRAILER,
                header::UPGRADE,
            ]
            .contains(name)
                || name.as_str() == "keep-alive";
            if !hop_by_hop {
                answer.headers_mut().append(name.clone(), value.clone());
            }
        }
        Ok(answer)
    };
    tokio::time::timeout(ANSWER_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            ForwardError::Unanswered(format!(
                "{to} did not answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            ))
        })?
}

// ---- taking over -------------------------------------------------------------

/// Whom a write served by this instance may take writing over from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// Anyone: a write that did not come over HTTP (`evolve registry
    /// import`, a library user).
    Free,
    /// Only from the instance named (the writer found unreachable, or
    /// one without an address), or when the writer topic names none or
    /// this instance (`None`; so a forwarded write): if another instance
    /// has taken over since, the write is declined and routed to that
    /// one.
    From(Option<String>),
}

struct Scope {
    takeover: Takeover,
    declined: Mutex<Option<WriterRecord>>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// The rule of the write this task serves ([`Takeover::Free`] outside
/// [`within`]).
pub(crate) fn takeover() -> Takeover {
    SCOPE
        .try_with(|s| s.takeover.clone())
        .unwrap_or(Takeover::Free)
}

/// Notes that this task's write did not take over because `writer` has.
pub(crate) fn decline(writer: WriterRecord) {
    let _ = SCOPE.try_with(|s| {
        *s.declined.lock().unwrap_or_else(|p| p.into_inner()) = Some(writer);
    });
}

/// Runs `write` under `takeover`; its output, and the writer it declined
/// to take over from, if it did.
pub async fn within<F: Future>(takeover: Takeover, write: F) -> (F::Output, Option<WriterRecord>) {
    let scope = Scope {
        takeover,
        declined: Mutex::new(None),
    };
    SCOPE
        .scope(scope, async {
            let output = write.await;
            let declined =
                SCOPE.with(|s| s.declined.lock().unwrap_or_else(|p| p.into_inner()).take());
            (output, declined)
        })
        .await
}

// ---- the middleware ------------------------------------------------------------

/// The route of registrations, answered from memory when the schema is
/// already a live version.
const REGISTER: &str = "/subjects/{subject}/versions";

/// Whether the request at `route` appends to the log.
fn appends(method: &Method, route: &str) -> bool {
    match *method {
        Method::POST => route == REGISTER,
        Method::DELETE => matches!(
            route,
            "/subjects/{subject}"
                | "/subjects/{subject}/versions/{version}"
                | "/config"
                | "/config/{subject}"
                | "/mode"
                | "/mode/{subject}"
        ),
        Method::PUT => matches!(
            route,
            "/config" | "/config/{subject}" | "/mode" | "/mode/{subject}"
        ),
        _ => false,
    }
}

/// Where a forwarded answer came from, for the access log.
#[derive(Clone, Debug)]
pub(crate) struct ForwardedTo(pub String);

/// Serves or forwards every request that appends, on a Kafka store with
/// a [`Forwarder`]; see the module documentation.
pub(crate) async fn middleware(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let Storage::Kafka(log) = app.registry.log() else {
        return next.run(request).await;
    };
    let Some(forwarder) = log.forwarder() else {
        return next.run(request).await;
    };
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    if !appends(request.method(), &route) {
        return next.run(request).await;
    }
    if request.headers().contains_key(FORWARDED) {
        // Written here, never forwarded again; but not by taking over
        // from an instance that took over after this one (the forwarder
        // had not seen it yet): the forwarder is told, and routes again.
        let (mut answer, declined) = within(Takeover::From(None), next.run(request)).await;
        return match declined {
            None => {
                if let Some(offset) = log.committed_to()
                    && let Ok(value) = HeaderValue::from_str(&offset.to_string())
                {
                    answer.headers_mut().insert(LOG_OFFSET, value);
                }
                answer
            }
            Some(writer) => {
                let mut answer = ApiError::unknown_writer(format!(
                    "This instance no longer writes: instance {} ({}) took over; send the write there",
                    writer.instance,
                    writer.url.as_deref().unwrap_or("no address")
                ))
                .into_response();
                if let Ok(value) = HeaderValue::from_str(&writer.instance) {
                    answer.headers_mut().insert(NOT_WRITER, value);
                }
                answer
            }
        };
    }
    let (parts, body) = request.into_parts();
    let body = match crate::http::limited_body(body, app.max_body).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let rebuild = || Request::from_parts(parts.clone(), Body::from(body.clone()));
    if route == REGISTER && answered_here(&app, &parts, &body).await {
        return next.run(rebuild()).await;
    }
    route_write(&app, log, forwarder, &parts, &body, next, rebuild).await
}

/// Catches up with the log until it has read past Kafka offset `offset`
/// (the writer's last commit), for at most [`READ_BACK`].
async fn read_back(app: &App, log: &KafkaLog, offset: Option<i64>) {
    let started = std::time::Instant::now();
    loop {
        if let Err(e) = app.registry.catch_up().await {
            tracing::warn!(error = %e.message, "could not read the registry log after a forwarded write");
            return;
        }
        if offset.is_none_or(|o| log.has_read(o)) || started.elapsed() > READ_BACK {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a registration is answered by this instance without a write:
/// the schema is a live version already, or the body is refused before
/// any state is looked at.
async fn answered_here(app: &App, parts: &Parts, body: &Bytes) -> bool {
    let mut parts = parts.clone();
    let Ok(Path(subject)) = Path::<String>::from_request_parts(&mut parts, &()).await else {
        return true;
    };
    let params = Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let normalize = params
        .get("normalize")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let Ok(input) = decode_schema_body(body, normalize) else {
        return true;
    };
    input.schema.len() > app.max_schema
        || app
            .registry
            .read(|state| state.existing_registration(&subject, &input))
            .is_some()
}

async fn route_write(
    app: &App,
    log: &KafkaLog,
    forwarder: &Forwarder,
    parts: &Parts,
    body: &Bytes,
    next: Next,
    rebuild: impl Fn() -> Request,
) -> Response {
    let idempotent = parts.method != Method::DELETE;
    // The writer found unreachable, not to be tried again for this write.
    let mut unreachable: Option<String> = None;
    let mut last = None;
    for _ in 0..ROUNDS {
        let writer = match log.current_writer().await {
            Ok(w) => w,
            Err(e) => return ApiError::store(e.0).into_response(),
        };
        let target = writer
            .as_ref()
            .filter(|w| w.instance != log.instance() && Some(&w.instance) != unreachable.as_ref());
        if let Some(writer) = target
            && let Some(url) = &writer.url
        {
            let url = match PeerUrl::parse(url) {
                Ok(url) => Some(url),
                Err(e) => {
                    tracing::warn!(error = %e, "the writer record holds no usable address; taking over");
                    None
                }
            };
            if let Some(url) = url {
                match forwarder
                    .send(&url, parts, body.clone(), log.instance())
                    .await
                {
                    Ok(mut answer) if answer.headers().contains_key(NOT_WRITER) => {
                        // It was fenced by an instance this one has not
                        // seen yet: route again.
                        answer.headers_mut().remove(NOT_WRITER);
                        last = Some(answer);
                        continue;
                    }
                    Ok(mut answer) => {
                        let offset = answer
                            .headers_mut()
                            .remove(LOG_OFFSET)
                            .and_then(|v| v.to_str().ok()?.parse::<i64>().ok());
                        if answer.status().is_success() {
                            read_back(app, log, offset).await;
                        }
                        answer
                            .extensions_mut()
                            .insert(ForwardedTo(url.as_str().to_owned()));
                        return answer;
                    }
                    Err(ForwardError::Unreachable(why)) => {
                        tracing::warn!(writer = %url, error = %why, "the writer is unreachable; writing here");
                    }
                    Err(ForwardError::Unanswered(why)) if idempotent => {
                        tracing::warn!(writer = %url, error = %why, "the writer gave no answer; writing here");
                    }
                    Err(ForwardError::Unanswered(why)) => {
                        return ApiError::forwarding(format!(
                            "Error while forwarding the request to the writer: {why}; it may have been applied, look before repeating it"
                        ))
                        .into_response();
                    }
                    Err(ForwardError::Refused(why)) => {
                        return ApiError::forwarding(format!(
                            "Error while forwarding the request to the writer: {why}"
                        ))
                        .into_response();
                    }
                }
            }
            unreachable = Some(writer.instance.clone());
        }
        if !forwarder.eligible() {
            return ApiError::unknown_writer(match &writer {
                Some(w) => format!(
                    "The writer {} is unreachable and this instance does not write (--writer-eligible false); try again",
                    w.url.as_deref().unwrap_or("(no address)")
                ),
                None => "No instance writes yet and this instance does not write (--writer-eligible false); send the write to one that may".to_owned(),
            })
            .into_response();
        }
        let (answer, declined) = within(
            Takeover::From(writer.map(|w| w.instance)),
            next.clone().run(rebuild()),
        )
        .await;
        if declined.is_none() {
            return answer;
        }
        last = Some(answer);
    }
    last.unwrap_or_else(|| {
        ApiError::unknown_writer("No writer could be settled on; try again").into_response()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_urls_are_read_and_refused_with_the_reason() {
        let url = PeerUrl::parse("https://Registry.example:8443/reg/").expect("url");
        assert_eq!(
            (url.as_str(), url.host(), url.port, url.is_tls()),
            (
                "https://Registry.example:8443/reg",
                "Registry.example",
                8443,
                true
            )
        );
        assert_eq!(
            (url.authority.as_str(), url.prefix.as_str()),
            ("Registry.example:8443", "/reg")
        );
        let v6 = PeerUrl::parse("http://[::1]:8081").expect("v6");
        assert_eq!(
            (v6.host(), v6.port, v6.authority.as_str()),
            ("::1", 8081, "[::1]:8081")
        );
        assert_eq!(
            PeerUrl::parse("HTTP://10.0.0.5")
                .expect("default port")
                .port,
            80
        );
        assert_eq!(
            PeerUrl::parse("https://r.example")
                .expect("default port")
                .port,
            443
        );
        for (bad, why) in [
            ("registry:8081", "is not http"),
            ("ftp://r:21", "is not http"),
            ("http://user:secret@r:8081", "user or password"),
            ("http://r:8081/?a=1", "query or fragment"),
            ("http://:8081", "no valid host"),
            ("http://r:0", "port"),
            ("http://r:http", "port"),
            ("http://[::1:8081", "unclosed"),
        ] {
            let e = PeerUrl::parse(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn only_routes_that_append_are_forwarded() {
        assert!(appends(&Method::POST, REGISTER));
        assert!(!appends(&Method::POST, "/subjects/{subject}"));
        assert!(!appends(
            &Method::POST,
            "/compatibility/subjects/{subject}/versions"
        ));
        for route in [
            "/subjects/{subject}",
            "/subjects/{subject}/versions/{version}",
        ] {
            assert!(appends(&Method::DELETE, route), "{route}");
            assert!(!appends(&Method::GET, route), "{route}");
        }
        for route in ["/config", "/config/{subject}", "/mode", "/mode/{subject}"] {
            assert!(appends(&Method::PUT, route), "{route}");
            assert!(appends(&Method::DELETE, route), "{route}");
            assert!(!appends(&Method::GET, route), "{route}");
        }
    }
}
