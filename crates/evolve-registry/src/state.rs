//! The registry's state, rebuilt by replaying the log, and the operations
//! over it. Pure: a write operation does not change the state, it returns
//! the records that would (the caller appends them to the log, then applies
//! them), so every instance sharing a log computes the same state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use evolve_compat::{Mode, Reference, Schema, SchemaType};
use sha2::{Digest, Sha256};

use crate::contract::{ContractConfig, check_metadata, check_rule_set};
use crate::error::ApiError;
use crate::record::{ConfigValue, Key, Record, RegistryMode, SchemaReference, SchemaValue, Value};

/// The compatibility level when none is configured (Confluent's default).
pub const DEFAULT_COMPATIBILITY: Mode = Mode::Backward;

/// The largest version number and id (Confluent: 2^31-1).
pub const MAX_VERSION: u32 = i32::MAX as u32;

/// How much schema text the cache of parsed schemas may stand for. A
/// parsed schema takes several times its text (an Avro record about twenty
/// times), so the cache is bounded by the texts' total size, least recently
/// used first out; a schema larger than this is parsed each time it is
/// needed.
pub const PARSED_CACHE_TEXT_BYTES: usize = 4 * 1024 * 1024;

/// A schema as stored under an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSchema {
    pub schema_type: SchemaType,
    pub text: String,
    pub references: Vec<SchemaReference>,
    /// The data contract's metadata and rule set: part of what the id
    /// names (the same schema with other metadata is another id).
    pub metadata: Option<serde_json::Value>,
    pub rule_set: Option<serde_json::Value>,
}

/// One version of a subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionEntry {
    pub id: u32,
    pub deleted: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Subject {
    pub versions: BTreeMap<u32, VersionEntry>,
    pub compatibility: Option<Mode>,
    /// The subject's data-contract defaults and overrides.
    pub contract: ContractConfig,
    pub mode: Option<RegistryMode>,
}

impl Subject {
    /// Versions not soft-deleted, oldest first.
    pub fn live(&self) -> impl DoubleEndedIterator<Item = (u32, VersionEntry)> + '_ {
        self.versions
            .iter()
            .filter(|(_, e)| !e.deleted)
            .map(|(v, e)| (*v, *e))
    }

    pub fn latest_live(&self) -> Option<(u32, VersionEntry)> {
        self.live().next_back()
    }

    /// A subject "exists" while it has a version that is not soft-deleted.
    pub fn is_live(&self) -> bool {
        self.latest_live().is_some()
    }

    /// Whether the subject has a configuration record of its own.
    pub fn has_config(&self) -> bool {
        self.compatibility.is_some() || !self.contract.is_empty()
    }
}

/// A schema as a request gives it.
#[derive(Clone, Debug, Default)]
pub struct SchemaInput {
    pub schema: String,
    /// `AVRO`, `PROTOBUF` or `JSON`; absent means AVRO.
    pub schema_type: Option<String>,
    pub references: Vec<SchemaReference>,
    /// IMPORT mode only.
    pub id: Option<u32>,
    /// IMPORT mode only.
    pub version: Option<u32>,
    /// The data contract's `metadata` and `ruleSet`, as the request gives
    /// them.
    pub metadata: Option<serde_json::Value>,
    pub rule_set: Option<serde_json::Value>,
}

impl SchemaInput {
    /// Checks the shapes of `metadata` and `ruleSet` (42201 when wrong).
    pub fn check_contract(&self) -> Result<(), ApiError> {
        if let Some(m) = &self.metadata {
            check_metadata("metadata", m)?;
        }
        if let Some(r) = &self.rule_set {
            check_rule_set("ruleSet", r)?;
        }
        Ok(())
    }
}

/// What a registration does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub id: u32,
    pub version: u32,
    /// Empty when the schema is already a live version of the subject.
    pub records: Vec<Record>,
}

/// A version request: a number or the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionSpec {
    Number(u32),
    Latest,
}

impl VersionSpec {
    /// `latest`, `-1` or 1..2^31-1; anything else is 42202.
    pub fn parse(text: &str) -> Result<VersionSpec, ApiError> {
        if text == "latest" || text == "-1" {
            return Ok(VersionSpec::Latest);
        }
        match text.parse::<u32>() {
            Ok(n) if (1..=MAX_VERSION).contains(&n) && !text.starts_with('+') => {
                Ok(VersionSpec::Number(n))
            }
            _ => Err(ApiError::invalid_version(text)),
        }
    }
}

/// The default context, which unqualified subjects and ids belong to.
pub const DEFAULT_CONTEXT: &str = ".";

/// The context and the name within it of a subject: `:.ctx:name` is
/// `name` in context `.ctx`; any other name is in the default context.
/// `:.ctx:` (an empty name) stands for the context itself, in `/config`
/// and `/mode`.
pub fn split_subject(subject: &str) -> (&str, &str) {
    if let Some(rest) = subject.strip_prefix(':')
        && let Some((context, name)) = rest.split_once(':')
        && context.starts_with('.')
    {
        return (context, name);
    }
    (DEFAULT_CONTEXT, subject)
}

/// The subject as the state keys it: `:.:name` (the default context
/// named) is `name`.
pub fn canonical_subject(subject: &str) -> &str {
    subject.strip_prefix(":.:").unwrap_or(subject)
}

/// `subject`, named inside context `context`, as a qualified name: a
/// reference or a request inside a context names subjects of that
/// context, unless it qualifies them itself.
pub fn qualify(context: &str, subject: &str) -> String {
    if context == DEFAULT_CONTEXT || subject.starts_with(":.") {
        canonical_subject(subject).to_owned()
    } else {
        format!(":{context}:{subject}")
    }
}

/// One context's schemas and ids: ids are unique and deduplicated within
/// a context, and each context counts its own.
#[derive(Debug, Default)]
struct Space {
    schemas: HashMap<u32, Arc<StoredSchema>>,
    /// Dedup key → id: one id per distinct schema in the context.
    ids: HashMap<DedupKey, u32>,
    max_id: u32,
    /// How many versions (live or soft-deleted) use each id: whether an id
    /// is still served, without scanning every subject on a read.
    uses: HashMap<u32, usize>,
}

/// The registry's state at one log offset.
#[derive(Debug, Default)]
pub struct State {
    /// The offset of the last record applied; 0 before the first.
    pub offset: i64,
    /// Context name → its schemas and ids.
    spaces: BTreeMap<String, Space>,
    /// Contexts named by CONTEXT records (Confluent writes one when a
    /// context is first used).
    contexts: BTreeSet<String>,
    subjects: BTreeMap<String, Subject>,
    compatibility: Option<Mode>,
    contract: ContractConfig,
    mode: Option<RegistryMode>,
    /// Parsed schemas by context and id, filled on use, bounded.
    parsed: Mutex<ParsedCache>,
}

/// Parsed schemas by id, at most [`PARSED_CACHE_TEXT_BYTES`] of their
/// texts, least recently used evicted first.
#[derive(Debug, Default)]
struct ParsedCache {
    entries: HashMap<(String, u32), CacheEntry>,
    text_bytes: usize,
    clock: u64,
}

