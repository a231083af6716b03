//! The REST API: Confluent Schema Registry's routes, content types and
//! errors, over a [`Registry`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Path, Query, Request, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use evolve_compat::Mode;
use serde_json::{Value as Json, json};
use tower::ServiceExt;

use crate::access::Access;
use crate::auth::Users;
use crate::contract::ContractConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::record::{ConfigValue, RegistryMode, SchemaReference};
use crate::service::Registry;
use crate::state::{
    ConfigUpdate, DEFAULT_CONTEXT, SchemaInput, State, VersionEntry, VersionSpec,
    canonical_subject, java_trim, schema_type_field, split_subject,
};
use crate::store::Storage;

/// Confluent's content type, the default for responses.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// The default limit on a schema's text (`--max-schema-bytes`).
pub const DEFAULT_MAX_SCHEMA: usize = 8 * 1024 * 1024;

/// The request body limit for a schema limit (`--max-body-bytes` when it
/// is not given): twice the schema, since escaping a schema's quotes in
/// the JSON body can double it, and 1 MiB for the rest of the body.
pub const fn default_max_body(max_schema: usize) -> usize {
    max_schema.saturating_mul(2).saturating_add(1024 * 1024)
}

/// The default request body limit: [`default_max_body`] of
/// [`DEFAULT_MAX_SCHEMA`] (17 MiB).
pub const DEFAULT_MAX_BODY: usize = default_max_body(DEFAULT_MAX_SCHEMA);

/// What the handlers share.
pub struct App {
    pub registry: Registry<Storage>,
    pub users: Option<Users>,
    pub metrics: Metrics,
    /// The largest request body read (42209 beyond).
    pub max_body: usize,
    /// The largest schema text accepted (42209 beyond).
    pub max_schema: usize,
    /// Which `Host` and `Origin` headers are accepted.
    pub access: Access,
}

type Shared = Arc<App>;
/// A request's query parameters, each by its first value: Jersey reads a
/// single-valued `@QueryParam` with `MultivaluedMap.getFirst`, so
/// `?deleted=true&deleted=false` is `deleted=true` in Confluent, where a
/// map built by axum's `Query` would keep the last value.
struct Params(HashMap<String, String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Params {
    type Rejection = axum::extract::rejection::QueryRejection;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Params, Self::Rejection> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state).await?;
        Ok(Params(first_values(pairs)))
    }
}

/// Each name's first value, as Jersey's `getFirst` reads it.
fn first_values(pairs: Vec<(String, String)>) -> HashMap<String, String> {
    let mut params = HashMap::with_capacity(pairs.len());
    for (name, value) in pairs {
        params.entry(name).or_insert(value);
    }
    params
}

/// The router with every route, the `Host` and `Origin` checks, basic auth
/// (when users are configured), metrics and access logs. Requests under
/// `/contexts/{context}/` (Confluent's base context path) are answered as
/// the same request about that context's subjects and ids.
pub fn router(app: Arc<App>) -> Router {
    let api = routes(Arc::clone(&app));
    let (inner, inner_app) = (api.clone(), Arc::clone(&app));
    Router::new()
        .route(
            "/contexts/{context}/{*rest}",
            any(move |request: Request| in_context(inner.clone(), inner_app.clone(), request)),
        )
        .fallback(move |request: Request| aliased(api.clone(), app.clone(), request))
}

