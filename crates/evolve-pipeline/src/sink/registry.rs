//! A client of a Confluent-compatible schema registry, for the Kafka
//! sink's `FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION c`: it
//! registers the key and value schemas under the topic's subjects
//! (TopicNameStrategy: `<topic>-key`, `<topic>-value`) and learns their
//! ids, which every record carries in Confluent's wire format.
//!
//! The connection is `http://host:port[/prefix]` or `https://...`, with
//! `user` and `password` (HTTP basic authentication) and, for https,
//! `sslrootcert` (the server's certificate chain and host name are
//! checked against it) beside the url in `evolve.toml`. One request per
//! connection, HTTP/1.1 (hyper); the password is sent only in the
//! `Authorization` header and never shows in an error.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;

use crate::config::Connection;
use crate::error::{PipelineError, Result};

/// How long one registry request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of an answer that is read.
const MAX_ANSWER: usize = 1 << 20;

/// A subject's latest version, as [`Registry::latest`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatestSchema {
    pub id: u32,
    pub version: i64,
    /// Avro, as JSON text.
    pub schema: String,
}

/// A schema registry, as connection `name` reaches it.
#[derive(Clone)]
pub struct Registry {
    name: String,
    host: String,
    port: u16,
    /// The path before `/subjects`, without a trailing slash.
    prefix: String,
    /// `host[:port]` for the Host header.
    authority: String,
    authorization: Option<String>,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("name", &self.name)
            .field("authority", &self.authority)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// The registry of connection `name` (an `http://` or `https://` url).
    pub fn new(name: &str, connection: &Connection) -> Result<Registry> {
        let url = connection.url();
        let bad = |why: &str| PipelineError::Config {
            message: format!("connection \"{name}\": {why}"),
        };
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(bad(
                "a schema registry connection's url is http://host:port or https://host:port",
            ));
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| bad(&format!("the port of {authority:?} is not a number")))?;
                (h.trim_matches(['[', ']']).to_string(), port)
            }
            _ => (authority.to_string(), if tls { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err(bad("the url names no host"));
        }
        let options = connection.kafka_options();
        let authorization = match (&options.user, options.password()) {
            (Some(user), Some(password)) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
            _ => None,
        };
        let tls = if tls {
            let root = options
                .sslrootcert
                .as_deref()
                .ok_or_else(|| bad("an https:// registry needs sslrootcert"))?;
            Some(evolve_pg::tls::https_client_config(root).map_err(|e| bad(&e))?)
        } else {
            None
        };
        Ok(Registry {
            name: name.to_string(),
            host,
            port,
            prefix: format!("/{}", path.trim_end_matches('/'))
                .trim_end_matches('/')
                .to_string(),
            authority: authority.to_string(),
            authorization,
            tls,
        })
    }

    /// Registers `schema` (Avro, as JSON text) under `subject` and returns
    /// its id; the id it already has when it is registered.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32> {
        let body = serde_json::json!({ "schema": schema }).to_string();
        let path = format!("{}/subjects/{}/versions", self.prefix, encode(subject));
        let (status, answer) = self.request(Method::POST, &path, body).await?;
        let parsed: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
        if status != StatusCode::OK {
            let message = parsed["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&answer).chars().take(200).collect());
            return Err(self.error(&format!(
                "registering the schema of subject \"{subject}\" was refused ({status}): {message}"
            )));
        }
        parsed["id"]
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| {
                self.error(&format!(
                    "the answer to registering subject \"{subject}\" has no id"
                ))
            })
    }

    /// The schema (Avro, as JSON text) registered under `id`; `None` when
    /// the registry does not know the id.
    pub async fn schema_by_id(&self, id: u32) -> Result<Option<String>> {
        let path = format!("{}/schemas/ids/{id}", self.prefix);
        let (status, answer) = self.request(Method::GET, &path, String::new()).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let parsed = self.answer(status, &answer, &format!("schema id {id}"))?;
        parsed["schema"]
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| self.error(&format!("the answer for schema id {id} has no schema")))
    }

    /// The latest version of `subject`: its id, version and schema text;
    /// `None` when the subject has no version.
    pub async fn latest(&self, subject: &str) -> Result<Option<LatestSchema>> {
        let path = format!(
            "{}/subjects/{}/versions/latest",
            self.prefix,
            encode(subject)
        );
        let (status, answer) = self.request(Method::GET, &path, String::new()).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let parsed = self.answer(status, &answer, &format!("subject \"{subject}\""))?;
        let schema_type = parsed["schemaType"].as_str().unwrap_or("AVRO");
        if schema_type != "AVRO" {
            return Err(self.error(&format!(
                "subject \"{subject}\" holds {schema_type} schemas; a Kafka table reads Avro"
            )));
        }
        match (
            parsed["id"].as_u64().and_then(|id| u32::try_from(id).ok()),
            parsed["version"].as_i64(),
            parsed["schema"].as_str(),
        ) {
            (Some(id), Some(version), Some(schema)) => Ok(Some(LatestSchema {
                id,
                version,
                schema: schema.to_string(),
            })),
            _ => Err(self.error(&format!(
                "the answer for subject \"{subject}\" lacks its id, version or schema"
            ))),
        }
    }

    /// The JSON of a 200 answer; the registry's message otherwise.
    fn answer(&self, status: StatusCode, answer: &[u8], what: &str) -> Result<serde_json::Value> {
        let parsed: serde_json::Value = serde_json::from_slice(answer).unwrap_or_default();
        if status != StatusCode::OK {
            let message = parsed["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(answer).chars().take(200).collect());
            return Err(self.error(&format!("reading {what} was refused ({status}): {message}")));
        }
        Ok(parsed)
    }

    fn error(&self, message: &str) -> PipelineError {
        PipelineError::Database {
            context: format!("schema registry connection \"{}\"", self.name),
            message: message.to_string(),
        }
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: String,
    ) -> Result<(StatusCode, Bytes)> {
        let exchange = async {
            let stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| self.error(&format!("cannot connect to {}: {e}", self.authority)))?;
            let mut request = Request::builder()
                .method(method)
                .uri(path)
                .header(header::HOST, &self.authority)
                .header(
                    header::CONTENT_TYPE,
                    "application/vnd.schemaregistry.v1+json",
                )
                .header(header::ACCEPT, "application/vnd.schemaregistry.v1+json");
            if let Some(a) = &self.authorization {
                request = request.header(header::AUTHORIZATION, a);
            }
            let request = request
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| self.error(&e.to_string()))?;
            match &self.tls {
                None => self.send(TokioIo::new(stream), request).await,
                Some(config) => {
                    let name =
                        tokio_rustls::rustls::pki_types::ServerName::try_from(self.host.clone())
                            .map_err(|e| self.error(&format!("{}: {e}", self.host)))?;
                    let tls = tokio_rustls::TlsConnector::from(Arc::clone(config))
                        .connect(name, stream)
                        .await
                        .map_err(|e| {
                            self.error(&format!("TLS with {} failed: {e}", self.authority))
                        })?;
                    self.send(TokioIo::new(tls), request).await
                }
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                self.error(&format!(
                    "{} did not answer within {} s",
                    self.authority,
                    REQUEST_TIMEOUT.as_secs()
                ))
            })?
    }

    async fn send<T>(
        &self,
        io: TokioIo<T>,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Bytes)>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| self.error(&format!("{}: {e}", self.authority)))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.error(&format!("{}: {e}", self.authority)))?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| self.error(&format!("reading the answer of {}: {e}", self.authority)))?
            .to_bytes();
        Ok((status, body))
    }
}

/// A path segment, percent-encoded.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_and_passwords_stay_out_of_debug() {
        let mut options = crate::config::KafkaOptions::default().with_password("sekret");
        options.user = Some("u".into());
        let c = Connection::kafka("http://127.0.0.1:8081/reg/", options);
        let r = Registry::new("csr", &c).unwrap();
        assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", 8081));
        assert_eq!(r.prefix, "/reg");
        assert!(r.authorization.as_deref().unwrap().starts_with("Basic "));
        assert!(!format!("{r:?}").contains("sekret"));
        let plain = Registry::new("csr", &Connection::new("http://reg.internal")).unwrap();
        assert_eq!((plain.port, plain.prefix.as_str()), (80, ""));
        assert!(Registry::new("csr", &Connection::new("https://reg.internal")).is_err());
        assert_eq!(encode("orders-value"), "orders-value");
        assert_eq!(encode(":.ctx:a b"), "%3A.ctx%3Aa%20b");
    }
}
