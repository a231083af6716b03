//! A client of a Confluent-compatible schema registry, for the Kafka
//! sink's `FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION c`: it
//! registers the key and value schemas under the topic's subjects
//! (TopicNameStrategy: `<topic>-key`, `<topic>-value`) and learns their
//! ids, which every record carries in Confluent's wire format. For the
//! Kafka source's tables it reads subject versions and schemas by id, and
//! fetches the schemas their `references` name ([`resolve_references`]).
//!
//! The connection is `http://host:port[/prefix]` or `https://...`, with
//! `user` and `password` (HTTP basic authentication) and, for https,
//! `sslrootcert` (the server's certificate chain and host name are
//! checked against it) beside the url in `evolve.toml`. One request per
//! connection, HTTP/1.1 (hyper); the password is sent only in the
//! `Authorization` header and never shows in an error.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;

use crate::config::Connection;
use crate::error::{PipelineError, Result};
use crate::store::ReferencedSchema;

/// How long one registry request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of an answer that is read.
const MAX_ANSWER: usize = 1 << 20;

/// How deep references may nest: a schema's references are level 1, theirs
/// level 2, and so on.
pub const MAX_REFERENCE_DEPTH: usize = 32;

/// The most schemas one schema's references may bring in, all levels
/// together.
pub const MAX_REFERENCES: usize = 1_000;

/// A named type that a registered schema takes from another subject
/// (Confluent's `references`): the type's full name, and the subject and
/// version whose schema defines it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct SchemaReference {
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// One version of a subject, as [`Registry::latest`] and
/// [`Registry::version`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionedSchema {
    pub id: u32,
    pub version: i64,
    /// `AVRO`, `PROTOBUF` or `JSON`.
    pub schema_type: String,
    /// The schema's text (Avro: JSON).
    pub schema: String,
    pub references: Vec<SchemaReference>,
}

/// A schema as [`Registry::schema_by_id`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredSchema {
    /// `AVRO`, `PROTOBUF` or `JSON`.
    pub schema_type: String,
    pub schema: String,
    pub references: Vec<SchemaReference>,
}

/// Where the schemas that references name are read from: a registry, or a
/// cache in front of one.
pub trait SubjectVersions {
    /// Version `version` of `subject` (`-1`: its latest); `None` when the
    /// registry does not have it. An error when the registry cannot be
    /// asked.
    fn subject_version(
        &mut self,
        subject: &str,
        version: i64,
    ) -> impl Future<Output = Result<Option<VersionedSchema>>> + Send;
}

impl SubjectVersions for Registry {
    async fn subject_version(
        &mut self,
        subject: &str,
        version: i64,
    ) -> Result<Option<VersionedSchema>> {
        self.version(subject, version).await
    }
}