/// Answers a request through `api`, its subject replaced by the subject's
/// alias when it has one (see [`alias_path`]).
async fn aliased(api: Router, app: Arc<App>, mut request: Request) -> Response {
    let uri = request.uri();
    let rewritten = alias_path(uri.path(), uri.query(), |subject| {
        app.registry.read(|state| state.alias_of(subject))
    });
    if let Some(uri) = rewritten.and_then(|p| p.parse().ok()) {
        *request.uri_mut() = uri;
    }
    match api.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The path and query of a request whose subject has an `alias` in its
/// configuration, with the alias in its place, as Confluent's alias
/// filter rewrites them: the path segment after `subjects`
/// (`/subjects/{s}/...`, `/compatibility/subjects/{s}/...`, every method)
/// and the `subject` parameter of `/schemas/ids/...`. `None` when nothing
/// changes. One level only: an alias's own alias is not followed.
pub fn alias_path(
    path: &str,
    query: Option<&str>,
    alias_of: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let mut changed = false;
    let mut segments: Vec<String> = path.split('/').map(str::to_owned).collect();
    if let Some(i) = segments.iter().position(|s| s == "subjects")
        && let Some(segment) = segments.get_mut(i + 1)
        && let Some(alias) = percent_decode(segment).and_then(|s| alias_of(&s))
    {
        *segment = encode_segment(&alias);
        changed = true;
    }
    let mut query: Vec<String> = query
        .filter(|q| !q.is_empty())
        .map(|q| q.split('&').map(str::to_owned).collect())
        .unwrap_or_default();
    if path.starts_with("/schemas/ids/") {
        for pair in &mut query {
            if let Some(value) = pair.strip_prefix("subject=")
                && let Some(alias) = percent_decode(value).and_then(|s| alias_of(&s))
            {
                *pair = format!("subject={}", encode_segment(&alias));
                changed = true;
            }
        }
    }
    changed.then(|| {
        let path = segments.join("/");
        if query.is_empty() {
            path
        } else {
            format!("{path}?{}", query.join("&"))
        }
    })
}

/// Answers a `/contexts/{context}/...` request through `api`, rewritten
/// by [`context_path`] (and [`alias_path`]); 404 for a path it does not
/// know.
async fn in_context(api: Router, app: Arc<App>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Some(path) = context_path(parts.uri.path(), parts.uri.query()) else {
        return ApiError::not_found_path(parts.uri.path()).into_response();
    };
    let (bare, query) = match path.split_once('?') {
        Some((bare, query)) => (bare, Some(query)),
        None => (path.as_str(), None),
    };
    let path = alias_path(bare, query, |subject| {
        app.registry.read(|state| state.alias_of(subject))
    })
    .unwrap_or(path.clone());
    let Ok(uri) = path.parse() else {
        return ApiError::not_found_path(parts.uri.path()).into_response();
    };
    // A new request, without this route's extensions (its path
    // parameters), so that the API routes it afresh.
    let mut forwarded = Request::new(body);
    *forwarded.method_mut() = parts.method;
    *forwarded.uri_mut() = uri;
    *forwarded.version_mut() = parts.version;
    *forwarded.headers_mut() = parts.headers;
    match api.oneshot(forwarded).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The path and query a `/contexts/{context}/rest` request stands for:
/// subjects qualified with the context (`/subjects/s` →
/// `/subjects/:.ctx:s`, unless already qualified), the context itself for
/// `/config` and `/mode` (`:.ctx:`), and `subject=:.ctx:` for schema ids;
/// `None` for other paths. The context `.` is the default one, and a name
/// without its leading dot gets one.
pub fn context_path(path: &str, query: Option<&str>) -> Option<String> {
    let rest = path.strip_prefix("/contexts/")?;
    let (context, rest) = rest.split_once('/')?;
    let decoded = percent_decode(context)?;
    let context = if decoded.starts_with('.') {
        decoded
    } else {
        format!(".{decoded}")
    };
    if context.contains([':', '/']) || context.chars().any(char::is_control) {
        return None;
    }
    let default = context == DEFAULT_CONTEXT;
    let qualify = |segment: &str| -> String {
        let is_qualified =
            segment.starts_with(":.") || segment.starts_with("%3A.") || segment.starts_with("%3a.");
        if default || is_qualified {
            segment.to_owned()
        } else {
            format!(":{}:{segment}", encode_segment(&context))
        }
    };
    let scope = if default {
        String::new()
    } else {
        format!("%3A{}%3A", encode_segment(&context))
    };
    let mut query: Vec<String> = query
        .filter(|q| !q.is_empty())
        .map(|q| q.split('&').map(str::to_owned).collect())
        .unwrap_or_default();
    let segments: Vec<&str> = rest.split('/').collect();
    let path = match segments.as_slice() {
        ["subjects"] | ["subjects", ""] => {
            // The context's subjects only (`:.:` for the default one).
            let scope = if default { "%3A.%3A" } else { scope.as_str() };
            match query.iter_mut().find(|p| p.starts_with("subjectPrefix=")) {
                Some(p) => *p = format!("subjectPrefix={scope}{}", &p["subjectPrefix=".len()..]),
                None => query.push(format!("subjectPrefix={scope}")),
            }
            "/subjects".to_owned()
        }
        ["subjects", subject, more @ ..] => join("/subjects", &qualify(subject), more),
        ["compatibility", "subjects", subject, more @ ..] => {
            join("/compatibility/subjects", &qualify(subject), more)
        }
        [scope_kind @ ("config" | "mode")] => {
            if default {
                format!("/{scope_kind}")
            } else {
                format!("/{scope_kind}/:{}:", encode_segment(&context))
            }
        }
        [scope_kind @ ("config" | "mode"), subject] => {
            format!("/{scope_kind}/{}", qualify(subject))
        }
        ["schemas", "types"] => "/schemas/types".to_owned(),
        ["schemas", "ids", id, more @ ..] => {
            if !default && !query.iter().any(|p| p.starts_with("subject=")) {
                query.push(format!("subject={scope}"));
            }
            join("/schemas/ids", id, more)
        }
        _ => return None,
    };
    Some(if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    })
}

fn join(base: &str, segment: &str, more: &[&str]) -> String {
    let mut out = format!("{base}/{segment}");
    for m in more {
        out.push('/');
        out.push_str(m);
    }
    out
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes what a path segment or query value cannot hold as is.
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Every route of the API.
fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/schemas", get(list_schemas))
        .route("/schemas/types", get(schema_types))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_of_id))
        .route("/schemas/ids/{id}/versions", get(versions_of_id))
        .route("/subjects", get(list_subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route(
            "/subjects/{subject}/versions",
            get(list_versions).post(register),
        )
        .route(
            "/subjects/{subject}/versions/{version}",
            get(get_version).delete(delete_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/schema",
            get(raw_schema_of_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/referencedby",
            get(referenced_by),
        )
        .route(
            "/compatibility/subjects/{subject}/versions",
            post(check_latest),
        )
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            post(check_version),
        )
        .route(
            "/config",
            get(get_global_config)
                .put(put_global_config)
                .delete(delete_global_config),
        )
        .route(
            "/config/{subject}",
            get(get_config).put(put_config).delete(delete_config),
        )
        .route(
            "/mode",
            get(get_global_mode)
                .put(put_global_mode)
                .delete(delete_global_mode),
        )
        .route(
            "/mode/{subject}",
            get(get_mode).put(put_mode).delete(delete_mode),
        )
        .route("/contexts", get(contexts))
        .route("/metrics", get(metrics))
        .route("/v1/metadata/writer", get(writer))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::map_response(json_rejections))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            crate::forward::middleware,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            authenticate,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), guard))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), observe))
        .with_state(app)
}

// ---- responses -------------------------------------------------------------

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(
            status,
            &json!({"error_code": self.error_code, "message": self.message}),
        )
    }
}

fn json_response(status: StatusCode, body: &Json) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

fn ok(body: Json) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &body))
}

fn flag(params: &HashMap<String, String>, name: &str) -> bool {
    params
        .get(name)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Reads a request body of at most `max` bytes. One whose declared
/// length (`Content-Length`) is already more is refused at once, without
/// waiting for bytes that would be refused anyway.
pub(crate) async fn limited_body(body: Body, max: usize) -> Result<axum::body::Bytes, ApiError> {
    use axum::body::HttpBody as _;
    if body.size_hint().lower() > max as u64 {
        return Err(ApiError::too_large(max));
    }
    axum::body::to_bytes(body, max)
        .await
        .map_err(|_| ApiError::too_large(max))
}

/// Reads the body (at most `max_body` bytes) as JSON.
async fn json_body(app: &App, body: Body) -> Result<Json, ApiError> {
    let bytes = limited_body(body, app.max_body).await?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "The request body is empty; send a JSON object",
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("The request body is not valid JSON: {e}")))
}

/// Decodes the body of a registration, lookup or compatibility check, as
/// the handlers do (also the fuzz target for request decoding).
/// `normalize` is the query parameter of the same name.
pub fn decode_schema_body(bytes: &[u8], normalize: bool) -> Result<SchemaInput, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "The request body is empty; send a JSON object",
        ));
    }
    let body: Json = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("The request body is not valid JSON: {e}")))?;
    let mut input = schema_input(body)?;
    input.normalize = normalize;
    Ok(input)
}

/// Reads a schema body: at most `max_body` bytes, a schema of at most
/// `max_schema` bytes (42209 beyond either). `operation` names the request
/// in the error.
async fn read_schema_body(
    app: &App,
    body: Body,
    params: &HashMap<String, String>,
    operation: &str,
) -> Result<SchemaInput, ApiError> {
    let bytes = limited_body(body, app.max_body).await?;
    let input = decode_schema_body(&bytes, flag(params, "normalize"))?;
    if input.schema.len() > app.max_schema {
        return Err(ApiError::schema_too_large(
            operation,
            input.schema.len(),
            app.max_schema,
        ));
    }
    Ok(input)
}