#[derive(Debug)]
struct CacheEntry {
    schema: Arc<Schema>,
    text_bytes: usize,
    used: u64,
}

impl ParsedCache {
    fn get(&mut self, key: &(String, u32)) -> Option<Arc<Schema>> {
        self.clock += 1;
        let entry = self.entries.get_mut(key)?;
        entry.used = self.clock;
        Some(Arc::clone(&entry.schema))
    }

    fn insert(&mut self, key: (String, u32), schema: Arc<Schema>, text_bytes: usize) {
        if text_bytes > PARSED_CACHE_TEXT_BYTES {
            return;
        }
        self.clock += 1;
        let entry = CacheEntry {
            schema,
            text_bytes,
            used: self.clock,
        };
        if let Some(old) = self.entries.insert(key, entry) {
            self.text_bytes -= old.text_bytes;
        }
        self.text_bytes += text_bytes;
        while self.text_bytes > PARSED_CACHE_TEXT_BYTES {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(old) = self.entries.remove(&oldest) {
                self.text_bytes -= old.text_bytes;
            }
        }
    }
}

/// One version fewer uses `id`.
fn release(uses: &mut HashMap<u32, usize>, id: u32) {
    if let Some(n) = uses.get_mut(&id) {
        *n = n.saturating_sub(1);
    }
}

/// The key on which ids are deduplicated: the SHA-256 of the type, the
/// schema text with insignificant white space and object key order removed
/// (for the JSON formats), the references, and the data contract's
/// metadata and rule set when there are any (as Confluent's lookup key). Not Avro's Parsing Canonical
/// Form, which drops defaults, aliases and doc: two schemas that differ
/// there are different schemas to their users. A digest rather than the
/// text itself, so that the state holds each schema's text once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DedupKey([u8; 32]);

pub fn dedup_key(
    schema_type: SchemaType,
    text: &str,
    references: &[SchemaReference],
    metadata: Option<&serde_json::Value>,
    rule_set: Option<&serde_json::Value>,
) -> DedupKey {
    let mut hasher = Sha256::new();
    hasher.update(format!("{schema_type:?}\u{0}"));
    match schema_type {
        SchemaType::Avro | SchemaType::Json => match canonical_json(text) {
            Some(body) => hasher.update(body),
            None => hasher.update(text.trim()),
        },
        SchemaType::Protobuf => hasher.update(text.trim()),
    }
    for r in references {
        hasher.update(format!(
            "\u{0}{}\u{1}{}\u{1}{}",
            r.name, r.subject, r.version
        ));
    }
    // Absent parts add nothing, so the keys of schemas without a data
    // contract are those they always had.
    for (tag, part) in [("metadata", metadata), ("ruleSet", rule_set)] {
        if let Some(value) = part {
            // Key order does not count, as in the schema text.
            let text = value.to_string();
            let canonical = canonical_json(&text).unwrap_or(text);
            hasher.update(format!("\u{2}{tag}\u{1}{canonical}"));
        }
    }
    DedupKey(hasher.finalize().into())
}

/// The JSON text without insignificant white space and with object keys
/// sorted (a repeated key keeps its last value), exactly as
/// `serde_json::Value`'s `to_string` prints it, but written while parsing:
/// no tree of values, whose nodes take several times the text. `None` when
/// the text is not JSON.
pub fn canonical_json(text: &str) -> Option<String> {
    serde_json::from_str::<Canonical>(text).ok().map(|c| c.0)
}

/// A JSON value as canonical text.
struct Canonical(String);

impl<'de> serde::Deserialize<'de> for Canonical {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Canonical, D::Error> {
        deserializer.deserialize_any(CanonicalVisitor)
    }
}

struct CanonicalVisitor;