/// Fetches the schemas that `references` name, and theirs, through every
/// level: each subject version once, every schema after the schemas it
/// references (the order Avro's parser resolves them in). `of` names the
/// schema in messages (`subject "orders-value" version 2`, `schema id 7`);
/// `root` is its own subject and version when it has them, so that a
/// reference back to it is seen as a cycle.
///
/// The outer error is a registry that cannot be asked. The inner one is a
/// reference the registry cannot satisfy, one line saying which and what
/// to do: a subject version it does not have, one of another type than
/// `schema_type` (`AVRO`, `JSON`: the referencing schema's), a
/// cycle, more than [`MAX_REFERENCE_DEPTH`] levels or more than
/// [`MAX_REFERENCES`] schemas.
pub async fn resolve_references(
    schema_type: &str,
    versions: &mut impl SubjectVersions,
    of: &str,
    root: Option<(&str, i64)>,
    references: &[SchemaReference],
) -> Result<std::result::Result<Vec<ReferencedSchema>, String>> {
    /// A reference whose own references are being followed.
    struct Open {
        reference: SchemaReference,
        fetched: VersionedSchema,
        next: usize,
    }
    let step = |subject: &str, version: i64| format!("subject \"{subject}\" version {version}");
    let mut out: Vec<ReferencedSchema> = Vec::new();
    let mut done: HashSet<(String, i64)> = HashSet::new();
    // The references being followed, from a top-level one down.
    let mut stack: Vec<Open> = Vec::new();
    for top in references {
        let mut next = Some(top.clone());
        loop {
            if let Some(reference) = next.take() {
                let key = (reference.subject.clone(), reference.version);
                if !done.contains(&key) {
                    let on_path = root
                        .is_some_and(|(s, v)| s == reference.subject && v == reference.version)
                        || stack.iter().any(|o| {
                            (o.reference.subject.as_str(), o.reference.version)
                                == (reference.subject.as_str(), reference.version)
                        });
                    let path = || {
                        root.map(|(s, v)| step(s, v))
                            .into_iter()
                            .chain(
                                stack
                                    .iter()
                                    .map(|o| step(&o.reference.subject, o.reference.version)),
                            )
                            .chain(std::iter::once(step(&reference.subject, reference.version)))
                            .collect::<Vec<_>>()
                            .join(" -> ")
                    };
                    if on_path {
                        return Ok(Err(format!(
                            "the references of {of} form a cycle ({}); register the referenced types without a reference back",
                            path()
                        )));
                    }
                    if stack.len() >= MAX_REFERENCE_DEPTH {
                        return Ok(Err(format!(
                            "the references of {of} nest deeper than {MAX_REFERENCE_DEPTH} levels ({}); reference the types with fewer levels",
                            path()
                        )));
                    }
                    if out.len() + stack.len() >= MAX_REFERENCES {
                        return Ok(Err(format!(
                            "the references of {of} bring in more than {MAX_REFERENCES} schemas; reference fewer types"
                        )));
                    }
                    let Some(fetched) = versions
                        .subject_version(&reference.subject, reference.version)
                        .await?
                    else {
                        return Ok(Err(format!(
                            "{of} references {} for type \"{}\", which the registry does not have; register that version or point the reference at one the registry has",
                            step(&reference.subject, reference.version),
                            reference.name
                        )));
                    };
                    if fetched.schema_type != schema_type {
                        let noun = |t: &str| {
                            match t {
                                "AVRO" => "Avro",
                                "JSON" => "JSON",
                                "PROTOBUF" => "Protobuf",
                                other => other,
                            }
                            .to_string()
                        };
                        return Ok(Err(format!(
                            "{of} references {} for type \"{}\", which holds a {} schema; {} {} schema can reference only {} schemas",
                            step(&reference.subject, reference.version),
                            reference.name,
                            fetched.schema_type,
                            if schema_type == "AVRO" { "an" } else { "a" },
                            noun(schema_type),
                            noun(schema_type)
                        )));
                    }
                    stack.push(Open {
                        reference,
                        fetched,
                        next: 0,
                    });
                }
            }
            let Some(open) = stack.last_mut() else {
                break;
            };
            if let Some(child) = open.fetched.references.get(open.next) {
                next = Some(child.clone());
                open.next += 1;
                continue;
            }
            if let Some(open) = stack.pop() {
                done.insert((open.reference.subject.clone(), open.reference.version));
                out.push(ReferencedSchema {
                    name: open.reference.name,
                    subject: open.reference.subject,
                    version: open.fetched.version,
                    schema: open.fetched.schema,
                });
            }
        }
    }
    Ok(Ok(out))
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
    /// its id; the id it already has when it is registered. A subject
    /// whose schemas `schema` is not compatible with (the registry's 409)
    /// is refused with the subject and the ways out.
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
            if status == StatusCode::CONFLICT {
                return Err(self.incompatible(subject, status, &message));
            }
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

    /// The schema registered under `id`, with its type and references;
    /// `None` when the registry does not know the id.
    pub async fn schema_by_id(&self, id: u32) -> Result<Option<RegisteredSchema>> {
        let path = format!("{}/schemas/ids/{id}", self.prefix);
        let (status, answer) = self.request(Method::GET, &path, String::new()).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let what = format!("schema id {id}");
        let parsed = self.answer(status, &answer, &what)?;
        let schema = parsed["schema"]
            .as_str()
            .ok_or_else(|| self.error(&format!("the answer for {what} has no schema")))?;
        Ok(Some(RegisteredSchema {
            schema_type: schema_type(&parsed),
            schema: schema.to_string(),
            references: self.references(&parsed, &what)?,
        }))
    }

    /// The latest version of `subject`, of any schema type; `None` when
    /// the subject has no version.
    pub async fn latest(&self, subject: &str) -> Result<Option<VersionedSchema>> {
        self.subject_version(subject, "latest").await
    }

    /// Version `version` of `subject` (`-1`: the latest), of any schema
    /// type; `None` when the registry does not have it.
    pub async fn version(&self, subject: &str, version: i64) -> Result<Option<VersionedSchema>> {
        self.subject_version(subject, &version.to_string()).await
    }

    async fn subject_version(
        &self,
        subject: &str,
        version: &str,
    ) -> Result<Option<VersionedSchema>> {
        let path = format!(
            "{}/subjects/{}/versions/{version}",
            self.prefix,
            encode(subject)
        );
        let (status, answer) = self.request(Method::GET, &path, String::new()).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let what = format!("version {version} of subject \"{subject}\"");
        let parsed = self.answer(status, &answer, &what)?;
        match (
            parsed["id"].as_u64().and_then(|id| u32::try_from(id).ok()),
            parsed["version"].as_i64(),
            parsed["schema"].as_str(),
        ) {
            (Some(id), Some(number), Some(schema)) => Ok(Some(VersionedSchema {
                id,
                version: number,
                schema_type: schema_type(&parsed),
                schema: schema.to_string(),
                references: self.references(&parsed, &what)?,
            })),
            _ => Err(self.error(&format!(
                "the answer for {what} lacks its id, version or schema"
            ))),
        }
    }

    /// The `references` of an answer (none when it has none).
    fn references(&self, parsed: &serde_json::Value, what: &str) -> Result<Vec<SchemaReference>> {
        match parsed.get("references") {
            None | Some(serde_json::Value::Null) => Ok(Vec::new()),
            Some(list) => serde_json::from_value(list.clone()).map_err(|e| {
                self.error(&format!(
                    "the references in the answer for {what} are not a list of {{name, subject, version}}: {e}"
                ))
            }),
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

    /// The registry refused to register a schema under `subject` because
    /// the subject holds schemas it is not compatible with (Confluent's
    /// 409): which subject, and the ways out.
    fn incompatible(&self, subject: &str, status: StatusCode, message: &str) -> PipelineError {
        let message: String = message.chars().filter(|c| !c.is_control()).collect();
        PipelineError::Refused {
            sqlstate: "55000",
            primary: format!(
                "subject \"{subject}\" of schema registry connection \"{}\" holds schemas that the sink's schema is not compatible with; sink into another TOPIC, or, when no consumer needs the subject's schemas any more, delete the subject or set its compatibility to NONE",
                self.name
            ),
            detail: Some(format!("the registry answered {status}: {message}")),
            hint: None,
        }
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

/// The `schemaType` of an answer: `AVRO` when it has none, as the
/// registry leaves it out for Avro.
fn schema_type(parsed: &serde_json::Value) -> String {
    parsed["schemaType"].as_str().unwrap_or("AVRO").to_string()
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

    /// Subject versions held in memory, counting the questions asked.
    #[derive(Default)]
    struct Versions {
        held: std::collections::HashMap<(String, i64), VersionedSchema>,
        asked: usize,
    }

    impl Versions {
        fn add(&mut self, subject: &str, schema: serde_json::Value, references: &[(&str, &str)]) {
            let id = u32::try_from(self.held.len() + 1).unwrap();
            self.held.insert(
                (subject.to_string(), 1),
                VersionedSchema {
                    id,
                    version: 1,
                    schema_type: "AVRO".into(),
                    schema: schema.to_string(),
                    references: references.iter().map(|(n, s)| reference(n, s)).collect(),
                },
            );
        }
    }

    impl SubjectVersions for Versions {
        async fn subject_version(
            &mut self,
            subject: &str,
            version: i64,
        ) -> Result<Option<VersionedSchema>> {
            self.asked += 1;
            Ok(self.held.get(&(subject.to_string(), version)).cloned())
        }
    }

    fn reference(name: &str, subject: &str) -> SchemaReference {
        SchemaReference {
            name: name.into(),
            subject: subject.into(),
            version: 1,
        }
    }

    fn record(name: &str, field_type: &str) -> serde_json::Value {
        serde_json::json!({"type": "record", "name": name, "namespace": "shop",
                           "fields": [{"name": "f", "type": field_type}]})
    }

    #[tokio::test]
    async fn references_are_followed_through_every_level_and_cycles_and_gaps_refused() {
        let mut v = Versions::default();
        // Address uses Country; Customer uses both (a diamond): each
        // version is fetched once, every schema after the ones it uses.
        v.add(
            "country",
            serde_json::json!({"type": "enum", "name": "Country", "namespace": "shop",
                               "symbols": ["NL", "DE"]}),
            &[],
        );
        v.add(
            "address",
            record("Address", "shop.Country"),
            &[("shop.Country", "country")],
        );
        v.add(
            "customer",
            serde_json::json!({"type": "record", "name": "Customer", "namespace": "shop",
                "fields": [{"name": "home", "type": "shop.Address"},
                           {"name": "born", "type": "shop.Country"}]}),
            &[("shop.Address", "address"), ("shop.Country", "country")],
        );
        let top = [
            reference("shop.Customer", "customer"),
            reference("shop.Address", "address"),
        ];
        let resolved = resolve_references(
            "AVRO",
            &mut v,
            "subject \"orders-value\" version 1",
            Some(("orders-value", 1)),
            &top,
        )
        .await
        .unwrap()
        .unwrap();
        let order: Vec<(&str, &str)> = resolved
            .iter()
            .map(|r| (r.name.as_str(), r.subject.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("shop.Country", "country"),
                ("shop.Address", "address"),
                ("shop.Customer", "customer"),
            ]
        );
        assert_eq!(v.asked, 3);
        assert!(resolved.iter().all(|r| r.version == 1));
        // None: nothing asked.
        v.asked = 0;
        let none = resolve_references("AVRO", &mut v, "schema id 1", None, &[])
            .await
            .unwrap()
            .unwrap();
        assert!(none.is_empty());
        assert_eq!(v.asked, 0);

        // A version the registry does not have.
        let missing = resolve_references(
            "AVRO",
            &mut v,
            "subject \"orders-value\" version 2",
            None,
            &[
                reference("shop.Address", "address"),
                reference("shop.Gift", "gifts"),
            ],
        )
        .await
        .unwrap()
        .unwrap_err();
        assert_eq!(
            missing,
            "subject \"orders-value\" version 2 references subject \"gifts\" version 1 for type \"shop.Gift\", \
             which the registry does not have; register that version or point the reference at one the registry has"
        );
        // A deeper one, below a version that is there.
        v.add(
            "wrapper",
            record("Wrapper", "shop.Gift"),
            &[("shop.Gift", "gifts")],
        );
        let deeper = resolve_references(
            "AVRO",
            &mut v,
            "schema id 9",
            None,
            &[reference("shop.Wrapper", "wrapper")],
        )
        .await
        .unwrap()
        .unwrap_err();
        assert!(
            deeper.starts_with("schema id 9 references subject \"gifts\" version 1"),
            "{deeper}"
        );

        // A cycle between two subjects, and one back to the schema itself.
        v.add("a", record("A", "shop.B"), &[("shop.B", "b")]);
        v.add("b", record("B", "shop.A"), &[("shop.A", "a")]);
        let cycle = resolve_references(
            "AVRO",
            &mut v,
            "schema id 3",
            None,
            &[reference("shop.A", "a")],
        )
        .await
        .unwrap()
        .unwrap_err();
        assert_eq!(
            cycle,
            "the references of schema id 3 form a cycle (subject \"a\" version 1 -> subject \"b\" version 1 \
             -> subject \"a\" version 1); register the referenced types without a reference back"
        );
        v.add(
            "back",
            record("Back", "shop.Order"),
            &[("shop.Order", "orders-value")],
        );
        let back = resolve_references(
            "AVRO",
            &mut v,
            "subject \"orders-value\" version 1",
            Some(("orders-value", 1)),
            &[reference("shop.Back", "back")],
        )
        .await
        .unwrap()
        .unwrap_err();
        assert!(
            back.contains("form a cycle (subject \"orders-value\" version 1 -> subject \"back\" version 1 -> subject \"orders-value\" version 1)"),
            "{back}"
        );

        // Too many levels.
        for i in 0..=MAX_REFERENCE_DEPTH {
            let (next, next_type) = (format!("l{}", i + 1), format!("shop.L{}", i + 1));
            let here = record(&format!("L{i}"), &next_type);
            v.add(
                &format!("l{i}"),
                here,
                &[(next_type.as_str(), next.as_str())],
            );
        }
        let deep = resolve_references(
            "AVRO",
            &mut v,
            "schema id 4",
            None,
            &[reference("shop.L0", "l0")],
        )
        .await
        .unwrap()
        .unwrap_err();
        assert!(
            deep.starts_with(&format!("the references of schema id 4 nest deeper than {MAX_REFERENCE_DEPTH} levels (subject \"l0\" version 1 -> ")),
            "{deep}"
        );
    }

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