/// The schema fields of a registration, lookup or check body (the schema
/// text is moved out of it, not copied).
fn schema_input(body: Json) -> Result<SchemaInput, ApiError> {
    let Json::Object(mut object) = body else {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object with a \"schema\" field",
        ));
    };
    let schema = match object.remove("schema") {
        Some(Json::String(s)) if !s.trim().is_empty() => s,
        Some(Json::String(_)) => return Err(ApiError::invalid_schema("Empty schema")),
        Some(_) => {
            return Err(ApiError::invalid_schema(
                "Invalid schema: \"schema\" must be a string holding the schema text",
            ));
        }
        None => {
            return Err(ApiError::invalid_schema(
                "Invalid schema: the request has no \"schema\" field",
            ));
        }
    };
    let schema_type = match object.get("schemaType") {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ApiError::invalid_schema(format!(
                "Invalid schema type {other}: use \"AVRO\", \"PROTOBUF\" or \"JSON\""
            )));
        }
    };
    let references: Vec<SchemaReference> = match object.remove("references") {
        None | Some(Json::Null) => Vec::new(),
        Some(refs) => serde_json::from_value(refs).map_err(|e| {
            ApiError::invalid_schema(format!(
                "Invalid schema: \"references\" must be a list of {{\"name\",\"subject\",\"version\"}}: {e}"
            ))
        })?,
    };
    // A negative version is the next one, stamped (see
    // `SchemaInput::next_version`); a negative id is none, as Confluent's
    // `schemaId < 0`; 0 is none for both.
    let next_version = object
        .get("version")
        .and_then(Json::as_i64)
        .is_some_and(|v| (i64::from(i32::MIN)..0).contains(&v));
    let number = |name: &str| -> Result<Option<u32>, ApiError> {
        match object.get(name) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Number(n)) if n.as_i64() == Some(0) => Ok(None),
            Some(Json::Number(_)) if name == "version" && next_version => Ok(None),
            Some(Json::Number(n)) if n.as_i64() == Some(-1) => Ok(None),
            Some(Json::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("\"{name}\" must be a positive integer"))
                }),
            Some(_) => Err(ApiError::bad_request(format!(
                "\"{name}\" must be a positive integer"
            ))),
        }
    };
    let (id, version) = (number("id")?, number("version")?);
    let mut contract = |name: &str| object.remove(name).filter(|v| !v.is_null());
    let metadata = contract("metadata");
    let rule_set = contract("ruleSet");
    let input = SchemaInput {
        schema,
        schema_type,
        references,
        id,
        version,
        next_version,
        metadata,
        rule_set,
        normalize: false,
    };
    input.check_contract()?;
    Ok(input)
}

/// A schema's JSON as `GET .../versions/{v}` and `/schemas/ids/{id}` give
/// it; `format=serialized` turns a Protobuf schema into the base64 of its
/// `FileDescriptorProto`.
fn schema_fields(
    state: &State,
    context: &str,
    id: u32,
    params: &HashMap<String, String>,
    out: &mut serde_json::Map<String, Json>,
) -> Result<(), ApiError> {
    let stored = state.schema_in_use(context, id)?;
    if let Some(t) = schema_type_field(stored.schema_type) {
        out.insert("schemaType".into(), json!(t));
    }
    let text = match (params.get("format").map(String::as_str), stored.schema_type) {
        (Some("serialized"), evolve_compat::SchemaType::Protobuf) => {
            match &*state.parsed(context, id)? {
                evolve_compat::Schema::Protobuf(p) => evolve_compat::protobuf::serialized(p),
                _ => stored.text.clone(),
            }
        }
        _ => stored.text.clone(),
    };
    out.insert("schema".into(), json!(text));
    if !stored.references.is_empty() {
        out.insert("references".into(), json!(stored.references));
    }
    if let Some(metadata) = &stored.metadata {
        out.insert("metadata".into(), metadata.clone());
    }
    if let Some(rule_set) = &stored.rule_set {
        out.insert("ruleSet".into(), rule_set.clone());
    }
    Ok(())
}

/// The fields Confluent 8.x adds to a version it reads from its store
/// (`SchemaValue.toSchemaEntity`): the schema's `guid` (see
/// [`crate::guid`]), the version's registration time `ts` (epoch
/// milliseconds; Confluent's is the Kafka timestamp of the version's
/// record, `SchemaRegistryValue.getTimestamp`) and whether the version is
/// soft-deleted (`deleted`, `false` included, as Jackson's `NON_EMPTY`
/// writes it). A version whose record has no time (one written before
/// evolve kept it) has no `ts`, as Confluent leaves out a field it has no
/// value for.
fn version_fields(
    state: &State,
    context: &str,
    entry: VersionEntry,
    out: &mut serde_json::Map<String, Json>,
) -> Result<(), ApiError> {
    let stored = state.schema_in_use(context, entry.id)?;
    out.insert("guid".into(), json!(stored.guid()));
    if let Some(ts) = entry.ts {
        out.insert("ts".into(), json!(ts));
    }
    out.insert("deleted".into(), json!(entry.deleted));
    Ok(())
}

/// The version `GET /schemas/ids/{id}` reads the schema from, as
/// Confluent's `schemaKeyById` picks it: the version of the subject the
/// `subject` parameter names when that subject holds the id, else one of
/// the context's versions that hold it (a live one first; Confluent takes
/// whichever its map gives first).
fn version_of_id(
    state: &State,
    context: &str,
    id: u32,
    subject: Option<&str>,
) -> Option<(String, u32, VersionEntry)> {
    let with_state = |(name, version): (String, u32)| {
        let entry = state
            .subject(&name)
            .and_then(|s| s.versions.get(&version))
            .copied()?;
        Some((name, version, entry))
    };
    let all: Vec<(String, u32, VersionEntry)> = state
        .versions_of_id(context, id, true)
        .into_iter()
        .filter_map(with_state)
        .collect();
    let named = subject
        .map(canonical_subject)
        .filter(|s| !split_subject(s).1.is_empty());
    if let Some(named) = named
        && let Some(found) = all.iter().rev().find(|(name, _, _)| name == named)
    {
        return Some(found.clone());
    }
    all.iter()
        .find(|(_, _, entry)| !entry.deleted)
        .or(all.first())
        .cloned()
}

/// A schema id in a path, as Jersey converts Confluent's `Integer id`
/// path parameter (`Integer.valueOf`, no trimming, an optional sign):
/// anything that is not a Java `int` is 404 with error_code 404, before
/// the resource runs; an `int` that no schema has (0 and negative ones
/// included) is 40403, from the resource (`Errors.schemaNotFoundException`).
fn parse_id(text: &str) -> Result<u32, ApiError> {
    let id = text
        .parse::<i32>()
        .map_err(|_| ApiError::param_not_found("id", text))?;
    u32::try_from(id)
        .ok()
        .filter(|id| *id >= 1)
        .ok_or_else(|| ApiError::schema_not_found(id))
}