impl<'de> serde::de::Visitor<'de> for CanonicalVisitor {
    type Value = Canonical;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Canonical, E> {
        Ok(Canonical(v.to_string()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Canonical, E> {
        Ok(Canonical(serde_json::Number::from(v).to_string()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Canonical, E> {
        Ok(Canonical(serde_json::Number::from(v).to_string()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Canonical, E> {
        Ok(Canonical(match serde_json::Number::from_f64(v) {
            Some(n) => n.to_string(),
            None => "null".to_owned(),
        }))
    }

    fn visit_str<E>(self, v: &str) -> Result<Canonical, E> {
        Ok(Canonical(serde_json::Value::from(v).to_string()))
    }

    fn visit_unit<E>(self) -> Result<Canonical, E> {
        Ok(Canonical("null".to_owned()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Canonical, A::Error> {
        let mut out = String::from("[");
        while let Some(Canonical(item)) = seq.next_element()? {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(&item);
        }
        out.push(']');
        Ok(Canonical(out))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Canonical, A::Error> {
        let mut members = BTreeMap::new();
        while let Some((key, Canonical(value))) = map.next_entry::<String, Canonical>()? {
            members.insert(key, value);
        }
        let mut out = String::from("{");
        for (i, (key, value)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::Value::from(key.as_str()).to_string());
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        Ok(Canonical(out))
    }
}

/// What `normalize=true` stores instead of the text as given: for Avro and
/// JSON Schema the JSON without insignificant white space and with object
/// keys sorted (so schemas that differ only in layout share one text);
/// Protobuf texts are kept as they are.
pub fn normalize_text(schema_type: SchemaType, text: &str) -> String {
    match schema_type {
        SchemaType::Avro | SchemaType::Json => serde_json::from_str::<serde_json::Value>(text)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| text.to_owned()),
        SchemaType::Protobuf => text.to_owned(),
    }
}

pub fn parse_schema_type(text: Option<&str>) -> Result<SchemaType, ApiError> {
    match text.map(|t| t.trim().to_ascii_uppercase()).as_deref() {
        None | Some("AVRO") | Some("") => Ok(SchemaType::Avro),
        Some("PROTOBUF") => Ok(SchemaType::Protobuf),
        Some("JSON") => Ok(SchemaType::Json),
        Some(_) => Err(ApiError::invalid_schema(format!(
            "Invalid schema type {:?}: use AVRO, PROTOBUF or JSON",
            text.unwrap_or_default()
        ))),
    }
}

/// Confluent's `schemaType` field: absent for Avro.
pub fn schema_type_field(schema_type: SchemaType) -> Option<&'static str> {
    match schema_type {
        SchemaType::Avro => None,
        SchemaType::Protobuf => Some("PROTOBUF"),
        SchemaType::Json => Some("JSON"),
    }
}

/// Subject names: not empty, at most 255 characters... of text: no control
/// characters (they would break logs and terminals).
pub fn validate_subject(subject: &str) -> Result<(), ApiError> {
    if subject.is_empty() {
        return Err(ApiError::invalid_subject(
            "The specified subject is not valid: it is empty",
        ));
    }
    if let Some((position, c)) = subject.chars().enumerate().find(|(_, c)| c.is_control()) {
        return Err(ApiError::invalid_subject(format!(
            "The specified subject is not valid: it contains the control character U+{:04X} at position {position}",
            c as u32
        )));
    }
    let (context, _) = split_subject(subject);
    if context.len() < 2 && context != DEFAULT_CONTEXT {
        return Err(ApiError::invalid_subject(format!(
            "The specified subject is not valid: {subject:?} names an empty context; contexts are named like :.orders:subject"
        )));
    }
    Ok(())
}

/// A subject that schemas are registered under: a valid name that is not
/// a context by itself (`:.ctx:`).
fn validate_schema_subject(subject: &str) -> Result<(), ApiError> {
    validate_subject(subject)?;
    if split_subject(subject).1.is_empty() {
        return Err(ApiError::invalid_subject(format!(
            "The specified subject is not valid: {subject:?} names a context, not a subject; register under {subject}NAME"
        )));
    }
    Ok(())
}

impl State {
    pub fn new() -> State {
        State::default()
    }

    // ---- replay -------------------------------------------------------

    /// Applies one record at `offset`. Records that contradict the state
    /// (an import with a reused id, say) are applied as Confluent's reader
    /// would: the last record for a key wins; an id keeps its first schema.
    pub fn apply(&mut self, offset: i64, record: &Record) {
        self.offset = offset;
        match (&record.key, &record.value) {
            (Key::Schema { .. }, Some(Value::Schema(v))) => self.apply_schema(v),
            (Key::Schema { subject, version }, None) => {
                let (context, _) = split_subject(subject);
                if let Some(s) = self.subjects.get_mut(subject) {
                    if let Some(removed) = s.versions.remove(version)
                        && let Some(space) = self.spaces.get_mut(context)
                    {
                        release(&mut space.uses, removed.id);
                    }
                    if s.versions.is_empty() && !s.has_config() && s.mode.is_none() {
                        self.subjects.remove(subject);
                    }
                }
            }
            (Key::Config { subject }, value) => {
                let config = match value {
                    Some(Value::Config(c)) => c.clone(),
                    _ => ConfigValue::default(),
                };
                match subject {
                    None => {
                        self.compatibility = config.compatibility;
                        self.contract = config.contract;
                    }
                    Some(s) => {
                        let entry = self.subject_entry(s);
                        entry.compatibility = config.compatibility;
                        entry.contract = config.contract;
                    }
                }
            }
            (Key::Mode { subject }, value) => {
                let mode = match value {
                    Some(Value::Mode(m)) => Some(*m),
                    _ => None,
                };
                match subject {
                    None => self.mode = mode,
                    Some(s) => self.subject_entry(s).mode = mode,
                }
            }
            (Key::DeleteSubject { .. }, Some(Value::DeleteSubject { subject, version })) => {
                if let Some(s) = self.subjects.get_mut(subject) {
                    for (_, e) in s.versions.range_mut(..=*version) {
                        e.deleted = true;
                    }
                }
            }
            (Key::ClearSubject { .. }, Some(Value::ClearSubject { subject, version })) => {
                let (context, _) = split_subject(subject);
                if let Some(s) = self.subjects.get_mut(subject) {
                    let mut none = HashMap::new();
                    let uses = match self.spaces.get_mut(context) {
                        Some(space) => &mut space.uses,
                        None => &mut none,
                    };
                    s.versions.retain(|v, e| {
                        let keep = *v > *version || !e.deleted;
                        if !keep {
                            release(uses, e.id);
                        }
                        keep
                    });
                }
            }
            (Key::Context { context }, Some(Value::Context)) => {
                self.contexts.insert(context.clone());
            }
            (Key::Context { context }, None) => {
                self.contexts.remove(context);
            }
            _ => {}
        }
    }

    fn subject_entry(&mut self, subject: &str) -> &mut Subject {
        self.subjects.entry(subject.to_owned()).or_default()
    }

    fn apply_schema(&mut self, v: &SchemaValue) {
        let schema_type = parse_schema_type(v.schema_type.as_deref()).unwrap_or(SchemaType::Avro);
        let (context, _) = split_subject(&v.subject);
        let space = self.spaces.entry(context.to_owned()).or_default();
        // Another version of a schema already stored (a soft delete, the
        // same schema in another subject) changes no key: no need to
        // compute it again.
        let known = space.schemas.get(&v.id).is_some_and(|stored| {
            stored.schema_type == schema_type
                && stored.text == v.schema
                && stored.references == v.references
                && stored.metadata == v.metadata
                && stored.rule_set == v.rule_set
        });
        if !known {
            let key = dedup_key(
                schema_type,
                &v.schema,
                &v.references,
                v.metadata.as_ref(),
                v.rule_set.as_ref(),
            );
            space.ids.entry(key).or_insert(v.id);
            space.schemas.entry(v.id).or_insert_with(|| {
                Arc::new(StoredSchema {
                    schema_type,
                    text: v.schema.clone(),
                    references: v.references.clone(),
                    metadata: v.metadata.clone(),
                    rule_set: v.rule_set.clone(),
                })
            });
        }
        space.max_id = space.max_id.max(v.id);
        let replaced = self.subject_entry(&v.subject).versions.insert(
            v.version,
            VersionEntry {
                id: v.id,
                deleted: v.deleted,
            },
        );
        let space = self.spaces.entry(context.to_owned()).or_default();
        if let Some(old) = replaced {
            release(&mut space.uses, old.id);
        }
        *space.uses.entry(v.id).or_default() += 1;
    }

    // ---- reads ----------------------------------------------------------

    /// The schema under `id` in `context`.
    pub fn schema(&self, context: &str, id: u32) -> Option<&Arc<StoredSchema>> {
        self.spaces.get(context)?.schemas.get(&id)
    }

    /// The schema under `id` in `context`, if some version (live or
    /// soft-deleted) still uses it; a schema whose every version was
    /// permanently deleted is not found, though its id is never given to
    /// another schema.
    pub fn schema_in_use(&self, context: &str, id: u32) -> Result<&Arc<StoredSchema>, ApiError> {
        let space = self.spaces.get(context);
        let used = space.is_some_and(|s| s.uses.get(&id).is_some_and(|n| *n > 0));
        match space.and_then(|s| s.schemas.get(&id)) {
            Some(schema) if used => Ok(schema),
            _ => Err(ApiError::schema_not_found(id)),
        }
    }

    /// The context a request for schema `id` means: that of `subject`
    /// (the `subject` parameter, or a `/contexts/{context}` path) when it
    /// names one; else the default context, or, when the id is not used
    /// there, the first other context that uses it (as Confluent looks an
    /// id up across contexts).
    pub fn context_of_id(&self, id: u32, subject: Option<&str>) -> String {
        let named = subject.map(|s| split_subject(s).0);
        if let Some(context) = named.filter(|c| *c != DEFAULT_CONTEXT) {
            return context.to_owned();
        }
        if self.schema_in_use(DEFAULT_CONTEXT, id).is_ok() {
            return DEFAULT_CONTEXT.to_owned();
        }
        self.spaces
            .keys()
            .find(|c| self.schema_in_use(c, id).is_ok())
            .cloned()
            .unwrap_or_else(|| DEFAULT_CONTEXT.to_owned())
    }

    /// `GET /contexts`: the default context, then every other context
    /// that a CONTEXT record or a subject with versions names, sorted (a
    /// context's settings alone do not make it one).
    pub fn context_names(&self) -> Vec<String> {
        let mut names: BTreeSet<&str> = self.contexts.iter().map(String::as_str).collect();
        names.extend(
            self.subjects
                .iter()
                .filter(|(_, s)| !s.versions.is_empty())
                .map(|(name, _)| split_subject(name).0),
        );
        names.remove(DEFAULT_CONTEXT);
        std::iter::once(DEFAULT_CONTEXT)
            .chain(names)
            .map(str::to_owned)
            .collect()
    }

    pub fn subject(&self, name: &str) -> Option<&Subject> {
        self.subjects.get(canonical_subject(name))
    }

    /// The subject if it has a live version (or any version, with
    /// `deleted`), else 40401.
    pub fn existing_subject(&self, name: &str, deleted: bool) -> Result<&Subject, ApiError> {
        match self.subjects.get(canonical_subject(name)) {
            Some(s) if s.is_live() || (deleted && !s.versions.is_empty()) => Ok(s),
            _ => Err(ApiError::subject_not_found(name)),
        }
    }

    /// `GET /subjects`: the names that start with `prefix`, in every
    /// context (`:.ctx:` as a prefix selects one).
    pub fn subject_names(&self, prefix: &str, deleted: bool, deleted_only: bool) -> Vec<String> {
        self.subjects
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .filter(|(_, s)| {
                let live = s.is_live();
                let soft = !live && !s.versions.is_empty();
                if deleted_only {
                    soft
                } else {
                    live || (deleted && soft)
                }
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The version a request names: `latest` is the newest live one; a
    /// soft-deleted version is found only with `deleted`.
    pub fn version(
        &self,
        subject: &str,
        spec: VersionSpec,
        deleted: bool,
    ) -> Result<(u32, VersionEntry), ApiError> {
        let s = self.existing_subject(subject, deleted)?;
        let found = match spec {
            VersionSpec::Latest if deleted => s.versions.iter().next_back().map(|(v, e)| (*v, *e)),
            VersionSpec::Latest => s.latest_live(),
            VersionSpec::Number(n) => s
                .versions
                .get(&n)
                .filter(|e| deleted || !e.deleted)
                .map(|e| (n, *e)),
        };
        found.ok_or_else(|| match spec {
            VersionSpec::Latest => ApiError::version_not_found(subject, "latest"),
            VersionSpec::Number(n) => ApiError::version_not_found(subject, n),
        })
    }

    /// Ids of the live schemas that reference `subject` version `version`
    /// (references resolve within the referencing schema's context).
    pub fn referenced_by(&self, subject: &str, version: u32) -> Vec<u32> {
        let subject = canonical_subject(subject);
        let (context, _) = split_subject(subject);
        let mut ids = BTreeSet::new();
        for (name, s) in &self.subjects {
            if split_subject(name).0 != context {
                continue;
            }
            for (_, e) in s.live() {
                if let Some(schema) = self.schema(context, e.id)
                    && schema.references.iter().any(|r| {
                        qualify(context, &r.subject) == subject
                            && self.resolve_reference_version(context, r) == Some(version)
                    })
                {
                    ids.insert(e.id);
                }
            }
        }
        ids.into_iter().collect()
    }

    fn resolve_reference_version(&self, context: &str, r: &SchemaReference) -> Option<u32> {
        let s = self.subjects.get(&qualify(context, &r.subject))?;
        if r.version == -1 {
            s.latest_live().map(|(v, _)| v)
        } else {
            u32::try_from(r.version).ok()
        }
    }

    /// `(subject, version)` pairs that use schema `id` of `context`.
    pub fn versions_of_id(&self, context: &str, id: u32, deleted: bool) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for (name, s) in &self.subjects {
            if split_subject(name).0 != context {
                continue;
            }
            for (v, e) in &s.versions {
                if e.id == id && (deleted || !e.deleted) {
                    out.push((name.clone(), *v));
                }
            }
        }
        out
    }

    pub fn global_compatibility(&self) -> Mode {
        self.compatibility.unwrap_or(DEFAULT_COMPATIBILITY)
    }

    /// The subject's level, else its context's (`:.ctx:`), else the
    /// global one.
    pub fn compatibility(&self, subject: &str) -> Mode {
        self.scopes(subject)
            .find_map(|s| s.compatibility)
            .unwrap_or_else(|| self.global_compatibility())
    }

    /// The subject's own settings, then its context's.
    fn scopes<'s>(&'s self, subject: &str) -> impl Iterator<Item = &'s Subject> + 's {
        let subject = canonical_subject(subject);
        let (context, _) = split_subject(subject);
        let context_scope = (context != DEFAULT_CONTEXT && subject.len() > context.len() + 2)
            .then(|| format!(":{context}:"));
        let own = self.subjects.get(subject);
        let inherited = context_scope.and_then(|c| self.subjects.get(&c));
        own.into_iter().chain(inherited)
    }

    /// The data-contract configuration a registration in `subject` applies:
    /// the subject's own when it has one, else the global one.
    pub fn contract_in_scope(&self, subject: &str) -> &ContractConfig {
        self.scopes(subject)
            .map(|s| &s.contract)
            .find(|c| !c.is_empty())
            .unwrap_or(&self.contract)
    }

    /// The global configuration.
    pub fn global_config(&self) -> ConfigValue {
        ConfigValue {
            compatibility: Some(self.global_compatibility()),
            contract: self.contract.clone(),
        }
    }

    /// The subject's own configuration, if it has one.
    pub fn subject_config(&self, subject: &str) -> Option<ConfigValue> {
        let s = self
            .subjects
            .get(canonical_subject(subject))
            .filter(|s| s.has_config())?;
        Some(ConfigValue {
            compatibility: s.compatibility,
            contract: s.contract.clone(),
        })
    }

    /// The metadata and rule set a registration of `input` in `subject`
    /// stores: in IMPORT mode the request's; otherwise the request's (each
    /// part, else the latest live version's) between the configuration's
    /// defaults and overrides, as Confluent merges them.
    pub fn effective_contract(
        &self,
        subject: &str,
        input: &SchemaInput,
    ) -> (Option<serde_json::Value>, Option<serde_json::Value>) {
        if self.mode(subject) == RegistryMode::Import {
            return (input.metadata.clone(), input.rule_set.clone());
        }
        let (context, _) = split_subject(subject);
        let previous = self
            .subject(subject)
            .and_then(Subject::latest_live)
            .and_then(|(_, e)| self.schema(context, e.id));
        let metadata = input
            .metadata
            .as_ref()
            .or_else(|| previous.and_then(|p| p.metadata.as_ref()));
        let rule_set = input
            .rule_set
            .as_ref()
            .or_else(|| previous.and_then(|p| p.rule_set.as_ref()));
        self.contract_in_scope(subject).apply(metadata, rule_set)
    }

    pub fn global_mode(&self) -> RegistryMode {
        self.mode.unwrap_or(RegistryMode::Readwrite)
    }

    /// The subject's mode, else its context's, else the global one.
    pub fn mode(&self, subject: &str) -> RegistryMode {
        self.scopes(subject)
            .find_map(|s| s.mode)
            .unwrap_or_else(|| self.global_mode())
    }

    pub fn schema_count(&self) -> usize {
        self.spaces.values().map(|s| s.schemas.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.subjects.values().all(|s| s.versions.is_empty())
    }

    // ---- parsing --------------------------------------------------------

    /// The schemas `references` name, transitively, as the compatibility
    /// engine wants them (name and text), each once. A reference's subject
    /// is one of `context` unless it is qualified.
    pub fn resolve_references(
        &self,
        context: &str,
        references: &[SchemaReference],
    ) -> Result<Vec<Reference>, ApiError> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        self.collect_references(context, references, &mut out, &mut seen, 0)?;
        Ok(out)
    }

    fn collect_references(
        &self,
        context: &str,
        references: &[SchemaReference],
        out: &mut Vec<Reference>,
        seen: &mut BTreeSet<(String, u32)>,
        depth: usize,
    ) -> Result<(), ApiError> {
        if depth > 64 {
            return Err(ApiError::invalid_schema(
                "Invalid schema: references nest deeper than 64 levels",
            ));
        }
        for r in references {
            let qualified = qualify(context, &r.subject);
            let subject = self
                .subjects
                .get(&qualified)
                .filter(|s| !s.versions.is_empty());
            let Some(subject) = subject else {
                return Err(ApiError::invalid_schema(format!(
                    "Invalid schema: reference {:?} names subject '{}', which does not exist",
                    r.name, r.subject
                )));
            };
            let entry = if r.version == -1 {
                subject.latest_live()
            } else {
                u32::try_from(r.version)
                    .ok()
                    .and_then(|v| subject.versions.get(&v).map(|e| (v, *e)))
            };
            let Some((version, entry)) = entry else {
                return Err(ApiError::invalid_schema(format!(
                    "Invalid schema: reference {:?} names version {} of subject '{}', which does not exist",
                    r.name, r.version, r.subject
                )));
            };
            if !seen.insert((qualified.clone(), version)) {
                continue;
            }
            let (target_context, _) = split_subject(&qualified);
            let Some(schema) = self.schema(target_context, entry.id) else {
                continue;
            };
            self.collect_references(target_context, &schema.references, out, seen, depth + 1)?;
            out.push(Reference {
                name: r.name.clone(),
                schema: schema.text.clone(),
            });
        }
        Ok(())
    }

    /// Parses a schema with its references (subjects of `context`); 42201
    /// when it is not valid.
    pub fn parse(
        &self,
        context: &str,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
    ) -> Result<Schema, ApiError> {
        let resolved = self.resolve_references(context, references)?;
        crate::parser::parse(schema_type, text, &resolved).map_err(|e| {
            let hint = match &e.missing_import {
                Some(name) => format!(
                    " in \"references\": {{\"name\":\"{name}\",\"subject\":SUBJECT,\"version\":VERSION}}"
                ),
                None => String::new(),
            };
            ApiError::invalid_schema(format!(
                "Invalid {}: {}{hint}",
                schema_type.noun(),
                e.message
            ))
        })
    }

    /// The parsed schema under `id` in `context`, cached (see
    /// [`PARSED_CACHE_TEXT_BYTES`]).
    pub fn parsed(&self, context: &str, id: u32) -> Result<Arc<Schema>, ApiError> {
        let key = (context.to_owned(), id);
        if let Some(s) = self.parsed.lock().ok().and_then(|mut c| c.get(&key)) {
            return Ok(s);
        }
        let stored = self
            .schema(context, id)
            .ok_or_else(|| ApiError::schema_not_found(id))?;
        let schema = Arc::new(
            self.parse(
                context,
                stored.schema_type,
                &stored.text,
                &stored.references,
            )
            .map_err(|e| {
                ApiError::store(format!(
                    "stored schema {id} does not parse any more: {}",
                    e.message
                ))
            })?,
        );
        if let Ok(mut cache) = self.parsed.lock() {
            cache.insert(key, Arc::clone(&schema), stored.text.len());
        }
        Ok(schema)
    }

    /// The id of an identical schema in `context`, if one was ever
    /// registered there.
    pub fn id_of(&self, context: &str, key: &DedupKey) -> Option<u32> {
        self.spaces.get(context)?.ids.get(key).copied()
    }

    // ---- writes ---------------------------------------------------------

    fn check_writable(&self, subject: &str, import: bool) -> Result<RegistryMode, ApiError> {
        let mode = self.mode(subject);
        match mode {
            RegistryMode::Readonly | RegistryMode::ReadonlyOverride => {
                Err(ApiError::not_permitted(format!(
                    "Subject {subject} is in read-only mode; PUT /mode/{subject} {{\"mode\":\"READWRITE\"}} to write"
                )))
            }
            RegistryMode::Readwrite if import => Err(ApiError::not_permitted(format!(
                "Subject {subject} is not in import mode: an explicit id or version is accepted only in IMPORT mode"
            ))),
            _ => Ok(mode),
        }
    }

    /// A registration that appends nothing because the schema already is a
    /// live version of `subject`, answered without parsing the schema: what
    /// [`State::register`] would answer, or `None` when it has work to do
    /// (or an error to report).
    pub fn existing_registration(
        &self,
        subject: &str,
        input: &SchemaInput,
    ) -> Option<Registration> {
        let subject = canonical_subject(subject);
        validate_schema_subject(subject).ok()?;
        let (context, _) = split_subject(subject);
        let explicit = input.id.is_some() || input.version.is_some();
        self.check_writable(subject, explicit).ok()?;
        let schema_type = parse_schema_type(input.schema_type.as_deref()).ok()?;
        input.check_contract().ok()?;
        let (metadata, rule_set) = self.effective_contract(subject, input);
        let key = dedup_key(
            schema_type,
            &input.schema,
            &input.references,
            metadata.as_ref(),
            rule_set.as_ref(),
        );
        self.live_version(subject, input, self.id_of(context, &key))
    }

    fn live_version(
        &self,
        subject: &str,
        input: &SchemaInput,
        existing_id: Option<u32>,
    ) -> Option<Registration> {
        let id = existing_id?;
        let (version, _) = self
            .subjects
            .get(subject)?
            .live()
            .find(|(_, e)| e.id == id)?;
        (input.version.is_none() && (input.id.is_none() || input.id == Some(id))).then(|| {
            Registration {
                id,
                version,
                records: Vec::new(),
            }
        })
    }

    /// `POST /subjects/{subject}/versions`. `incompatible_code` is the
    /// error_code of a 409 (409 or 40901).
    pub fn register(
        &self,
        subject: &str,
        input: &SchemaInput,
        incompatible_code: u32,
    ) -> Result<Registration, ApiError> {
        let subject = canonical_subject(subject);
        validate_schema_subject(subject)?;
        let (context, _) = split_subject(subject);
        let explicit = input.id.is_some() || input.version.is_some();
        let mode = self.check_writable(subject, explicit)?;
        let schema_type = parse_schema_type(input.schema_type.as_deref())?;
        input.check_contract()?;
        let (metadata, rule_set) = self.effective_contract(subject, input);
        let key = dedup_key(
            schema_type,
            &input.schema,
            &input.references,
            metadata.as_ref(),
            rule_set.as_ref(),
        );
        let existing_id = self.id_of(context, &key);
        let subject_state = self.subjects.get(subject);

        // Already a live version of the subject: nothing to check or parse
        // (it was valid when registered).
        if let Some(registration) = self.live_version(subject, input, existing_id) {
            return Ok(registration);
        }
        let new = Arc::new(self.parse(context, schema_type, &input.schema, &input.references)?);

        let import = mode == RegistryMode::Import;
        if !import {
            let level = self.compatibility(subject);
            let live: Vec<(u32, VersionEntry)> = subject_state
                .map(|s| s.live().rev().collect())
                .unwrap_or_default();
            let previous = live
                .iter()
                .map(|(_, e)| self.parsed(context, e.id))
                .collect::<Result<Vec<Arc<Schema>>, ApiError>>()?;
            let findings = check(level, &new, &previous);
            if !findings.is_empty() {
                let details = describe_findings(&findings, &live, level);
                return Err(ApiError::incompatible(incompatible_code, subject, &details));
            }
        }

        let id = match (input.id, existing_id) {
            (Some(wanted), _) => {
                if let Some(stored) = self.schema(context, wanted)
                    && stored_key(stored) != key
                {
                    return Err(ApiError::id_mismatch(format!(
                        "Overwrite new schema with id {wanted} is not permitted: id {wanted} is another schema"
                    )));
                }
                if let Some(other) = existing_id
                    && other != wanted
                {
                    return Err(ApiError::id_mismatch(format!(
                        "Schema already registered with id {other} instead of input id {wanted}"
                    )));
                }
                if !(1..=MAX_VERSION).contains(&wanted) {
                    return Err(ApiError::id_mismatch(format!(
                        "Id {wanted} is out of range 1..2^31-1"
                    )));
                }
                wanted
            }
            (None, Some(id)) => id,
            (None, None) => self
                .spaces
                .get(context)
                .map_or(0, |s| s.max_id)
                .checked_add(1)
                .filter(|id| *id <= MAX_VERSION)
                .ok_or_else(|| ApiError::store("every schema id up to 2^31-1 is taken"))?,
        };
        let max_version = subject_state
            .and_then(|s| s.versions.keys().next_back().copied())
            .unwrap_or(0);
        let version = match input.version {
            Some(v) => {
                if !(1..=MAX_VERSION).contains(&v) {
                    return Err(ApiError::invalid_version(&v.to_string()));
                }
                if subject_state.is_some_and(|s| s.versions.contains_key(&v)) {
                    return Err(ApiError::not_permitted(format!(
                        "Version {v} of subject '{subject}' already exists; an import cannot overwrite it"
                    )));
                }
                v
            }
            None => max_version
                .checked_add(1)
                .filter(|v| *v <= MAX_VERSION)
                .ok_or_else(|| ApiError::invalid_version("2^31"))?,
        };
        let value = SchemaValue {
            subject: subject.to_owned(),
            version,
            id,
            schema: input.schema.clone(),
            schema_type: schema_type_field(schema_type).map(str::to_owned),
            references: input.references.clone(),
            metadata,
            rule_set,
            deleted: false,
        };
        let mut records = Vec::new();
        // The first schema of a context names it, as Confluent's CONTEXT
        // record does.
        if context != DEFAULT_CONTEXT && !self.contexts.contains(context) {
            records.push(Record {
                key: Key::Context {
                    context: context.to_owned(),
                },
                value: Some(Value::Context),
            });
        }
        records.push(Record {
            key: Key::Schema {
                subject: subject.to_owned(),
                version,
            },
            value: Some(Value::Schema(value)),
        });
        Ok(Registration {
            id,
            version,
            records,
        })
    }

    /// `POST /subjects/{subject}`: the version of `subject` that holds this
    /// schema.
    pub fn lookup(
        &self,
        subject: &str,
        input: &SchemaInput,
        deleted: bool,
    ) -> Result<(u32, u32), ApiError> {
        let subject = canonical_subject(subject);
        let (context, _) = split_subject(subject);
        let s = self.existing_subject(subject, deleted)?;
        let schema_type = parse_schema_type(input.schema_type.as_deref())?;
        // Parsing validates the schema and its references (42201).
        self.parse(context, schema_type, &input.schema, &input.references)?;
        input.check_contract()?;
        let key = dedup_key(
            schema_type,
            &input.schema,
            &input.references,
            input.metadata.as_ref(),
            input.rule_set.as_ref(),
        );
        let visible = |e: &VersionEntry| deleted || !e.deleted;
        if let Some(id) = self.id_of(context, &key)
            && let Some((v, e)) = s
                .versions
                .iter()
                .rev()
                .find(|(_, e)| e.id == id && visible(e))
        {
            return Ok((e.id, *v));
        }
        // Without a data contract in the request, the newest version of
        // the same schema, whatever its metadata and rules.
        if input.metadata.is_none() && input.rule_set.is_none() {
            let bare = dedup_key(schema_type, &input.schema, &input.references, None, None);
            let found = s.versions.iter().rev().find(|(_, e)| {
                visible(e)
                    && self.schema(context, e.id).is_some_and(|stored| {
                        dedup_key(
                            stored.schema_type,
                            &stored.text,
                            &stored.references,
                            None,
                            None,
                        ) == bare
                    })
            });
            if let Some((v, e)) = found {
                return Ok((e.id, *v));
            }
        }
        Err(ApiError::schema_not_found("(the one given)"))
    }

    /// `POST /compatibility/subjects/{subject}/versions[/{version}]`: every
    /// incompatibility, as sentences. With a version, the check runs
    /// against that version only (in the level's directions); without, as
    /// registration would.
    pub fn check_compatibility(
        &self,
        subject: &str,
        version: Option<VersionSpec>,
        input: &SchemaInput,
    ) -> Result<Vec<String>, ApiError> {
        let subject = canonical_subject(subject);
        let (context, _) = split_subject(subject);
        let schema_type = parse_schema_type(input.schema_type.as_deref())?;
        let level = self.compatibility(subject);
        let against: Vec<(u32, VersionEntry)> = match version {
            Some(spec) => vec![self.version(subject, spec, false)?],
            None => match self.subjects.get(subject) {
                Some(s) => s.live().rev().collect(),
                None => Vec::new(),
            },
        };
        let new = Arc::new(self.parse(context, schema_type, &input.schema, &input.references)?);
        let previous = against
            .iter()
            .map(|(_, e)| self.parsed(context, e.id))
            .collect::<Result<Vec<Arc<Schema>>, ApiError>>()?;
        let effective = if version.is_some() {
            // One named version: the level's directions, not its depth.
            match level {
                Mode::BackwardTransitive => Mode::Backward,
                Mode::ForwardTransitive => Mode::Forward,
                Mode::FullTransitive => Mode::Full,
                other => other,
            }
        } else {
            level
        };
        let findings = check(effective, &new, &previous);
        Ok(describe_findings(&findings, &against, level))
    }

    /// `DELETE /subjects/{subject}[?permanent=true]`: the versions deleted.
    pub fn delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<(Vec<u32>, Vec<Record>), ApiError> {
        let subject = canonical_subject(subject);
        let s = match self.subjects.get(subject) {
            Some(s) if !s.versions.is_empty() => s,
            _ => return Err(ApiError::subject_not_found(subject)),
        };
        self.check_writable(subject, false)?;
        if permanent {
            if s.is_live() {
                return Err(ApiError::subject_not_soft_deleted(subject));
            }
            let versions: Vec<u32> = s.versions.keys().copied().collect();
            let mut records: Vec<Record> = versions
                .iter()
                .map(|v| Record {
                    key: Key::Schema {
                        subject: subject.to_owned(),
                        version: *v,
                    },
                    value: None,
                })
                .collect();
            if s.has_config() {
                records.push(Record {
                    key: Key::Config {
                        subject: Some(subject.to_owned()),
                    },
                    value: None,
                });
            }
            if s.mode.is_some() {
                records.push(Record {
                    key: Key::Mode {
                        subject: Some(subject.to_owned()),
                    },
                    value: None,
                });
            }
            return Ok((versions, records));
        }
        if !s.is_live() {
            return Err(ApiError::subject_soft_deleted(subject));
        }
        let live: Vec<u32> = s.live().map(|(v, _)| v).collect();
        for v in &live {
            let by = self.referenced_by(subject, *v);
            if !by.is_empty() {
                return Err(ApiError::reference_exists(subject, *v, &by));
            }
        }
        let max = s.versions.keys().next_back().copied().unwrap_or(0);
        Ok((
            live,
            vec![Record {
                key: Key::DeleteSubject {
                    subject: subject.to_owned(),
                },
                value: Some(Value::DeleteSubject {
                    subject: subject.to_owned(),
                    version: max,
                }),
            }],
        ))
    }

    /// `DELETE /subjects/{subject}/versions/{version}[?permanent=true]`.
    pub fn delete_version(
        &self,
        subject: &str,
        spec: VersionSpec,
        permanent: bool,
    ) -> Result<(u32, Vec<Record>), ApiError> {
        let subject = canonical_subject(subject);
        let s = match self.subjects.get(subject) {
            Some(s) if !s.versions.is_empty() => s,
            _ => return Err(ApiError::subject_not_found(subject)),
        };
        self.check_writable(subject, false)?;
        let (version, entry) = match spec {
            VersionSpec::Latest if permanent => {
                s.versions.iter().next_back().map(|(v, e)| (*v, *e))
            }
            VersionSpec::Latest => s.latest_live(),
            VersionSpec::Number(n) => s.versions.get(&n).map(|e| (n, *e)),
        }
        .ok_or_else(|| match spec {
            VersionSpec::Latest => ApiError::version_not_found(subject, "latest"),
            VersionSpec::Number(n) => ApiError::version_not_found(subject, n),
        })?;
        let key = Key::Schema {
            subject: subject.to_owned(),
            version,
        };
        if permanent {
            if !entry.deleted {
                return Err(ApiError::version_not_soft_deleted(subject, version));
            }
            return Ok((version, vec![Record { key, value: None }]));
        }
        if entry.deleted {
            return Err(ApiError::version_soft_deleted(subject, version));
        }
        let by = self.referenced_by(subject, version);
        if !by.is_empty() {
            return Err(ApiError::reference_exists(subject, version, &by));
        }
        let stored = self
            .schema(split_subject(subject).0, entry.id)
            .ok_or_else(|| ApiError::store(format!("schema {} is missing", entry.id)))?;
        let value = SchemaValue {
            subject: subject.to_owned(),
            version,
            id: entry.id,
            schema: stored.text.clone(),
            schema_type: schema_type_field(stored.schema_type).map(str::to_owned),
            references: stored.references.clone(),
            metadata: stored.metadata.clone(),
            rule_set: stored.rule_set.clone(),
            deleted: true,
        };
        Ok((
            version,
            vec![Record {
                key,
                value: Some(Value::Schema(value)),
            }],
        ))
    }

    /// `PUT /config[/{subject}]`: the fields `update` has replace those
    /// of the configuration at that scope, the others are kept. Returns
    /// the configuration written.
    pub fn set_config(
        &self,
        subject: Option<&str>,
        update: &ConfigValue,
    ) -> Result<(ConfigValue, Vec<Record>), ApiError> {
        // `:.:` is the default context: the global setting.
        let subject = subject.map(canonical_subject).filter(|s| !s.is_empty());
        if let Some(s) = subject {
            validate_subject(s)?;
        }
        let (old_level, old_contract) = match subject {
            None => (self.compatibility, &self.contract),
            Some(s) => match self.subjects.get(s) {
                Some(state) => (state.compatibility, &state.contract),
                None => (None, &ContractConfig::EMPTY),
            },
        };
        let config = ConfigValue {
            compatibility: update.compatibility.or(old_level),
            contract: old_contract.updated_with(&update.contract),
        };
        Ok((
            config.clone(),
            vec![Record {
                key: Key::Config {
                    subject: subject.map(str::to_owned),
                },
                value: Some(Value::Config(config)),
            }],
        ))
    }

    /// `DELETE /config[/{subject}]`: the level it had.
    pub fn delete_compatibility(
        &self,
        subject: Option<&str>,
    ) -> Result<(Mode, Vec<Record>), ApiError> {
        // `:.:` is the default context: the global setting.
        let subject = subject.map(canonical_subject).filter(|s| !s.is_empty());
        let old = match subject {
            None => self.global_compatibility(),
            Some(s) => match self.subjects.get(s) {
                Some(state) if state.has_config() => state
                    .compatibility
                    .unwrap_or_else(|| self.global_compatibility()),
                Some(_) => return Err(ApiError::subject_level_compatibility_not_configured(s)),
                None => return Err(ApiError::subject_not_found(s)),
            },
        };
        Ok((
            old,
            vec![Record {
                key: Key::Config {
                    subject: subject.map(str::to_owned),
                },
                value: None,
            }],
        ))
    }

    /// `PUT /mode[/{subject}]`. IMPORT needs an empty registry (or
    /// subject) unless `force`.
    pub fn set_mode(
        &self,
        subject: Option<&str>,
        mode: RegistryMode,
        force: bool,
    ) -> Result<Vec<Record>, ApiError> {
        // `:.:` is the default context: the global setting.
        let subject = subject.map(canonical_subject).filter(|s| !s.is_empty());
        if let Some(s) = subject {
            validate_subject(s)?;
        }
        if mode == RegistryMode::Import && !force {
            let empty = match subject {
                None => self.is_empty(),
                // A context (`:.ctx:`): none of its subjects has versions.
                Some(s) if split_subject(s).1.is_empty() => {
                    let context = split_subject(s).0;
                    self.subjects
                        .iter()
                        .all(|(name, v)| split_subject(name).0 != context || v.versions.is_empty())
                }
                Some(s) => self.subjects.get(s).is_none_or(|s| s.versions.is_empty()),
            };
            if !empty {
                return Err(ApiError::not_permitted(
                    "Cannot import since found existing subjects; add force=true to switch to IMPORT anyway",
                ));
            }
        }
        Ok(vec![Record {
            key: Key::Mode {
                subject: subject.map(str::to_owned),
            },
            value: Some(Value::Mode(mode)),
        }])
    }

    /// `DELETE /mode[/{subject}]`: the mode it had.
    pub fn delete_mode(
        &self,
        subject: Option<&str>,
    ) -> Result<(RegistryMode, Vec<Record>), ApiError> {
        // `:.:` is the default context: the global setting.
        let subject = subject.map(canonical_subject).filter(|s| !s.is_empty());
        let old = match subject {
            None => self.global_mode(),
            Some(s) => match self.subjects.get(s) {
                Some(state) => state
                    .mode
                    .ok_or_else(|| ApiError::subject_level_mode_not_configured(s))?,
                None => return Err(ApiError::subject_not_found(s)),
            },
        };
        Ok((
            old,
            vec![Record {
                key: Key::Mode {
                    subject: subject.map(str::to_owned),
                },
                value: None,
            }],
        ))
    }
}

/// The dedup key of a stored schema.
fn stored_key(stored: &StoredSchema) -> DedupKey {
    dedup_key(
        stored.schema_type,
        &stored.text,
        &stored.references,
        stored.metadata.as_ref(),
        stored.rule_set.as_ref(),
    )
}

/// The engine's check over shared parsed schemas (no copies).
fn check(level: Mode, new: &Arc<Schema>, previous: &[Arc<Schema>]) -> Vec<evolve_compat::Finding> {
    evolve_compat::check_with(level, new, previous, |reader, writer| {
        evolve_compat::can_read(reader, writer)
    })
}

/// One line per incompatibility, in the shape of Confluent's verbose
/// messages: `{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE',
/// description:'...', location:'/fields/1', oldSchemaVersion:2,
/// direction:'backward', compatibility:'BACKWARD'}`.
fn describe_findings(
    findings: &[evolve_compat::Finding],
    against: &[(u32, VersionEntry)],
    level: Mode,
) -> Vec<String> {
    findings
        .iter()
        .map(|f| {
            let version = against
                .get(f.against)
                .map(|(v, _)| v.to_string())
                .unwrap_or_else(|| "?".into());
            let direction = match f.direction {
                evolve_compat::Direction::Backward => "backward",
                evolve_compat::Direction::Forward => "forward",
            };
            let i = &f.incompatibility;
            format!(
                "{{errorType:'{}', description:'{}', location:'{}', oldSchemaVersion:{version}, direction:'{direction}', compatibility:'{}'}}",
                i.kind,
                i.message,
                i.path,
                level.as_str()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_prints_what_serde_json_values_print() {
        for text in [
            r#"{"b": 1, "a": [true, false, null], "c": {"z": "é\n\"", "y": -0}}"#,
            r#"{"a": 1, "a": 2}"#,
            r#"[1.0, 1e3, -12, 18446744073709551615, 1e300, 0.1]"#,
            r#""\u0007\ud83d\ude00""#,
            " { } ",
            "[]",
        ] {
            let value: serde_json::Value = serde_json::from_str(text).expect("JSON");
            assert_eq!(canonical_json(text), Some(value.to_string()), "{text}");
        }
        assert_eq!(canonical_json("{"), None);
        assert_eq!(
            dedup_key(SchemaType::Avro, r#"{"type": "string"}"#, &[], None, None),
            dedup_key(SchemaType::Avro, r#" {"type":"string"} "#, &[], None, None)
        );
        assert_ne!(
            dedup_key(SchemaType::Avro, r#""string""#, &[], None, None),
            dedup_key(SchemaType::Json, r#""string""#, &[], None, None)
        );
        let metadata = serde_json::json!({"properties": {"owner": "a"}});
        assert_ne!(
            dedup_key(SchemaType::Avro, r#""string""#, &[], Some(&metadata), None),
            dedup_key(SchemaType::Avro, r#""string""#, &[], None, None)
        );
        assert_ne!(
            dedup_key(SchemaType::Avro, r#""string""#, &[], Some(&metadata), None),
            dedup_key(SchemaType::Avro, r#""string""#, &[], None, Some(&metadata))
        );
        let reordered: serde_json::Value =
            serde_json::from_str(r#"{"tags": {}, "properties": {"owner": "a"}}"#).expect("JSON");
        let ordered: serde_json::Value =
            serde_json::from_str(r#"{"properties": {"owner": "a"}, "tags": {}}"#).expect("JSON");
        assert_eq!(
            dedup_key(SchemaType::Avro, r#""string""#, &[], Some(&reordered), None),
            dedup_key(SchemaType::Avro, r#""string""#, &[], Some(&ordered), None)
        );
    }

    #[test]
    fn subjects_split_into_context_and_name() {
        assert_eq!(split_subject(":.team:orders"), (".team", "orders"));
        assert_eq!(split_subject(":.team:"), (".team", ""));
        assert_eq!(split_subject("orders"), (".", "orders"));
        assert_eq!(split_subject(":team:orders"), (".", ":team:orders"));
        assert_eq!(split_subject(":.:orders"), (".", "orders"));
        assert_eq!(canonical_subject(":.:orders"), "orders");
        assert_eq!(qualify(".team", "money"), ":.team:money");
        assert_eq!(qualify(".team", ":.other:money"), ":.other:money");
        assert_eq!(qualify(".", "money"), "money");
        assert!(validate_subject(":.:x").is_ok());
        assert!(validate_schema_subject(":.team:").is_err());
    }

    #[test]
    fn the_parsed_cache_holds_a_bounded_amount_of_text() {
        let schema = Arc::new(Schema::parse(SchemaType::Avro, r#""string""#, &[]).expect("schema"));
        let mut cache = ParsedCache::default();
        let key = |id: u32| (DEFAULT_CONTEXT.to_owned(), id);
        let quarter = PARSED_CACHE_TEXT_BYTES / 4;
        for id in 1..=4 {
            cache.insert(key(id), Arc::clone(&schema), quarter);
        }
        assert_eq!(cache.text_bytes, PARSED_CACHE_TEXT_BYTES);
        assert!(cache.get(&key(1)).is_some());
        cache.insert(key(5), Arc::clone(&schema), quarter);
        // The least recently used (2, not 1) made room.
        assert_eq!(cache.text_bytes, PARSED_CACHE_TEXT_BYTES);
        assert!(cache.get(&key(2)).is_none());
        assert!(cache.get(&key(1)).is_some() && cache.get(&key(5)).is_some());
        cache.insert(key(6), Arc::clone(&schema), PARSED_CACHE_TEXT_BYTES + 1);
        assert!(cache.get(&key(6)).is_none());
        assert_eq!(cache.entries.len(), 4);
    }
}