/// A `PUT /config` body: `compatibility` (or `compatibilityLevel`), the
/// data-contract defaults and overrides, and Confluent's other settings
/// (`alias`, `normalize`, `validateFields`, `validateRules`,
/// `compatibilityGroup`), at least one of them.
fn parse_config(body: &Json) -> Result<ConfigUpdate, ApiError> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::invalid_compatibility_level("(missing)"));
    };
    let level = match object
        .get("compatibility")
        .or_else(|| object.get("compatibilityLevel"))
    {
        None | Some(Json::Null) => None,
        Some(Json::String(text)) => Some(
            text.parse::<Mode>()
                .map_err(|_| ApiError::invalid_compatibility_level(text))?,
        ),
        Some(other) => return Err(ApiError::invalid_compatibility_level(&other.to_string())),
    };
    let contract = ContractConfig::from_body(object)?;
    let text = |name: &str| -> Result<Option<Option<String>>, ApiError> {
        match object.get(name) {
            None => Ok(None),
            Some(Json::Null) => Ok(Some(None)),
            Some(Json::String(s)) => Ok(Some(Some(s.clone()))),
            Some(other) => Err(ApiError::bad_request(format!(
                "Invalid config: \"{name}\" must be a string or null, not {other}"
            ))),
        }
    };
    let boolean = |name: &str| -> Result<Option<Option<bool>>, ApiError> {
        match object.get(name) {
            None => Ok(None),
            Some(Json::Null) => Ok(Some(None)),
            Some(Json::Bool(b)) => Ok(Some(Some(*b))),
            Some(other) => Err(ApiError::bad_request(format!(
                "Invalid config: \"{name}\" must be true, false or null, not {other}"
            ))),
        }
    };
    let update = ConfigUpdate {
        compatibility: level,
        contract,
        alias: text("alias")?,
        normalize: boolean("normalize")?,
        validate_fields: boolean("validateFields")?,
        validate_rules: boolean("validateRules")?,
        compatibility_group: text("compatibilityGroup")?,
    };
    if update.is_empty() {
        return Err(ApiError::invalid_compatibility_level("(missing)"));
    }
    Ok(update)
}

/// A configuration as `GET /config` shows it (`level_key` is
/// `compatibilityLevel`; a `PUT` answers with `compatibility`).
fn config_json(config: &ConfigValue, level_key: &str) -> Json {
    let mut out = match serde_json::to_value(&config.settings) {
        Ok(Json::Object(settings)) => settings,
        _ => serde_json::Map::new(),
    };
    if let Some(level) = config.compatibility {
        out.insert(level_key.into(), json!(level.as_str()));
    }
    for (name, value) in config.contract.fields() {
        if let Some(value) = value {
            out.insert(name.into(), value.clone());
        }
    }
    Json::Object(out)
}

fn parse_mode(body: &Json) -> Result<RegistryMode, ApiError> {
    let text = body
        .get("mode")
        .and_then(Json::as_str)
        .ok_or_else(|| ApiError::invalid_mode("(missing)"))?;
    RegistryMode::parse(text).ok_or_else(|| ApiError::invalid_mode(text))
}

// ---- handlers ----------------------------------------------------------------

async fn root() -> Result<Response, ApiError> {
    ok(json!({}))
}

async fn schema_types() -> Result<Response, ApiError> {
    ok(json!(["JSON", "PROTOBUF", "AVRO"]))
}

/// `GET /contexts`, with Confluent's `contextPrefix`, `offset` and `limit`
/// (`ContextsResource.listContexts`: filtered by prefix, then paged).
async fn contexts(
    AxumState(app): AxumState<Shared>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let page = page(&params, None)?;
    let prefix = params.get("contextPrefix").map_or("", String::as_str);
    let names = app.registry.read(|state| state.context_names());
    ok(json!(paged(
        names.into_iter().filter(|n| n.starts_with(prefix)),
        page
    )))
}

async fn schema_by_id(
    AxumState(app): AxumState<Shared>,
    Path(id): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let body = app
        .registry
        .read_fresh(|state| {
            let subject = params.get("subject").map(String::as_str);
            let context = state.context_of_id(id, subject);
            let mut out = serde_json::Map::new();
            schema_fields(state, &context, id, &params, &mut out)?;
            // Confluent 8.x (`KafkaSchemaRegistry.get(id, subject, ...)`):
            // the guid and `deleted` of the version the schema is read
            // from, and, when the request names a `subject`, that
            // version's subject and number (`new SchemaString(schema)`).
            let found = version_of_id(state, &context, id, subject);
            if let Some((name, version, entry)) = found {
                if subject.is_some() {
                    out.insert("subject".into(), json!(name));
                    out.insert("version".into(), json!(version));
                }
                version_fields(state, &context, entry, &mut out)?;
            }
            Ok(Json::Object(out))
        })
        .await?;
    ok(body)
}

async fn raw_schema_by_id(
    AxumState(app): AxumState<Shared>,
    Path(id): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let text = app
        .registry
        .read_fresh(|state| {
            let context = state.context_of_id(id, params.get("subject").map(String::as_str));
            Ok(state.schema_in_use(&context, id)?.text.clone())
        })
        .await?;
    Ok(raw(text))
}

fn raw(text: String) -> Response {
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

async fn subjects_of_id(
    AxumState(app): AxumState<Shared>,
    Path(id): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let deleted = flag(&params, "deleted");
    let page = page(&params, None)?;
    let subjects = app
        .registry
        .read_fresh(|state| {
            let context = state.context_of_id(id, params.get("subject").map(String::as_str));
            state.schema_in_use(&context, id)?;
            let mut subjects: Vec<String> = state
                .versions_of_id(&context, id, deleted)
                .into_iter()
                .map(|(s, _)| s)
                .collect();
            subjects.dedup();
            Ok(paged(subjects, page))
        })
        .await?;
    ok(json!(subjects))
}

async fn versions_of_id(
    AxumState(app): AxumState<Shared>,
    Path(id): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let deleted = flag(&params, "deleted");
    let page = page(&params, None)?;
    let versions = app
        .registry
        .read_fresh(|state| {
            let context = state.context_of_id(id, params.get("subject").map(String::as_str));
            state.schema_in_use(&context, id)?;
            Ok(paged(
                state
                    .versions_of_id(&context, id, deleted)
                    .into_iter()
                    .map(|(subject, version)| json!({"subject": subject, "version": version})),
                page,
            ))
        })
        .await?;
    ok(json!(versions))
}

/// The subjects `subjectPrefix` selects: none, an empty one or `:*:`,
/// every context's (Confluent's default); a prefix that names a context
/// (`:.ctx:`), that context's (`:.:`, the default context's); any other
/// prefix, the default context's subjects that start with it.
fn subjects_by_prefix(
    state: &State,
    prefix: Option<&str>,
    deleted: bool,
    deleted_only: bool,
) -> Vec<String> {
    let names = match prefix {
        Some(p) if !p.is_empty() && p != ":*:" => canonical_subject(p),
        _ => "",
    };
    state
        .subject_names(names, deleted, deleted_only)
        .into_iter()
        .filter(|name| selected_by_prefix(name, prefix))
        .collect()
}

/// Whether `subjectPrefix` (see [`subjects_by_prefix`]) selects the subject
/// `name`.
fn selected_by_prefix(name: &str, prefix: Option<&str>) -> bool {
    let prefix = match prefix {
        Some(p) if !p.is_empty() && p != ":*:" => canonical_subject(p),
        _ => return true,
    };
    name.starts_with(prefix)
        && (prefix.starts_with(":.") || split_subject(name).0 == DEFAULT_CONTEXT)
}

/// `GET /schemas?aliases=true`: the subjects whose configuration has an
/// `alias` and that `subjectPrefix` selects, by the subject the alias
/// names (qualified in the aliasing subject's context), as Confluent's
/// `getAliases` collects them.
fn aliases_by_target(state: &State, prefix: Option<&str>) -> BTreeMap<String, Vec<String>> {
    let mut by_target: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (subject, target) in state.aliases() {
        if selected_by_prefix(&subject, prefix) {
            by_target.entry(target).or_default().push(subject);
        }
    }
    by_target
}

/// The most `GET /schemas` answers at once, and its default (Confluent's
/// `schema.search.default.limit` and `schema.search.max.limit`).
pub const SCHEMA_SEARCH_LIMIT: usize = 1000;

/// A query parameter that Confluent declares as a Java `int` with a
/// default (`offset`, `limit`), read as Jersey's `PrimitiveValueOfExtractor`
/// reads it: absent, or empty once trimmed, is the default (`None`);
/// otherwise `Integer.valueOf` of the text as sent (no trimming, an
/// optional sign), and anything else is 404 with error_code 404 (JAX-RS's
/// `NotFoundException` for a query parameter it cannot convert).
fn int_param(params: &HashMap<String, String>, name: &str) -> Result<Option<i32>, ApiError> {
    match params.get(name) {
        None => Ok(None),
        Some(text) if java_trim(text).is_empty() => Ok(None),
        Some(text) => text
            .parse::<i32>()
            .map(Some)
            .map_err(|_| ApiError::param_not_found(name, text)),
    }
}

/// The `offset` and `limit` query parameters (Confluent 7.7.3+): how many
/// items to skip, and how many to answer at most. A limit that is absent,
/// zero or negative, or over `max`, is `max` (`None`: no limit), as
/// Confluent's `normalizeLimit`. A negative offset skips nothing (Confluent
/// passes it to `Stream.skip`, which throws: a 500 not worth copying).
fn page(
    params: &HashMap<String, String>,
    max: Option<usize>,
) -> Result<(usize, Option<usize>), ApiError> {
    let offset = int_param(params, "offset")?.map_or(0, |o| usize::try_from(o).unwrap_or(0));
    let limit = int_param(params, "limit")?
        .and_then(|l| usize::try_from(l).ok())
        .filter(|l| *l > 0 && max.is_none_or(|m| *l <= m))
        .or(max);
    Ok((offset, limit))
}

/// `items` from `offset`, at most `limit` of them.
fn paged<T>(items: impl IntoIterator<Item = T>, (offset, limit): (usize, Option<usize>)) -> Vec<T> {
    items
        .into_iter()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
        .collect()
}

async fn list_subjects(
    AxumState(app): AxumState<Shared>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let page = page(&params, None)?;
    let names = app.registry.read(|state| {
        let (deleted, deleted_only) = (flag(&params, "deleted"), flag(&params, "deletedOnly"));
        let prefix = params.get("subjectPrefix").map(String::as_str);
        paged(
            subjects_by_prefix(state, prefix, deleted, deleted_only),
            page,
        )
    });
    ok(json!(names))
}

/// `GET /schemas` (Confluent 6.0+): the versions of the subjects
/// `subjectPrefix` selects (as `GET /subjects` does), each as
/// `GET /subjects/{s}/versions/{v}` shows it, by subject then version;
/// `deleted` adds soft-deleted versions, `latestOnly` keeps each subject's
/// newest, `ruleType` keeps the schemas with a rule of that type, then
/// `offset` and `limit` (at most [`SCHEMA_SEARCH_LIMIT`]) page. With
/// `aliases=true` (Confluent 7.6+), the subjects that the aliases of the
/// selected subjects name are listed too (whatever their names), and each
/// version of a subject that aliases name carries them in `aliases`.
/// Confluent 8.x's association filters (`resourceType`, `associationType`,
/// `lifecycle`) are taken too: evolve keeps no associations, so with any
/// of them a schema is listed only when `lifecycle=NONE` ("no
/// association") is among the lifecycles asked for, as Confluent answers
/// for subjects without associations. `format` is not a parameter of this
/// route in Confluent, and is ignored.
async fn list_schemas(
    AxumState(app): AxumState<Shared>,
    Params(params): Params,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let page = page(&params, Some(SCHEMA_SEARCH_LIMIT))?;
    let deleted = flag(&params, "deleted");
    let latest_only = flag(&params, "latestOnly");
    let rule_type = params.get("ruleType").filter(|t| !t.is_empty()).cloned();
    let rule_type = rule_type.as_ref();
    let unassociated = association_filter(&pairs)?;
    if unassociated == Some(false) {
        return ok(json!([]));
    }
    let mut params = params;
    params.remove("format");
    let schemas = app.registry.read(|state| {
        let prefix = params.get("subjectPrefix").map(String::as_str);
        let aliases = if flag(&params, "aliases") {
            aliases_by_target(state, prefix)
        } else {
            BTreeMap::new()
        };
        let mut names = subjects_by_prefix(state, prefix, deleted, false);
        names.extend(aliases.keys().cloned());
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            let Some(subject) = state.subject(&name) else {
                continue;
            };
            let context = split_subject(&name).0;
            let visible: Vec<(u32, VersionEntry)> = subject
                .versions
                .iter()
                .filter(|(_, e)| deleted || !e.deleted)
                .map(|(v, e)| (*v, *e))
                .collect();
            let chosen = if latest_only {
                &visible[visible.len().saturating_sub(1)..]
            } else {
                &visible[..]
            };
            for (version, entry) in chosen {
                let id = &entry.id;
                let Ok(stored) = state.schema_in_use(context, *id) else {
                    continue;
                };
                if let Some(wanted) = rule_type
                    && !has_rule_of_type(stored.rule_set.as_ref(), wanted)
                {
                    continue;
                }
                let mut schema = serde_json::Map::new();
                schema.insert("subject".into(), json!(name));
                schema.insert("version".into(), json!(version));
                schema.insert("id".into(), json!(id));
                if let Some(by) = aliases.get(&name) {
                    schema.insert("aliases".into(), json!(by));
                }
                if schema_fields(state, context, *id, &params, &mut schema).is_ok()
                    && version_fields(state, context, *entry, &mut schema).is_ok()
                {
                    out.push(Json::Object(schema));
                }
            }
        }
        paged(out, page)
    });
    ok(json!(schemas))
}

/// `GET /schemas`'s association filters (Confluent 8.x,
/// `SchemasResource.getSchemas`): `None` when the request names none of
/// `resourceType`, `associationType` (repeatable) and `lifecycle`
/// (repeatable: `NONE`, `STRONG`, `WEAK`); otherwise whether a schema
/// without associations is listed, which is when `NONE` is among the
/// lifecycles. A lifecycle that is not one of the three is 404, as JAX-RS
/// answers a query parameter its enum cannot take.
fn association_filter(pairs: &[(String, String)]) -> Result<Option<bool>, ApiError> {
    let mut filtered = false;
    let mut none = false;
    for (name, value) in pairs {
        match name.as_str() {
            "resourceType" | "associationType" => filtered = true,
            "lifecycle" => {
                filtered = true;
                match value.as_str() {
                    "NONE" => none = true,
                    "STRONG" | "WEAK" => {}
                    _ => {
                        return Err(ApiError::new(
                            404,
                            404,
                            format!(
                                "HTTP 404 Not Found: lifecycle {value:?} is not one of NONE, STRONG and WEAK"
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(filtered.then_some(none))
}

/// Whether a rule set has a rule whose `type` is `wanted` (Confluent's
/// `hasRulesWithType`).
fn has_rule_of_type(rule_set: Option<&Json>, wanted: &str) -> bool {
    let Some(rule_set) = rule_set else {
        return false;
    };
    ["migrationRules", "domainRules", "encodingRules"]
        .iter()
        .filter_map(|list| rule_set.get(list).and_then(Json::as_array))
        .flatten()
        .any(|rule| rule.get("type").and_then(Json::as_str) == Some(wanted))
}

async fn lookup(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
    body: Body,
) -> Result<Response, ApiError> {
    let input = read_schema_body(&app, body, &params, "Lookup").await?;
    let deleted = flag(&params, "deleted");
    let body = app
        .registry
        .read_fresh(|state| {
            let (id, version) = state.lookup(&subject, &input, deleted)?;
            let mut out = serde_json::Map::new();
            out.insert("subject".into(), json!(subject));
            out.insert("version".into(), json!(version));
            out.insert("id".into(), json!(id));
            schema_fields(state, split_subject(&subject).0, id, &params, &mut out)?;
            Ok(Json::Object(out))
        })
        .await?;
    ok(body)
}

async fn register(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
    body: Body,
) -> Result<Response, ApiError> {
    let input = read_schema_body(&app, body, &params, "Register").await?;
    let existing = app
        .registry
        .read(|state| state.existing_registration(&subject, &input));
    let (id, version) = match existing {
        Some(existing) => (existing.id, existing.version),
        None => {
            let code = app.registry.settings.incompatible_code;
            app.registry
                .write(|state| {
                    let r = state.register(&subject, &input, code)?;
                    Ok(((r.id, r.version), r.records))
                })
                .await?
        }
    };
    // A Protobuf schema sent as a serialized descriptor is answered in
    // that form (see `registration_answer`).
    let mut params = params;
    if crate::state::parse_schema_type(input.schema_type.as_deref()).ok()
        == Some(evolve_compat::SchemaType::Protobuf)
        && evolve_compat::protobuf::is_serialized(&input.schema)
    {
        params.insert("format".into(), "serialized".into());
    }
    let answer = app
        .registry
        .read(|state| registration_answer(state, &subject, id, version, &params));
    ok(answer)
}

/// What a registration answers, as Confluent 7.4.1+ does
/// (`SubjectVersionsResource.register` answers `new
/// RegisterSchemaResponse(result)`, Jackson `NON_EMPTY`): the `id`, the
/// subject's `version` holding it, the schema as stored (`schema`,
/// `schemaType`, `references`, `metadata`, `ruleSet`, with `format`), and
/// since 8.0 its `guid`. `schemaType` is there for Avro too: Confluent's
/// `Schema(subject, RegisterSchemaRequest)` sets `AVRO` when the request
/// names no type. No `ts` or `deleted`: the `Schema` a registration
/// returns is built from the request, not read from the store. A client
/// that reads only `id` (Confluent's before 7.4.1) reads the same `id`.
/// Should the version be gone already (a delete that came in between),
/// the answer is `{"id": N}` alone.
///
/// One difference: a Protobuf schema sent as a serialized descriptor
/// (base64 of a `FileDescriptorProto`, as confluent-kafka-python's
/// serializer sends it) is answered as `format=serialized` gives it,
/// where Confluent answers the `.proto` text. confluent-kafka-python
/// (2.16) caches the answer's `schema` under the id, and its Protobuf
/// deserializer, sharing the client, then reads that cached text as a
/// descriptor and fails; answered in the form it sent, it reads what it
/// read before 7.4.1, when it cached the schema it had sent.
fn registration_answer(
    state: &State,
    subject: &str,
    id: u32,
    version: u32,
    params: &HashMap<String, String>,
) -> Json {
    let context = split_subject(canonical_subject(subject)).0;
    let mut out = serde_json::Map::new();
    out.insert("id".into(), json!(id));
    let mut fields = serde_json::Map::new();
    if schema_fields(state, context, id, params, &mut fields).is_ok()
        && let Ok(stored) = state.schema_in_use(context, id)
    {
        out.insert("version".into(), json!(version));
        out.insert("guid".into(), json!(stored.guid()));
        fields.entry("schemaType").or_insert_with(|| json!("AVRO"));
        out.extend(fields);
    }
    Json::Object(out)
}

async fn delete_subject(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let permanent = flag(&params, "permanent");
    let versions = app
        .registry
        .write(|state| state.delete_subject(&subject, permanent))
        .await?;
    ok(json!(versions))
}

async fn list_versions(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    // Confluent's `listVersions` (SubjectVersionsResource): `deleted` adds
    // the soft-deleted versions, `deletedOnly` lists only those (over
    // `deleted`), `deletedAsNegative` lists every version with the
    // soft-deleted ones negated (over both; LookupFilter.DELETED_AS_NEGATIVE,
    // in order of their absolute values); a subject with soft-deleted
    // versions only exists for `deleted` and `deletedOnly`
    // (`hasSubjects(subject, deleted || deletedOnly)`).
    let deleted = flag(&params, "deleted");
    let deleted_only = flag(&params, "deletedOnly");
    let as_negative = flag(&params, "deletedAsNegative");
    let page = page(&params, None)?;
    let versions = app
        .registry
        .read_fresh(|state| {
            let s = state.existing_subject(&subject, deleted || deleted_only)?;
            Ok(paged(
                s.versions.iter().filter_map(|(v, e)| {
                    let v = i64::from(*v);
                    if as_negative {
                        Some(if e.deleted { -v } else { v })
                    } else if deleted_only {
                        e.deleted.then_some(v)
                    } else {
                        (deleted || !e.deleted).then_some(v)
                    }
                }),
                page,
            ))
        })
        .await?;
    ok(json!(versions))
}

async fn get_version(
    AxumState(app): AxumState<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let spec = VersionSpec::parse(&version)?;
    let deleted = flag(&params, "deleted");
    let body = app
        .registry
        .read_fresh(|state| {
            let (version, entry) = state.version(&subject, spec, deleted)?;
            let mut out = serde_json::Map::new();
            out.insert("subject".into(), json!(subject));
            out.insert("version".into(), json!(version));
            out.insert("id".into(), json!(entry.id));
            let context = split_subject(&subject).0;
            schema_fields(state, context, entry.id, &params, &mut out)?;
            version_fields(state, context, entry, &mut out)?;
            Ok(Json::Object(out))
        })
        .await?;
    ok(body)
}

async fn raw_schema_of_version(
    AxumState(app): AxumState<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let spec = VersionSpec::parse(&version)?;
    let deleted = flag(&params, "deleted");
    let text = app
        .registry
        .read_fresh(|state| {
            let (_, entry) = state.version(&subject, spec, deleted)?;
            Ok(state
                .schema_in_use(split_subject(&subject).0, entry.id)?
                .text
                .clone())
        })
        .await?;
    Ok(raw(text))
}

async fn referenced_by(
    AxumState(app): AxumState<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let spec = VersionSpec::parse(&version)?;
    // Confluent 7.7.3+ pages these too (`getReferencedBy`, limit by
    // `schema.search.*.limit`).
    let page = page(&params, Some(SCHEMA_SEARCH_LIMIT))?;
    // Confluent's `getReferencedBy` finds the version with soft-deleted
    // versions included (`getSchemaByVersion(..., true)`; `latest` is
    // still the newest live one, as `get` reads it), and `deleted` adds
    // the schemas whose referencing versions are all soft-deleted.
    let deleted = flag(&params, "deleted");
    let ids = app
        .registry
        .read_fresh(|state| {
            let s = state.existing_subject(&subject, true)?;
            let version = match spec {
                VersionSpec::Latest => s.latest_live().map(|(v, _)| v),
                VersionSpec::Number(n) => s.versions.contains_key(&n).then_some(n),
            }
            .ok_or_else(|| match spec {
                VersionSpec::Latest => ApiError::version_not_found(&subject, "latest"),
                VersionSpec::Number(n) => ApiError::version_not_found(&subject, n),
            })?;
            Ok(paged(state.referenced_by(&subject, version, deleted), page))
        })
        .await?;
    ok(json!(ids))
}

async fn delete_version(
    AxumState(app): AxumState<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let spec = VersionSpec::parse(&version)?;
    let permanent = flag(&params, "permanent");
    let version = app
        .registry
        .write(|state| state.delete_version(&subject, spec, permanent))
        .await?;
    ok(json!(version))
}

async fn check(
    app: &App,
    subject: &str,
    version: Option<VersionSpec>,
    params: &HashMap<String, String>,
    body: Body,
) -> Result<Response, ApiError> {
    let input = read_schema_body(app, body, params, "Compatibility check").await?;
    let verbose = flag(params, "verbose");
    let messages = match app
        .registry
        .read_fresh(|state| state.check_compatibility(subject, version, &input))
        .await
    {
        Ok(messages) => messages,
        // A schema that does not parse is not compatible; verbose says
        // why, as Confluent answers.
        Err(e) if verbose && e.error_code == 42201 => vec![e.message],
        Err(e) => return Err(e),
    };
    let mut out = json!({"is_compatible": messages.is_empty()});
    if verbose {
        out["messages"] = json!(messages);
    }
    ok(out)
}

async fn check_latest(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
    body: Body,
) -> Result<Response, ApiError> {
    check(&app, &subject, None, &params, body).await
}

async fn check_version(
    AxumState(app): AxumState<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Params(params): Params,
    body: Body,
) -> Result<Response, ApiError> {
    let spec = VersionSpec::parse(&version)?;
    check(&app, &subject, Some(spec), &params, body).await
}

async fn get_global_config(AxumState(app): AxumState<Shared>) -> Result<Response, ApiError> {
    let config = app.registry.read(|s| s.global_config());
    ok(config_json(&config, "compatibilityLevel"))
}

async fn get_config(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let to_global = flag(&params, "defaultToGlobal");
    let config = app
        .registry
        .read_fresh(|state| match state.subject_config(&subject) {
            // Each field the subject's own, else its context's, else the
            // global one.
            _ if to_global => Ok(state.config_in_scope(&subject)),
            Some(config) => Ok(config),
            None => Err(ApiError::subject_level_compatibility_not_configured(
                &subject,
            )),
        })
        .await?;
    ok(config_json(&config, "compatibilityLevel"))
}

async fn put_config_for(
    app: &App,
    subject: Option<&str>,
    body: Body,
) -> Result<Response, ApiError> {
    let update = parse_config(&json_body(app, body).await?)?;
    let config = app
        .registry
        .write(|state| state.set_config(subject, &update))
        .await?;
    ok(config_json(&config, "compatibility"))
}

async fn put_global_config(
    AxumState(app): AxumState<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    put_config_for(&app, None, body).await
}

async fn put_config(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    put_config_for(&app, Some(&subject), body).await
}

async fn delete_global_config(AxumState(app): AxumState<Shared>) -> Result<Response, ApiError> {
    let old = app
        .registry
        .write(|state| state.delete_compatibility(None))
        .await?;
    ok(config_json(&old, "compatibilityLevel"))
}

async fn delete_config(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
) -> Result<Response, ApiError> {
    let old = app
        .registry
        .write(|state| state.delete_compatibility(Some(&subject)))
        .await?;
    ok(config_json(&old, "compatibilityLevel"))
}

async fn get_global_mode(AxumState(app): AxumState<Shared>) -> Result<Response, ApiError> {
    let mode = app.registry.read(|s| s.global_mode());
    ok(json!({"mode": mode.as_str()}))
}

async fn get_mode(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let to_global = flag(&params, "defaultToGlobal");
    let mode = app
        .registry
        .read_fresh(|state| match state.subject(&subject).and_then(|s| s.mode) {
            // A global READONLY_OVERRIDE is every subject's mode, set
            // or not (Confluent's `getMode`).
            _ if state.global_override() => Ok(RegistryMode::ReadonlyOverride),
            Some(mode) => Ok(mode),
            // The context's mode, else the global one.
            None if to_global => Ok(state.mode(&subject)),
            None => Err(ApiError::subject_level_mode_not_configured(&subject)),
        })
        .await?;
    ok(json!({"mode": mode.as_str()}))
}

async fn put_mode_for(
    app: &App,
    subject: Option<&str>,
    params: &HashMap<String, String>,
    body: Body,
) -> Result<Response, ApiError> {
    let mode = parse_mode(&json_body(app, body).await?)?;
    let force = flag(params, "force");
    app.registry
        .write(|state| Ok(((), state.set_mode(subject, mode, force)?)))
        .await?;
    ok(json!({"mode": mode.as_str()}))
}

async fn put_global_mode(
    AxumState(app): AxumState<Shared>,
    Params(params): Params,
    body: Body,
) -> Result<Response, ApiError> {
    put_mode_for(&app, None, &params, body).await
}

async fn put_mode(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
    Params(params): Params,
    body: Body,
) -> Result<Response, ApiError> {
    put_mode_for(&app, Some(&subject), &params, body).await
}

async fn delete_global_mode(AxumState(app): AxumState<Shared>) -> Result<Response, ApiError> {
    let old = app.registry.write(|state| state.delete_mode(None)).await?;
    ok(json!({"mode": old.as_str()}))
}

async fn delete_mode(
    AxumState(app): AxumState<Shared>,
    Path(subject): Path<String>,
) -> Result<Response, ApiError> {
    let old = app
        .registry
        .write(|state| state.delete_mode(Some(&subject)))
        .await?;
    ok(json!({"mode": old.as_str()}))
}

async fn metrics(AxumState(app): AxumState<Shared>) -> Response {
    let (subjects, schemas, offset) = app.registry.read(|s| {
        (
            s.subject_names("", false, false).len(),
            s.schema_count(),
            s.offset,
        )
    });
    let mut text = app.metrics.render(subjects, schemas, offset);
    if let Storage::Kafka(log) = app.registry.log() {
        let forwarded = log.forwarder().map(|f| f.stats()).unwrap_or_default();
        text.push_str(&crate::metrics::render_writer(
            &log.writer_stats(),
            &forwarded,
        ));
    }
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// Which instance writes the store: for a Kafka store, this instance's
/// id and advertised URL, the writer's (the last record of the writer
/// topic) and whether it is this one; every instance of an SQLite or
/// PostgreSQL store writes itself.
async fn writer(AxumState(app): AxumState<Shared>) -> Result<Response, ApiError> {
    let Storage::Kafka(log) = app.registry.log() else {
        return ok(json!({"instance": null, "url": null, "writer": null, "is_writer": true}));
    };
    let writer = log.read_writer().await.map_err(|e| ApiError::store(e.0))?;
    let stats = log.writer_stats();
    let url = log
        .forwarder()
        .and_then(|f| f.url())
        .map(|u| u.as_str().to_owned());
    ok(json!({
        "instance": log.instance(),
        "url": url,
        "writer": writer,
        "is_writer": stats.is_writer,
    }))
}

/// A request an extractor refused (a path segment that is not UTF-8, a
/// query it cannot read) gets axum's plain-text answer; clients of the
/// registry read errors as JSON, so it is answered as one, same status.
async fn json_rejections(response: Response) -> Response {
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/plain"));
    if !(plain && response.status().is_client_error()) {
        return response;
    }
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap_or_default();
    ApiError::new(
        status,
        u32::from(status),
        String::from_utf8_lossy(&bytes).trim(),
    )
    .into_response()
}

async fn fallback(request: Request) -> ApiError {
    ApiError::not_found_path(request.uri().path())
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::method_not_allowed(request.method().as_str(), request.uri().path())
}

// ---- middleware ----------------------------------------------------------------

/// Refuses, with 403, a request whose `Host` is not one of the registry's
/// names (DNS rebinding) and a write whose `Origin` is another site's (a
/// browser page posting to the registry); see [`Access`].
async fn guard(AxumState(app): AxumState<Shared>, request: Request, next: Next) -> Response {
    match app.access.check(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// HTTP basic auth against the users file, when one is configured.
async fn authenticate(AxumState(app): AxumState<Shared>, request: Request, next: Next) -> Response {
    if let Some(users) = &app.users {
        match users.authenticate(request.headers()) {
            Some(user) => {
                let mut response = next.run(request).await;
                response.extensions_mut().insert(AuthenticatedUser(user));
                return response;
            }
            None => {
                let mut response = ApiError::unauthorized().into_response();
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"evolve registry\""),
                );
                return response;
            }
        }
    }
    next.run(request).await
}

#[derive(Clone)]
struct AuthenticatedUser(String);

/// Counts and times every request by route, answers in the content type
/// the client accepts, and writes one access-log line (never a body).
async fn observe(AxumState(app): AxumState<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let wants_plain_json = prefers_plain_json(request.headers());
    let mut response = next.run(request).await;
    let user = response
        .extensions()
        .get::<AuthenticatedUser>()
        .map(|u| u.0.clone());
    let forwarded_to = response
        .extensions()
        .get::<crate::forward::ForwardedTo>()
        .map(|f| f.0.clone());
    if wants_plain_json
        && response.headers().get(header::CONTENT_TYPE)
            == Some(&HeaderValue::from_static(CONTENT_TYPE))
    {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    app.metrics.observe(&method, &route, status, elapsed);
    tracing::info!(
        target: "evolve::registry::access",
        method = %method,
        path = %path,
        status,
        micros = elapsed.as_micros() as u64,
        user = user.as_deref().unwrap_or("-"),
        forwarded_to = forwarded_to.as_deref().unwrap_or("-"),
    );
    response
}

/// Whether the client asked for `application/json` and not for
/// Confluent's types.
fn prefers_plain_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    accept.contains("application/json") && !accept.contains("schemaregistry")
}
