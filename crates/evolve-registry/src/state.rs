//! The registry's state, rebuilt by replaying the log, and the operations
//! over it. Pure: a write operation does not change the state, it returns
//! the records that would (the caller appends them to the log, then applies
//! them), so every instance sharing a log computes the same state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use evolve_compat::{Mode, Reference, Schema, SchemaType};
use sha2::{Digest, Sha256};

use crate::contract::{
    ContractConfig, check_metadata, check_rule_set, confluent_version, confluent_version_number,
    with_confluent_version, without_confluent_version,
};
use crate::error::ApiError;
use crate::record::{
    ConfigSettings, ConfigValue, Key, Record, RegistryMode, SchemaReference, SchemaValue, Value,
};

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
#[derive(Clone, Debug)]
pub struct StoredSchema {
    pub schema_type: SchemaType,
    pub text: String,
    pub references: Vec<SchemaReference>,
    /// The data contract's metadata and rule set: part of what the id
    /// names (the same schema with other metadata is another id).
    pub metadata: Option<serde_json::Value>,
    pub rule_set: Option<serde_json::Value>,
    /// What it is found by (see [`Keys`]), computed when first needed
    /// (see [`StoredSchema::keys`]).
    exact: OnceLock<DedupKey>,
    normalized: OnceLock<(DedupKey, DedupKey)>,
    /// The text the keys are computed from: the record's, when the schema
    /// is served as another (a Protobuf descriptor read back as text).
    keyed_text: Option<String>,
    /// Its `guid` (see [`crate::guid`]), computed when first shown.
    guid: OnceLock<String>,
}

impl StoredSchema {
    /// The exact key (see [`Keys`]).
    pub fn exact_key(&self) -> DedupKey {
        *self.exact.get_or_init(|| {
            dedup_key(
                self.schema_type,
                self.keyed_text.as_deref().unwrap_or(&self.text),
                &self.references,
                self.metadata.as_ref(),
                self.rule_set.as_ref(),
            )
        })
    }

    /// Its keys. Those of a schema without references depend on nothing
    /// but the schema, so they are computed on first use rather than when
    /// the log is replayed: normalizing every Avro schema and compiling
    /// every Protobuf one would make a registry with many schemas slow to
    /// start (see `tests/replay_cost.rs`). Those of a schema with
    /// references are computed when the record is read, as the references
    /// resolve then.
    pub fn keys(&self) -> Keys {
        let (key, bare) = *self.normalized.get_or_init(|| {
            let keys = compute_keys(
                self.schema_type,
                self.keyed_text.as_deref().unwrap_or(&self.text),
                &self.references,
                Some(&[]),
                self.metadata.as_ref(),
                self.rule_set.as_ref(),
                None,
            );
            (keys.key, keys.bare)
        });
        Keys {
            exact: self.exact_key(),
            key,
            bare,
        }
    }

    /// Its guid, as Confluent 8.x shows it: the MD5 of the record's text,
    /// references and data contract (see [`crate::guid`]).
    pub fn guid(&self) -> &str {
        self.guid.get_or_init(|| {
            crate::guid::schema_guid(
                self.keyed_text.as_deref().unwrap_or(&self.text),
                &self.references,
                self.metadata.as_ref(),
                self.rule_set.as_ref(),
            )
        })
    }

    /// Whether its keys are computed yet.
    pub fn keys_computed(&self) -> bool {
        self.exact.get().is_some() && self.normalized.get().is_some()
    }
}

/// The keys a schema is found by. `exact` hashes the text as written
/// (without layout for the JSON formats) and answers a re-registration
/// of the same text without parsing it; `key` hashes its normalized form
/// (see [`State::keys`]), so that every way of writing one schema is one
/// schema; `bare` is `key` without the data contract, for a lookup that
/// names none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys {
    pub exact: DedupKey,
    pub key: DedupKey,
    pub bare: DedupKey,
}

/// One version of a subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionEntry {
    pub id: u32,
    pub deleted: bool,
    /// Its registration time (epoch milliseconds), when its record has
    /// one: Confluent 8.0+'s `ts`. See [`SchemaValue::ts`].
    pub ts: Option<i64>,
}

#[derive(Clone, Debug, Default)]
pub struct Subject {
    pub versions: BTreeMap<u32, VersionEntry>,
    pub compatibility: Option<Mode>,
    /// The subject's data-contract defaults and overrides.
    pub contract: ContractConfig,
    /// Its alias, normalize and the other settings of its configuration.
    pub settings: ConfigSettings,
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
        self.compatibility.is_some() || !self.contract.is_empty() || !self.settings.is_empty()
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
    /// `"version": -1` (any negative version): the subject's next version,
    /// as Confluent's `register` reads `version <= 0` other than 0, with
    /// its metadata stamped with `confluent:version` as for an explicit
    /// version (`maybeSetMetadataRuleSet`: `version != 0`), looked up
    /// against the latest live version only (`registerOrForward`'s
    /// `isLatestVersion`).
    pub next_version: bool,
    /// The data contract's `metadata` and `ruleSet`, as the request gives
    /// them.
    pub metadata: Option<serde_json::Value>,
    pub rule_set: Option<serde_json::Value>,
    /// `?normalize=true`: a new schema is stored in its normalized form.
    /// A configuration's `normalize` does the same without it.
    pub normalize: bool,
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

/// A `PUT /config` body: the fields it names. A setting given as JSON
/// `null` is cleared (`Some(None)`), as Confluent clears it; the level and
/// the data-contract fields are kept when absent or `null`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigUpdate {
    pub compatibility: Option<Mode>,
    pub contract: ContractConfig,
    pub alias: Option<Option<String>>,
    pub normalize: Option<Option<bool>>,
    pub validate_fields: Option<Option<bool>>,
    pub validate_rules: Option<Option<bool>>,
    pub compatibility_group: Option<Option<String>>,
}

impl ConfigUpdate {
    /// Whether it names nothing at all.
    pub fn is_empty(&self) -> bool {
        *self == ConfigUpdate::default()
    }

    /// `old` with the settings this update names replaced.
    fn settings_over(&self, old: &ConfigSettings) -> ConfigSettings {
        fn pick<T: Clone>(new: &Option<Option<T>>, old: &Option<T>) -> Option<T> {
            match new {
                Some(value) => value.clone(),
                None => old.clone(),
            }
        }
        ConfigSettings {
            alias: pick(&self.alias, &old.alias),
            normalize: pick(&self.normalize, &old.normalize),
            validate_fields: pick(&self.validate_fields, &old.validate_fields),
            validate_rules: pick(&self.validate_rules, &old.validate_rules),
            compatibility_group: pick(&self.compatibility_group, &old.compatibility_group),
        }
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
    /// `latest` (in any case), `-1` or 1..2^31-1, around white space;
    /// anything else is 42202, as Confluent's `VersionId(String)` reads a
    /// version: `trim().toLowerCase()` compared with `latest`, else
    /// `Integer.parseInt(trim())` (a sign is allowed: `+3` is 3), and a
    /// number below 1 other than -1 refused. The error names the text as
    /// given when it is not a number, and the number otherwise (`-02` is
    /// named `-2`).
    pub fn parse(text: &str) -> Result<VersionSpec, ApiError> {
        let trimmed = java_trim(text);
        if trimmed.to_lowercase() == "latest" {
            return Ok(VersionSpec::Latest);
        }
        match trimmed.parse::<i32>() {
            Err(_) => Err(ApiError::invalid_version(text)),
            Ok(-1) => Ok(VersionSpec::Latest),
            Ok(n) => match u32::try_from(n) {
                Ok(n) if n >= 1 => Ok(VersionSpec::Number(n)),
                _ => Err(ApiError::invalid_version(&n.to_string())),
            },
        }
    }
}

/// Now, in milliseconds since the Unix epoch: a new version's `ts`.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `text` without what Java's `String.trim` removes at either end: every
/// character up to U+0020 (space and the control characters).
pub fn java_trim(text: &str) -> &str {
    text.trim_matches(|c: char| c <= ' ')
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
    /// Keys → ids, filled when first needed (see [`IdIndex`]).
    ids: Mutex<IdIndex>,
    max_id: u32,
    /// How many versions (live or soft-deleted) use each id: whether an id
    /// is still served, without scanning every subject on a read.
    uses: HashMap<u32, usize>,
}

/// The ids of a context by key. `ids`, by normalized key: one id per
/// distinct schema in the context; two ids whose keys are equal (texts
/// stored before keys were normalized as they are now) both stay, the
/// first one read is found. `exact`, by exact key, for re-registrations
/// of a text as written. Schemas read since the index was last used wait
/// in `pending`, in the order they were read, until a look-up needs the
/// index ([`State::id_index`]).
#[derive(Debug, Default)]
struct IdIndex {
    ids: HashMap<DedupKey, u32>,
    exact: HashMap<DedupKey, u32>,
    pending: Vec<(u32, Arc<StoredSchema>)>,
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
    settings: ConfigSettings,
    mode: Option<RegistryMode>,
    /// Parsed schemas by context and id, filled on use, bounded.
    parsed: Mutex<ParsedCache>,
    /// Schemas read whose normalized keys wait to be computed, for
    /// [`State::take_uncomputed`].
    uncomputed: Vec<Weak<StoredSchema>>,
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

/// A key schemas are found by: a SHA-256 of the type, a text of the
/// schema, the references, and the data contract's metadata and rule set
/// when there are any (as Confluent's lookup key). A digest rather than
/// the text itself, so that the state holds each schema's text once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DedupKey([u8; 32]);

/// The exact key of a schema: its text with insignificant white space and
/// object key order removed for the JSON formats, as written otherwise
/// (see [`Keys`]).
pub fn dedup_key(
    schema_type: SchemaType,
    text: &str,
    references: &[SchemaReference],
    metadata: Option<&serde_json::Value>,
    rule_set: Option<&serde_json::Value>,
) -> DedupKey {
    hash_key(
        schema_type,
        &exact_body(schema_type, text),
        references,
        metadata,
        rule_set,
    )
}

/// The text the exact key hashes.
fn exact_body(schema_type: SchemaType, text: &str) -> String {
    match schema_type {
        SchemaType::Avro | SchemaType::Json => {
            canonical_json(text).unwrap_or_else(|| text.trim().to_owned())
        }
        SchemaType::Protobuf => text.trim().to_owned(),
    }
}

fn hash_key(
    schema_type: SchemaType,
    body: &str,
    references: &[SchemaReference],
    metadata: Option<&serde_json::Value>,
    rule_set: Option<&serde_json::Value>,
) -> DedupKey {
    let mut hasher = Sha256::new();
    hasher.update(format!("{schema_type:?}\u{0}"));
    hasher.update(body);
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

/// The keys of a schema given as `text` (see [`State::keys`]), its
/// references resolved as `resolved` (`None` when they do not resolve).
fn compute_keys(
    schema_type: SchemaType,
    text: &str,
    references: &[SchemaReference],
    resolved: Option<&[Reference]>,
    metadata: Option<&serde_json::Value>,
    rule_set: Option<&serde_json::Value>,
    parsed: Option<&Schema>,
) -> Keys {
    let body = key_body(schema_type, text, resolved, parsed);
    Keys {
        exact: dedup_key(schema_type, text, references, metadata, rule_set),
        key: hash_key(schema_type, &body, references, metadata, rule_set),
        bare: hash_key(schema_type, &body, references, None, None),
    }
}

/// The text a schema's normalized key hashes (see [`State::keys`]).
fn key_body(
    schema_type: SchemaType,
    text: &str,
    resolved: Option<&[Reference]>,
    parsed: Option<&Schema>,
) -> String {
    match schema_type {
        SchemaType::Avro => crate::parser::normalized_avro(text, resolved.unwrap_or_default())
            .unwrap_or_else(|| exact_body(schema_type, text)),
        SchemaType::Json => exact_body(schema_type, text),
        SchemaType::Protobuf => {
            let compiled;
            let schema = match (parsed, resolved) {
                (Some(schema), _) => Some(schema),
                (None, Some(resolved)) => {
                    compiled = crate::parser::parse(schema_type, text, resolved).ok();
                    compiled.as_ref()
                }
                (None, None) => None,
            };
            match schema {
                Some(Schema::Protobuf(p)) => evolve_compat::protobuf::canonical_form(p),
                _ => format!("\u{0}text\u{0}{}", text.trim()),
            }
        }
    }
}

/// A schema as a look-up compares it with the versions of a subject:
/// Confluent's `ParsedSchema.canLookup` (`canLookupIgnoringVersion`),
/// where a `confluent:version` in the metadata of one side only does not
/// count (a schema sent without it finds the version that was stamped
/// with it), except that a version sent with it finds only the version of
/// that number; with it on both sides, or on neither, the schemas must be
/// the same, metadata included. `body` is the normalized key's text, or
/// `None` to compare exact keys only (no parsing needed).
struct Probe<'a> {
    schema_type: SchemaType,
    exact_body: String,
    body: Option<String>,
    references: &'a [SchemaReference],
    metadata: Option<&'a serde_json::Value>,
    rule_set: Option<&'a serde_json::Value>,
    /// The keys with `metadata` as it is.
    keys: (DedupKey, Option<DedupKey>),
    /// The keys without `confluent:version`, computed when first needed.
    unversioned: std::cell::OnceCell<(DedupKey, Option<DedupKey>)>,
}

impl<'a> Probe<'a> {
    fn new(
        schema_type: SchemaType,
        text: &str,
        body: Option<String>,
        references: &'a [SchemaReference],
        metadata: Option<&'a serde_json::Value>,
        rule_set: Option<&'a serde_json::Value>,
    ) -> Probe<'a> {
        let mut probe = Probe {
            schema_type,
            exact_body: exact_body(schema_type, text),
            body,
            references,
            metadata,
            rule_set,
            keys: (DedupKey([0; 32]), None),
            unversioned: std::cell::OnceCell::new(),
        };
        probe.keys = probe.keys_with(metadata);
        probe
    }

    fn keys_with(&self, metadata: Option<&serde_json::Value>) -> (DedupKey, Option<DedupKey>) {
        let hash = |body: &str| {
            hash_key(
                self.schema_type,
                body,
                self.references,
                metadata,
                self.rule_set,
            )
        };
        (hash(&self.exact_body), self.body.as_deref().map(hash))
    }

    /// Whether `stored`, version `version` of the subject looked in, is
    /// this schema.
    fn finds(&self, stored: &StoredSchema, version: u32) -> bool {
        let theirs = confluent_version_number(stored.metadata.as_ref());
        let keys = match (confluent_version_number(self.metadata), theirs) {
            (None, Some(_)) => {
                // Compared as if sent with the stored version's stamp.
                let stamp = confluent_version(stored.metadata.as_ref()).unwrap_or_default();
                let stamped = with_confluent_version(self.metadata, stamp);
                if stored.metadata.as_ref() != Some(&stamped)
                    && same_metadata(Some(&stamped), stored.metadata.as_ref())
                {
                    // The same metadata written with empty parts: the
                    // schema compared under the stored version's.
                    self.keys_with(stored.metadata.as_ref())
                } else {
                    self.keys_with(Some(&stamped))
                }
            }
            (Some(mine), None) => {
                if i64::from(mine) != i64::from(version) {
                    return false;
                }
                let unversioned = without_confluent_version(self.metadata);
                if stored.metadata.is_some()
                    && same_metadata(unversioned.as_ref(), stored.metadata.as_ref())
                {
                    // Confluent compares a version stored without metadata
                    // as one with empty metadata
                    // (`canLookupIgnoringVersion`'s `new Metadata(null,
                    // null, null)`), and `Metadata` holds an absent part as
                    // an empty one: metadata present but empty (`{}`,
                    // `{"properties": {}}`) is the metadata left once
                    // `confluent:version` is removed.
                    self.keys_with(stored.metadata.as_ref())
                } else {
                    *self
                        .unversioned
                        .get_or_init(|| self.keys_with(unversioned.as_ref()))
                }
            }
            _ => self.keys,
        };
        match keys {
            (exact, None) => stored.exact_key() == exact,
            (_, Some(key)) => stored.keys().key == key,
        }
    }
}

/// Whether two metadata are one as Confluent's `Metadata.equals` compares
/// them (after `canLookupIgnoringVersion` made both present): an absent
/// part (`tags`, `properties`, `sensitive`) is an empty one.
fn same_metadata(a: Option<&serde_json::Value>, b: Option<&serde_json::Value>) -> bool {
    let parts = |m: Option<&serde_json::Value>| {
        let mut out = m
            .and_then(serde_json::Value::as_object)
            .cloned()
            .unwrap_or_default();
        out.retain(|_, part| match part {
            serde_json::Value::Object(o) => !o.is_empty(),
            serde_json::Value::Array(a) => !a.is_empty(),
            serde_json::Value::Null => false,
            _ => true,
        });
        out
    };
    parts(a) == parts(b)
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
                        self.settings = config.settings;
                    }
                    Some(s) => {
                        let entry = self.subject_entry(s);
                        entry.compatibility = config.compatibility;
                        entry.contract = config.contract;
                        entry.settings = config.settings;
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
        // Another version of a schema already stored (a soft delete, the
        // same schema in another subject) changes no key: no need to
        // compute them again (for Protobuf that is a compilation). A
        // record of a Protobuf schema kept as its serialized descriptor
        // is that schema too (see `protobuf_text`).
        let known = self.schema(context, v.id).is_some_and(|stored| {
            stored.schema_type == schema_type
                && stored.references == v.references
                && stored.metadata == v.metadata
                && stored.rule_set == v.rule_set
                && (stored.text == v.schema
                    || stored.exact_key()
                        == dedup_key(
                            schema_type,
                            &v.schema,
                            &v.references,
                            v.metadata.as_ref(),
                            v.rule_set.as_ref(),
                        ))
        });
        if !known {
            let (text, parsed) = self.protobuf_text(context, schema_type, v);
            let (exact, normalized) = (OnceLock::new(), OnceLock::new());
            // References resolve against the log as it is at this record,
            // and a compiled descriptor is at hand: the keys now. Any
            // other schema's keys depend on it alone: when first needed.
            if !v.references.is_empty() || parsed.is_some() {
                let keys = self.keys(
                    context,
                    schema_type,
                    &v.schema,
                    &v.references,
                    v.metadata.as_ref(),
                    v.rule_set.as_ref(),
                    parsed.as_ref(),
                );
                let _ = exact.set(keys.exact);
                let _ = normalized.set((keys.key, keys.bare));
            }
            let keyed_text = text.is_some().then(|| v.schema.clone());
            let stored = Arc::new(StoredSchema {
                schema_type,
                text: text.unwrap_or_else(|| v.schema.clone()),
                references: v.references.clone(),
                metadata: v.metadata.clone(),
                rule_set: v.rule_set.clone(),
                exact,
                normalized,
                keyed_text,
                guid: OnceLock::new(),
            });
            if !stored.keys_computed() {
                self.uncomputed.push(Arc::downgrade(&stored));
            }
            let space = self.spaces.entry(context.to_owned()).or_default();
            // The record's keys go into the index even when the id keeps
            // an earlier schema (an import that reused an id).
            space
                .ids
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .pending
                .push((v.id, Arc::clone(&stored)));
            space.schemas.entry(v.id).or_insert(stored);
        }
        let space = self.spaces.entry(context.to_owned()).or_default();
        space.max_id = space.max_id.max(v.id);
        let replaced = self.subject_entry(&v.subject).versions.insert(
            v.version,
            VersionEntry {
                id: v.id,
                deleted: v.deleted,
                ts: v.ts,
            },
        );
        let space = self.spaces.entry(context.to_owned()).or_default();
        if let Some(old) = replaced {
            release(&mut space.uses, old.id);
        }
        *space.uses.entry(v.id).or_default() += 1;
    }

    /// The `.proto` text a Protobuf record kept as a serialized descriptor
    /// (base64 of a `FileDescriptorProto`) is served as, with the schema
    /// compiled for its keys. Registrations have stored such schemas as
    /// the text rendered from the descriptor, as Confluent stores them;
    /// logs written before that (or imported from a registry that kept the
    /// descriptor) still hold the descriptor, which reads back as the same
    /// text. `(None, None)` for any other record; `(None, parsed)` when
    /// the rendering would not compile back to the same schema.
    fn protobuf_text(
        &self,
        context: &str,
        schema_type: SchemaType,
        v: &SchemaValue,
    ) -> (Option<String>, Option<Schema>) {
        if schema_type != SchemaType::Protobuf || !evolve_compat::protobuf::is_serialized(&v.schema)
        {
            return (None, None);
        }
        let Ok(parsed) = self.parse(context, schema_type, &v.schema, &v.references) else {
            return (None, None);
        };
        let text = match &parsed {
            Schema::Protobuf(p) => {
                let references = self
                    .resolve_references(context, &v.references)
                    .unwrap_or_default();
                evolve_compat::protobuf::render(p, &references)
            }
            _ => None,
        };
        (text, Some(parsed))
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

    /// The version a request names: `latest` is the newest live one,
    /// `deleted` or not; a soft-deleted version is found by its number
    /// only with `deleted`. As Confluent's `get(subject, version,
    /// returnDeletedSchema)` (AbstractSchemaRegistry): `latest` (-1) is
    /// `getLatestVersion`, which skips soft-deleted versions whatever
    /// `returnDeletedSchema` says, so a subject whose versions are all
    /// soft-deleted has no `latest` (40402 with `deleted`, 40401 without).
    pub fn version(
        &self,
        subject: &str,
        spec: VersionSpec,
        deleted: bool,
    ) -> Result<(u32, VersionEntry), ApiError> {
        let s = self.existing_subject(subject, deleted)?;
        let found = match spec {
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
    /// (references resolve within the referencing schema's context), and
    /// with `deleted` those of soft-deleted versions too (Confluent's
    /// `getReferencedBy(key, lookupDeletedSchema)`).
    pub fn referenced_by(&self, subject: &str, version: u32, deleted: bool) -> Vec<u32> {
        let ids: BTreeSet<u32> = self
            .referrers(subject, version, deleted)
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        ids.into_iter().collect()
    }

    /// The subjects and ids of the versions that reference `subject`
    /// version `version`, as [`State::referenced_by`] selects them: in
    /// every context, as a reference may name a subject of another one
    /// (`:.other:subject`, `:.:subject`).
    fn referrers(&self, subject: &str, version: u32, deleted: bool) -> Vec<(&str, u32)> {
        let subject = canonical_subject(subject);
        let mut found = Vec::new();
        for (name, s) in &self.subjects {
            // The referrer's references name subjects of its context.
            let (context, _) = split_subject(name);
            for e in s.versions.values().filter(|e| deleted || !e.deleted) {
                if let Some(schema) = self.schema(context, e.id)
                    && schema.references.iter().any(|r| {
                        qualify(context, &r.subject) == subject
                            && self.resolve_reference_version(context, r) == Some(version)
                    })
                {
                    found.push((name.as_str(), e.id));
                }
            }
        }
        found
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

    /// The settings (`normalize`, `compatibilityGroup`, ...) that apply to
    /// `subject`: each one the subject's own, else its context's, else the
    /// global one (Confluent merges a subject's configuration over the
    /// global one field by field). `alias` is the subject's own only.
    pub fn settings_in_scope(&self, subject: &str) -> ConfigSettings {
        let mut settings = ConfigSettings::default();
        for scope in self.scopes(subject) {
            settings = settings.or(&scope.settings);
        }
        settings = settings.or(&self.settings);
        settings.alias = self.subject(subject).and_then(|s| s.settings.alias.clone());
        settings
    }

    /// Whether registrations in `subject` normalize without being asked:
    /// a `normalize: true` configuration in scope.
    pub fn normalize_in_scope(&self, subject: &str) -> bool {
        self.settings_in_scope(subject).normalize == Some(true)
    }

    /// Whether registrations, lookups and compatibility checks in `subject`
    /// validate field names (Confluent's `validateFields`, off unless a
    /// configuration in scope turns it on): a JSON Schema may not have a
    /// top-level property whose name starts with `$$`, and a schema may
    /// not have a top-level field named in its metadata's
    /// `confluent:reserved` property, nor drop a name the latest version
    /// reserved. IMPORT mode takes schemas as they are.
    pub fn validate_fields_in_scope(&self, subject: &str) -> bool {
        self.settings_in_scope(subject).validate_fields == Some(true)
    }

    /// 42201 when `validateFields` is on for `subject`, which is not in
    /// IMPORT mode, and the JSON Schema `text` has a top-level property
    /// whose name starts with `$$` (Confluent's
    /// `JsonSchema.validate(strict)`).
    fn check_field_names(
        &self,
        subject: &str,
        schema_type: SchemaType,
        text: &str,
    ) -> Result<(), ApiError> {
        if schema_type != SchemaType::Json
            || !self.validate_fields_in_scope(subject)
            || self.mode(subject) == RegistryMode::Import
        {
            return Ok(());
        }
        match reserved_json_property(text) {
            Some(name) => Err(ApiError::invalid_schema(format!(
                "Invalid JSON Schema: #/properties/{name}: Field names cannot start with $$ prefix (validateFields is on for subject '{subject}'); rename the property, or PUT /config/{subject} {{\"validateFields\":false}}"
            ))),
            None => Ok(()),
        }
    }

    /// With `validateFields` on, what Confluent reports beside the
    /// incompatibilities (`validateReservedFields`): each name the
    /// `previous` version's metadata reserves (`confluent:reserved`, a
    /// comma-separated list) that `metadata` no longer does, and each name
    /// `metadata` reserves that `new` has as a top-level field.
    #[allow(clippy::too_many_arguments)]
    fn reserved_field_errors(
        &self,
        context: &str,
        new: &Schema,
        text: &str,
        references: &[SchemaReference],
        metadata: Option<&serde_json::Value>,
        previous: Option<&StoredSchema>,
    ) -> Vec<String> {
        let reserved = reserved_fields(metadata);
        let mut errors: Vec<String> = previous
            .map(|p| reserved_fields(p.metadata.as_ref()))
            .unwrap_or_default()
            .difference(&reserved)
            .map(|name| {
                format!(
                    "The new schema has reserved field {name} removed from its metadata which is present in the old schema's metadata."
                )
            })
            .collect();
        if !reserved.is_empty() {
            let resolved = || {
                self.resolve_references(context, references)
                    .unwrap_or_default()
            };
            let fields = top_level_fields(new, text, resolved);
            errors.extend(reserved.intersection(&fields).map(|name| {
                format!("The new schema has field that conflicts with the reserved field {name}.")
            }));
        }
        errors
    }

    /// The subject `subject`'s reads and writes go to: its configuration's
    /// `alias`, qualified within the subject's context when the alias is
    /// not qualified itself (as Confluent's alias filter does), if it has
    /// one.
    pub fn alias_of(&self, subject: &str) -> Option<String> {
        let subject = canonical_subject(subject);
        let alias = self
            .subjects
            .get(subject)?
            .settings
            .alias
            .as_deref()
            .filter(|a| !a.is_empty())?;
        Some(qualify(split_subject(subject).0, alias))
    }

    /// Every subject (or context, `:.ctx:`) whose configuration has an
    /// alias, with the subject the alias names (see [`State::alias_of`]),
    /// by subject.
    pub fn aliases(&self) -> Vec<(String, String)> {
        self.subjects
            .keys()
            .filter_map(|name| Some((name.clone(), self.alias_of(name)?)))
            .collect()
    }

    /// The global configuration.
    pub fn global_config(&self) -> ConfigValue {
        ConfigValue {
            compatibility: Some(self.global_compatibility()),
            contract: self.contract.clone(),
            settings: self.settings.clone(),
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
            settings: s.settings.clone(),
        })
    }

    /// The configuration that applies to `subject` (`defaultToGlobal`):
    /// its own fields, else its context's, else the global ones.
    pub fn config_in_scope(&self, subject: &str) -> ConfigValue {
        ConfigValue {
            compatibility: Some(self.compatibility(subject)),
            contract: self.contract_in_scope(subject).clone(),
            settings: self.settings_in_scope(subject),
        }
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

    /// The subject's mode, else its context's, else the global one;
    /// a global READONLY_OVERRIDE whatever the subject's or context's
    /// own (Confluent's `getModeInScope`): it freezes the whole registry.
    pub fn mode(&self, subject: &str) -> RegistryMode {
        if self.global_override() {
            return RegistryMode::ReadonlyOverride;
        }
        self.scopes(subject)
            .find_map(|s| s.mode)
            .unwrap_or_else(|| self.global_mode())
    }

    /// Whether the global mode is READONLY_OVERRIDE, which overrides every
    /// subject's and context's own mode.
    pub fn global_override(&self) -> bool {
        self.mode == Some(RegistryMode::ReadonlyOverride)
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
    /// when it is not valid. Stored schemas and offered ones alike: what
    /// only a schema stored anew is refused for (a JSON Schema pattern
    /// Java refuses) is [`State::check_new_schema`]'s, so that a schema an
    /// earlier release stored keeps parsing.
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

    /// 42201 when `parsed`, offered to `context`, is one that Confluent
    /// refuses although it parses ([`Schema::new_schema_error`]: a JSON
    /// Schema pattern Java's `java.util.regex` refuses), unless the context
    /// already stores the same schema (`bare`: its key without metadata
    /// and rules, see [`Keys`]): a schema an earlier release of evolve took
    /// is still found, re-registered and checked as it was. Stored schemas
    /// are never asked ([`State::parsed`]).
    pub fn check_new_schema(
        &self,
        context: &str,
        parsed: &Schema,
        bare: impl FnOnce() -> DedupKey,
    ) -> Result<(), ApiError> {
        let Some(e) = parsed.new_schema_error() else {
            return Ok(());
        };
        let bare = bare();
        let stored = self.spaces.get(context).is_some_and(|space| {
            space
                .schemas
                .values()
                .any(|s| s.schema_type == parsed.schema_type() && s.keys().bare == bare)
        });
        if stored {
            return Ok(());
        }
        Err(ApiError::invalid_schema(format!(
            "Invalid {}: {}",
            parsed.schema_type().noun(),
            e.message
        )))
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

    /// The keys of a schema given as `text` in `context` (see [`Keys`]).
    /// The normalized key hashes, for Avro, Avro Java's `Schema.toString()`
    /// in one spelling ([`evolve_compat::avro::normalized_form`]: full
    /// names, `{"type":"long"}` as `"long"`, one key order; docs, defaults,
    /// aliases, orders, logical types and custom properties kept, as
    /// Confluent compares Avro schemas); for Protobuf, the compiled
    /// descriptor ([`evolve_compat::protobuf::canonical_form`]: layout and
    /// comments do not count, and a serialized descriptor is the same
    /// schema as its `.proto` text); for JSON Schema, the JSON without
    /// layout or key order. `parsed` saves compiling a Protobuf schema
    /// again; a schema that no longer compiles keys on its text.
    #[allow(clippy::too_many_arguments)]
    pub fn keys(
        &self,
        context: &str,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
        metadata: Option<&serde_json::Value>,
        rule_set: Option<&serde_json::Value>,
        parsed: Option<&Schema>,
    ) -> Keys {
        let resolved = self.resolve_references(context, references).ok();
        compute_keys(
            schema_type,
            text,
            references,
            resolved.as_deref(),
            metadata,
            rule_set,
            parsed,
        )
    }

    /// The id of a schema of normalized key `key` in `context`, if one was
    /// ever registered there.
    pub fn id_of(&self, context: &str, key: &DedupKey) -> Option<u32> {
        self.id_index(self.spaces.get(context)?)
            .ids
            .get(key)
            .copied()
    }

    /// The normalized key → id index of `space`, with the keys of the
    /// schemas read since it was last used computed and added, in the
    /// order they were read.
    fn id_index<'s>(&self, space: &'s Space) -> MutexGuard<'s, IdIndex> {
        let mut index = space.ids.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, schema) in std::mem::take(&mut index.pending) {
            let keys = schema.keys();
            index.ids.entry(keys.key).or_insert(id);
            index.exact.entry(keys.exact).or_insert(id);
        }
        index
    }

    /// The schemas read since the last call whose normalized keys are not
    /// computed yet, for the registry to compute them off the requests'
    /// path (see [`StoredSchema::keys`]).
    pub fn take_uncomputed(&mut self) -> Vec<Weak<StoredSchema>> {
        std::mem::take(&mut self.uncomputed)
    }

    /// The text a new schema is stored as: a Protobuf schema sent as a
    /// serialized descriptor as the `.proto` text rendered from it (as
    /// Confluent stores it); with `normalize`, the normalized form (Avro's
    /// [`evolve_compat::avro::normalized_form`], JSON without layout, the
    /// rendered `.proto` text); otherwise the text as given. A rendering
    /// that would not compile back to the same schema keeps the text.
    fn stored_text(
        &self,
        context: &str,
        schema_type: SchemaType,
        input: &SchemaInput,
        parsed: &Schema,
        normalize: bool,
    ) -> String {
        let references = || {
            self.resolve_references(context, &input.references)
                .unwrap_or_default()
        };
        let rendered = match (schema_type, parsed) {
            (SchemaType::Protobuf, Schema::Protobuf(p))
                if normalize || evolve_compat::protobuf::is_serialized(&input.schema) =>
            {
                evolve_compat::protobuf::render(p, &references())
            }
            (SchemaType::Avro, _) if normalize => {
                crate::parser::normalized_avro(&input.schema, &references())
            }
            (SchemaType::Json, _) if normalize => canonical_json(&input.schema),
            _ => None,
        };
        rendered.unwrap_or_else(|| input.schema.clone())
    }

    // ---- writes ---------------------------------------------------------

    fn check_writable(&self, subject: &str) -> Result<RegistryMode, ApiError> {
        let mode = self.mode(subject);
        match mode {
            RegistryMode::ReadonlyOverride if self.global_override() => {
                Err(ApiError::not_permitted(format!(
                    "Subject {subject} is in read-only mode: the registry's mode is READONLY_OVERRIDE, which overrides every subject's own; PUT /mode {{\"mode\":\"READWRITE\"}} to write"
                )))
            }
            RegistryMode::Readonly | RegistryMode::ReadonlyOverride => {
                Err(ApiError::not_permitted(format!(
                    "Subject {subject} is in read-only mode; PUT /mode/{subject} {{\"mode\":\"READWRITE\"}} to write"
                )))
            }
            _ => Ok(mode),
        }
    }

    /// Whether `input` may be registered as a new version of `subject` in
    /// its mode (Confluent's `checkRegisterMode`): not in READONLY or
    /// READONLY_OVERRIDE; in IMPORT only with an explicit id (a new id
    /// there would collide with the ids still to be imported); in
    /// READWRITE only without an explicit id. An explicit version in
    /// READWRITE is checked later, by [`State::register`]: it must be the
    /// subject's next one.
    fn check_register_mode(
        &self,
        subject: &str,
        input: &SchemaInput,
    ) -> Result<RegistryMode, ApiError> {
        let mode = self.check_writable(subject)?;
        match mode {
            RegistryMode::Import if input.id.is_none() => Err(ApiError::not_permitted(format!(
                "Subject {subject} is not in read-write mode: in IMPORT mode a registration needs an explicit \"id\" (and \"version\"); give them, or PUT /mode/{subject} {{\"mode\":\"READWRITE\"}} to register new schemas"
            ))),
            RegistryMode::Readwrite if input.id.is_some() => Err(ApiError::not_permitted(format!(
                "Subject {subject} is not in import mode: an explicit \"id\" is accepted only in IMPORT mode; leave \"id\" out, or PUT /mode/{subject} {{\"mode\":\"IMPORT\"}} first"
            ))),
            _ => Ok(mode),
        }
    }

    /// A registration that appends nothing because the schema is already
    /// registered under `subject`, answered without parsing the schema
    /// when its text is one already stored: what [`State::register`] would
    /// answer, or `None` when it has work to do (or an error to report).
    pub fn existing_registration(
        &self,
        subject: &str,
        input: &SchemaInput,
    ) -> Option<Registration> {
        let subject = canonical_subject(subject);
        validate_schema_subject(subject).ok()?;
        let schema_type = parse_schema_type(input.schema_type.as_deref()).ok()?;
        input.check_contract().ok()?;
        self.check_field_names(subject, schema_type, &input.schema)
            .ok()?;
        let (metadata, rule_set) = self.effective_contract(subject, input);
        let stamp = self.version_stamp(subject, input, metadata.as_ref());
        let probes = self.registration_probes(
            subject,
            schema_type,
            input,
            (metadata.as_ref(), rule_set.as_ref()),
            stamp.is_some(),
            None,
        );
        probes
            .iter()
            .find_map(|p| self.registered(subject, input, |s, v| p.finds(s, v)))
    }

    /// The version a new registration of `input` in `subject` stamps into
    /// its metadata's `confluent:version` (Confluent 7.4+,
    /// `maybeSetMetadataRuleSet`): outside IMPORT mode, when the request
    /// gives a `version` or the metadata it would be stored with (the
    /// request's, else the latest version's, between the configuration's
    /// defaults and overrides) already has the property, the subject's
    /// next version (the highest, soft-deleted ones included, plus one).
    fn version_stamp(
        &self,
        subject: &str,
        input: &SchemaInput,
        metadata: Option<&serde_json::Value>,
    ) -> Option<u32> {
        if self.mode(subject) == RegistryMode::Import
            || (input.version.is_none()
                && !input.next_version
                && confluent_version(metadata).is_none())
        {
            return None;
        }
        let max = self
            .subjects
            .get(subject)
            .and_then(|s| s.versions.keys().next_back().copied())
            .unwrap_or(0);
        Some(max.saturating_add(1))
    }

    /// The look-ups before a registration, in Confluent's order: the schema
    /// as sent (`registerOrForward`'s `lookUpSchemaUnderSubject`, skipped
    /// when a configuration in scope has data-contract defaults or
    /// overrides), then the schema with the metadata and rule set it would
    /// be stored with (`contract`; `register`'s own look-up), unless that
    /// metadata is `stamped` with the new version's `confluent:version`,
    /// which no version of the subject can match. `body`: see [`Probe`].
    fn registration_probes<'a>(
        &self,
        subject: &str,
        schema_type: SchemaType,
        input: &'a SchemaInput,
        contract: (Option<&'a serde_json::Value>, Option<&'a serde_json::Value>),
        stamped: bool,
        body: Option<&str>,
    ) -> Vec<Probe<'a>> {
        let mut probes = Vec::new();
        let probe = |metadata, rule_set| {
            Probe::new(
                schema_type,
                &input.schema,
                body.map(str::to_owned),
                &input.references,
                metadata,
                rule_set,
            )
        };
        if self.contract_in_scope(subject).is_empty() {
            probes.push(probe(input.metadata.as_ref(), input.rule_set.as_ref()));
        }
        if !stamped {
            probes.push(probe(contract.0, contract.1));
        }
        probes
    }

    /// The live version of `subject` whose stored schema `matches` (given
    /// the schema and the version number), as a registration that appends
    /// nothing, when `input` asks for it: without
    /// a version (and with its id, if it gives one), the newest such
    /// version; with a version (an import), that version when it holds the
    /// schema under the id given. This is Confluent's look-up before a
    /// registration, which answers whatever the subject's mode, so that a
    /// producer that registers its schema keeps working on a READONLY
    /// subject and an import can be run again.
    fn registered(
        &self,
        subject: &str,
        input: &SchemaInput,
        matches: impl Fn(&StoredSchema, u32) -> bool,
    ) -> Option<Registration> {
        let s = self.subjects.get(subject)?;
        let (context, _) = split_subject(subject);
        let holds = |v: u32, e: &VersionEntry| {
            !e.deleted
                && self
                    .schema(context, e.id)
                    .is_some_and(|stored| matches(stored, v))
        };
        let (version, entry) = match input.version {
            // `"version": -1`: the latest live version only.
            None if input.next_version => s
                .versions
                .iter()
                .rev()
                .find(|(_, e)| !e.deleted)
                .filter(|(v, e)| holds(**v, e))
                .filter(|(_, e)| input.id.is_none_or(|id| id == e.id))?,
            None => s
                .versions
                .iter()
                .rev()
                .find(|(v, e)| holds(**v, e))
                .filter(|(_, e)| input.id.is_none_or(|id| id == e.id))?,
            Some(v) => s
                .versions
                .get_key_value(&v)
                .filter(|(_, e)| holds(v, e) && input.id == Some(e.id))?,
        };
        Some(Registration {
            id: entry.id,
            version: *version,
            records: Vec::new(),
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
        let schema_type = parse_schema_type(input.schema_type.as_deref())?;
        input.check_contract()?;
        // Before the look-up, as Confluent validates the schema first.
        self.check_field_names(subject, schema_type, &input.schema)?;
        let (metadata, rule_set) = self.effective_contract(subject, input);
        let stamp = self.version_stamp(subject, input, metadata.as_ref());

        // Already registered under the subject, as written: nothing to
        // check or parse (it was valid when registered).
        let probes = |body| {
            self.registration_probes(
                subject,
                schema_type,
                input,
                (metadata.as_ref(), rule_set.as_ref()),
                stamp.is_some(),
                body,
            )
        };
        if let Some(registration) = probes(None)
            .iter()
            .find_map(|p| self.registered(subject, input, |s, v| p.finds(s, v)))
        {
            return Ok(registration);
        }
        let new = Arc::new(self.parse(context, schema_type, &input.schema, &input.references)?);
        let body = key_body(
            schema_type,
            &input.schema,
            self.resolve_references(context, &input.references)
                .ok()
                .as_deref(),
            Some(&new),
        );
        // Or written another way.
        if let Some(registration) = probes(Some(&body))
            .iter()
            .find_map(|p| self.registered(subject, input, |s, v| p.finds(s, v)))
        {
            return Ok(registration);
        }
        // What is stored: the metadata stamped with the new version when
        // Confluent stamps it.
        let metadata = match stamp {
            Some(version) => Some(with_confluent_version(
                metadata.as_ref(),
                &version.to_string(),
            )),
            None => metadata,
        };
        let keys = Keys {
            exact: dedup_key(
                schema_type,
                &input.schema,
                &input.references,
                metadata.as_ref(),
                rule_set.as_ref(),
            ),
            key: hash_key(
                schema_type,
                &body,
                &input.references,
                metadata.as_ref(),
                rule_set.as_ref(),
            ),
            bare: hash_key(schema_type, &body, &input.references, None, None),
        };
        // Not already registered: a schema stored anew, checked as one.
        self.check_new_schema(context, &new, || keys.bare)?;
        let mode = self.check_register_mode(subject, input)?;
        let subject_state = self.subjects.get(subject);
        let space = self.spaces.get(context);
        // An id whose text is this one, else one of the same schema.
        let existing_id = space.and_then(|s| {
            let index = self.id_index(s);
            index
                .exact
                .get(&keys.exact)
                .or_else(|| index.ids.get(&keys.key))
                .copied()
        });

        if mode != RegistryMode::Import {
            let level = self.compatibility(subject);
            let live: Vec<(u32, VersionEntry)> = subject_state
                .map(|s| s.live().rev().collect())
                .unwrap_or_default();
            let validate_fields = self.validate_fields_in_scope(subject);
            let mut details = Vec::new();
            if validate_fields {
                let latest = live.first().and_then(|(_, e)| self.schema(context, e.id));
                details = self.reserved_field_errors(
                    context,
                    &new,
                    &input.schema,
                    &input.references,
                    metadata.as_ref(),
                    latest.map(|s| &**s),
                );
            }
            let live = self.in_compatibility_group(subject, metadata.as_ref(), live);
            let previous = live
                .iter()
                .map(|(_, e)| self.parsed(context, e.id))
                .collect::<Result<Vec<Arc<Schema>>, ApiError>>()?;
            let findings = check(level, &new, &previous);
            details.extend(describe_findings(&findings, &live, level));
            if !details.is_empty() {
                details.push(verdict_settings(validate_fields, level));
                return Err(ApiError::incompatible(incompatible_code, subject, &details));
            }
        }

        let id = match (input.id, existing_id) {
            (Some(wanted), _) => {
                if let Some(stored) = self.schema(context, wanted)
                    && stored.keys().key != keys.key
                {
                    return Err(ApiError::not_permitted(format!(
                        "Overwrite new schema with id {wanted} in context {context} is not permitted: id {wanted} is another schema; import this one under its own id"
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
            (None, None) => space
                .map_or(0, |s| s.max_id)
                .checked_add(1)
                .filter(|id| *id <= MAX_VERSION)
                .ok_or_else(|| ApiError::store("every schema id up to 2^31-1 is taken"))?,
        };
        let max_version = subject_state
            .and_then(|s| s.versions.keys().next_back().copied())
            .unwrap_or(0);
        let version = match input.version {
            // Outside IMPORT an explicit version must be the one the
            // subject would take next (Confluent 7.4+; refused with 42201
            // after the compatibility check, as there).
            Some(v) if mode != RegistryMode::Import => {
                let next = max_version + 1;
                if next > MAX_VERSION {
                    return Err(ApiError::invalid_version("2^31"));
                }
                if v != next {
                    let at = match max_version {
                        0 => "has no versions".to_owned(),
                        n => format!("is at version {n}"),
                    };
                    return Err(ApiError::invalid_schema(format!(
                        "Version is not one more than previous version: subject '{subject}' {at}, and \"version\": {v} was given; give \"version\": {next}, or leave \"version\" out"
                    )));
                }
                v
            }
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
        // An id already stored keeps its text and references, so that every
        // record of an id holds the same schema.
        let (text, references) = match self.schema(context, id) {
            Some(stored) => (stored.text.clone(), stored.references.clone()),
            None => {
                let normalize = input.normalize || self.normalize_in_scope(subject);
                (
                    self.stored_text(context, schema_type, input, &new, normalize),
                    input.references.clone(),
                )
            }
        };
        let value = SchemaValue {
            subject: subject.to_owned(),
            version,
            id,
            schema: text,
            schema_type: schema_type_field(schema_type).map(str::to_owned),
            references,
            metadata,
            rule_set,
            deleted: false,
            ts: Some(now_millis()),
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
        // Older soft-deleted versions of the same id go for good, as in
        // Confluent: the subject then lists the schema once, as the new
        // version. Not one that a schema (soft-deleted ones included)
        // still references: references name a subject and version, and
        // Confluent's `register` (KafkaSchemaRegistry) skips those too.
        for (old, entry) in subject_state.iter().flat_map(|s| s.versions.iter()) {
            if entry.deleted
                && entry.id == id
                && *old < version
                && self.referenced_by(subject, *old, true).is_empty()
            {
                records.push(Record {
                    key: Key::Schema {
                        subject: subject.to_owned(),
                        version: *old,
                    },
                    value: None,
                });
            }
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

    /// Refuses an import (records read from an export, appended as they
    /// are) that gives an id to another schema than the one the id names:
    /// here, in the record's context (live, soft-deleted or permanently
    /// deleted: an id is never given to another schema), or in an earlier
    /// record of the same import. Replayed, such a record would leave its
    /// version serving the schema the id already had (an id keeps its
    /// first schema), so the subject would answer another schema than the
    /// one exported. The same schema written another way is the same id.
    pub fn check_import(&self, records: &[Record]) -> Result<(), ApiError> {
        // A record's schema type, its exact key, and (computed only when the
        // exact keys differ) its normalized key.
        let type_of = |v: &SchemaValue| {
            parse_schema_type(v.schema_type.as_deref()).unwrap_or(SchemaType::Avro)
        };
        let exact = |v: &SchemaValue| {
            dedup_key(
                type_of(v),
                &v.schema,
                &v.references,
                v.metadata.as_ref(),
                v.rule_set.as_ref(),
            )
        };
        let normalized = |context: &str, v: &SchemaValue| {
            self.keys(
                context,
                type_of(v),
                &v.schema,
                &v.references,
                v.metadata.as_ref(),
                v.rule_set.as_ref(),
                None,
            )
            .key
        };
        let mut imported: HashMap<(&str, u32), &SchemaValue> = HashMap::new();
        for record in records {
            let Some(Value::Schema(v)) = &record.value else {
                continue;
            };
            let (context, _) = split_subject(&v.subject);
            let same = match (self.schema(context, v.id), imported.get(&(context, v.id))) {
                (Some(stored), _) => {
                    stored.schema_type == type_of(v)
                        && (stored.exact_key() == exact(v)
                            || stored.keys().key == normalized(context, v))
                }
                (None, Some(first)) => {
                    type_of(first) == type_of(v)
                        && (exact(first) == exact(v)
                            || normalized(context, first) == normalized(context, v))
                }
                (None, None) => {
                    imported.insert((context, v.id), v);
                    true
                }
            };
            if !same {
                let (holder, way_out) = match self.schema(context, v.id) {
                    Some(_) => ("this registry", "import into an empty store"),
                    None => (
                        "an earlier record of the export",
                        "give one of them another id in the export",
                    ),
                };
                return Err(ApiError::not_permitted(format!(
                    "subject '{}' version {} gives id {} in context {context} to another schema than {holder} holds under that id; nothing was imported: {way_out}",
                    v.subject, v.version, v.id
                )));
            }
        }
        Ok(())
    }

    /// The versions among `versions` that a schema with `metadata` is
    /// checked against: with a `compatibilityGroup` in scope, those whose
    /// metadata property of that name has the same value (or is absent
    /// alike), as Confluent checks; all of them otherwise.
    fn in_compatibility_group(
        &self,
        subject: &str,
        metadata: Option<&serde_json::Value>,
        versions: Vec<(u32, VersionEntry)>,
    ) -> Vec<(u32, VersionEntry)> {
        let Some(group) = self.settings_in_scope(subject).compatibility_group else {
            return versions;
        };
        let value = |m: Option<&serde_json::Value>| {
            m.and_then(|m| m.get("properties"))
                .and_then(|p| p.get(&group))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let wanted = value(metadata);
        let (context, _) = split_subject(canonical_subject(subject));
        versions
            .into_iter()
            .filter(|(_, e)| {
                value(self.schema(context, e.id).and_then(|s| s.metadata.as_ref())) == wanted
            })
            .collect()
    }

    /// `POST /subjects/{subject}`: the version of `subject` that holds this
    /// schema, however it is written (see [`State::keys`]).
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
        let parsed = self.parse(context, schema_type, &input.schema, &input.references)?;
        self.check_field_names(subject, schema_type, &input.schema)?;
        input.check_contract()?;
        let body = key_body(
            schema_type,
            &input.schema,
            self.resolve_references(context, &input.references)
                .ok()
                .as_deref(),
            Some(&parsed),
        );
        let find = |matches: &dyn Fn(&StoredSchema, u32) -> bool| {
            s.versions.iter().rev().find(|(v, e)| {
                (deleted || !e.deleted)
                    && self
                        .schema(context, e.id)
                        .is_some_and(|stored| matches(stored, **v))
            })
        };
        // As Confluent's canLookup: a confluent:version on one side only
        // does not count (see [`Probe`]).
        let probe = Probe::new(
            schema_type,
            &input.schema,
            Some(body.clone()),
            &input.references,
            input.metadata.as_ref(),
            input.rule_set.as_ref(),
        );
        if let Some((v, e)) = find(&|stored, v| probe.finds(stored, v)) {
            return Ok((e.id, *v));
        }
        // Without a data contract in the request, the newest version of
        // the same schema, whatever its metadata and rules.
        let bare = hash_key(schema_type, &body, &input.references, None, None);
        if input.metadata.is_none()
            && input.rule_set.is_none()
            && let Some((v, e)) = find(&|stored, _| stored.keys().bare == bare)
        {
            return Ok((e.id, *v));
        }
        // Not found: 42201 for a schema Confluent would not take, as its
        // look-up parses the schema first (a stored one is found above).
        self.check_new_schema(context, &parsed, || bare)?;
        Err(ApiError::schema_not_found("(the one given)"))
    }

    /// `POST /compatibility/subjects/{subject}/versions[/{version}]`: every
    /// incompatibility, as sentences. With a version, the check runs
    /// against that version only (in the level's directions); without, as
    /// registration would. A subject without versions has nothing to be
    /// incompatible with, for `latest` too (as Confluent 6.1+ answers);
    /// a version number it does not have is 40402.
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
        let subject_state = self.subjects.get(subject);
        let against: Vec<(u32, VersionEntry)> = match version {
            Some(VersionSpec::Latest) => subject_state
                .and_then(Subject::latest_live)
                .into_iter()
                .collect(),
            Some(VersionSpec::Number(n)) => {
                match subject_state.and_then(|s| s.versions.get(&n).filter(|e| !e.deleted)) {
                    Some(e) => vec![(n, *e)],
                    None => return Err(ApiError::version_not_found(subject, n)),
                }
            }
            None => subject_state
                .map(|s| s.live().rev().collect())
                .unwrap_or_default(),
        };
        let (metadata, _) = self.effective_contract(subject, input);
        let new = Arc::new(self.parse(context, schema_type, &input.schema, &input.references)?);
        // As registration would answer: a schema the context stores is
        // not refused for what only new ones are.
        self.check_new_schema(context, &new, || {
            let resolved = self.resolve_references(context, &input.references).ok();
            let body = key_body(schema_type, &input.schema, resolved.as_deref(), Some(&new));
            hash_key(schema_type, &body, &input.references, None, None)
        })?;
        self.check_field_names(subject, schema_type, &input.schema)?;
        let validate_fields = self.validate_fields_in_scope(subject);
        let mut messages = Vec::new();
        if validate_fields {
            // The newest of the versions checked against.
            let latest = against
                .first()
                .and_then(|(_, e)| self.schema(context, e.id));
            messages = self.reserved_field_errors(
                context,
                &new,
                &input.schema,
                &input.references,
                metadata.as_ref(),
                latest.map(|s| &**s),
            );
        }
        let against = self.in_compatibility_group(subject, metadata.as_ref(), against);
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
        messages.extend(describe_findings(&findings, &against, level));
        if !messages.is_empty() {
            messages.push(verdict_settings(validate_fields, level));
        }
        Ok(messages)
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
        self.check_writable(subject)?;
        // As Confluent's `deleteSubject` (KafkaSchemaRegistry), version by
        // version, oldest first: a version another subject references
        // (`getReferencedBySubjects(key, permanentDelete)`, the subject's
        // own versions left out; soft-deleted referrers count for a
        // permanent delete) is 42206, and for a permanent delete a live
        // one is 40405. A soft delete looks at the live versions only.
        for (v, e) in &s.versions {
            if !permanent && e.deleted {
                continue;
            }
            let by: BTreeSet<u32> = self
                .referrers(subject, *v, permanent)
                .into_iter()
                .filter(|(name, _)| *name != subject)
                .map(|(_, id)| id)
                .collect();
            if !by.is_empty() {
                let by: Vec<u32> = by.into_iter().collect();
                return Err(ApiError::reference_exists(subject, *v, &by));
            }
            if permanent && !e.deleted {
                return Err(ApiError::subject_not_soft_deleted(subject));
            }
        }
        if permanent {
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
        self.check_writable(subject)?;
        // `latest` is the newest live version, permanent or not, as
        // Confluent's `validateDeleteSchemaVersion` finds it (`get(subject,
        // -1, true)` is `getLatestVersion`): a permanent delete of
        // `latest` is 40407 unless the version is referenced.
        let (version, entry) = match spec {
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
        if !permanent && entry.deleted {
            return Err(ApiError::version_soft_deleted(subject, version));
        }
        // As Confluent's `deleteSchemaVersion` (KafkaSchemaRegistry): the
        // references are checked first, `getReferencedBy(key,
        // permanentDelete)`, so a permanent delete also counts the
        // referrers that are soft-deleted (they can be restored by
        // registering them again, and would then name a version that is
        // gone), and a referenced version is 42206 before it is 40407.
        let by = self.referenced_by(subject, version, permanent);
        if !by.is_empty() {
            return Err(ApiError::reference_exists(subject, version, &by));
        }
        if permanent {
            if !entry.deleted {
                return Err(ApiError::version_not_soft_deleted(subject, version));
            }
            return Ok((version, vec![Record { key, value: None }]));
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
            // The registration time stays (Confluent shows the soft
            // delete's record time instead: see the README).
            ts: entry.ts,
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
        update: &ConfigUpdate,
    ) -> Result<(ConfigValue, Vec<Record>), ApiError> {
        // `:.:` is the default context: the global setting.
        let subject = subject.map(canonical_subject).filter(|s| !s.is_empty());
        if let Some(s) = subject {
            validate_subject(s)?;
        }
        if let Some(Some(alias)) = &update.alias {
            validate_subject(alias).map_err(|e| {
                ApiError::invalid_subject(format!("Invalid \"alias\": {}", e.message))
            })?;
        }
        let empty = ConfigSettings::default();
        let (old_level, old_contract, old_settings) = match subject {
            None => (self.compatibility, &self.contract, &self.settings),
            Some(s) => match self.subjects.get(s) {
                Some(state) => (state.compatibility, &state.contract, &state.settings),
                None => (None, &ContractConfig::EMPTY, &empty),
            },
        };
        let config = ConfigValue {
            compatibility: update.compatibility.or(old_level),
            contract: old_contract.updated_with(&update.contract),
            settings: update.settings_over(old_settings),
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

    /// `DELETE /config[/{subject}]`: the configuration it had (a subject's
    /// without a level of its own shows the global level). A subject
    /// without a configuration of its own is 40401, as in Confluent.
    pub fn delete_compatibility(
        &self,
        subject: Option<&str>,
    ) -> Result<(ConfigValue, Vec<Record>), ApiError> {
        // `:.:` is the default context: the global setting.
        let subject = subject.map(canonical_subject).filter(|s| !s.is_empty());
        let old = match subject {
            None => self.global_config(),
            Some(s) => match self.subject_config(s) {
                Some(mut config) => {
                    config.compatibility = config
                        .compatibility
                        .or_else(|| Some(self.global_compatibility()));
                    config
                }
                None => return Err(ApiError::no_subject_config(s)),
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
            // No mode of its own is 40401, as in Confluent.
            Some(s) => self
                .subjects
                .get(s)
                .and_then(|state| state.mode)
                .ok_or_else(|| ApiError::no_subject_mode(s))?,
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

/// The last detail of an incompatible verdict, as Confluent 7.5+ adds
/// it: `{validateFields: 'false', compatibility: 'BACKWARD'}`.
fn verdict_settings(validate_fields: bool, level: Mode) -> String {
    format!(
        "{{validateFields: '{validate_fields}', compatibility: '{}'}}",
        level.as_str()
    )
}

/// The metadata property whose value, a comma-separated list, names the
/// fields a schema reserves (Confluent's `ParsedSchema.RESERVED`).
pub const RESERVED_FIELDS_PROPERTY: &str = "confluent:reserved";

/// The names `metadata` reserves (see [`RESERVED_FIELDS_PROPERTY`]).
fn reserved_fields(metadata: Option<&serde_json::Value>) -> BTreeSet<String> {
    metadata
        .and_then(|m| m.get("properties"))
        .and_then(|p| p.get(RESERVED_FIELDS_PROPERTY))
        .and_then(serde_json::Value::as_str)
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The top-level field names of a schema, as Confluent's
/// `hasTopLevelField` sees them: an Avro record's fields (a top-level name
/// of a record from `references` counts as that record), the keys of a
/// JSON Schema's top-level `properties`, the fields of a Protobuf file's
/// top-level messages outside a `oneof`.
fn top_level_fields(
    schema: &Schema,
    text: &str,
    references: impl FnOnce() -> Vec<Reference>,
) -> BTreeSet<String> {
    let names = |fields: Option<&serde_json::Value>| -> BTreeSet<String> {
        fields
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("name")?.as_str().map(str::to_owned))
            .collect()
    };
    match schema {
        Schema::Avro(_) => {
            let Ok(root) = serde_json::from_str::<serde_json::Value>(text) else {
                return BTreeSet::new();
            };
            let named = match &root {
                serde_json::Value::String(name) => Some(name.clone()),
                serde_json::Value::Object(o) => match o.get("type").and_then(|t| t.as_str()) {
                    Some("record" | "error") => return names(o.get("fields")),
                    Some(name) => Some(name.to_owned()),
                    None => None,
                },
                _ => None,
            };
            let Some(named) = named else {
                return BTreeSet::new();
            };
            references()
                .iter()
                .filter_map(|r| serde_json::from_str::<serde_json::Value>(&r.schema).ok())
                .find(|r| avro_full_name(r).as_deref() == Some(named.as_str()))
                .map(|record| names(record.get("fields")))
                .unwrap_or_default()
        }
        Schema::Json(_) => serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|root| {
                Some(
                    root.get("properties")?
                        .as_object()?
                        .keys()
                        .cloned()
                        .collect(),
                )
            })
            .unwrap_or_default(),
        Schema::Protobuf(p) => p
            .file()
            .messages()
            .flat_map(|message| {
                message
                    .fields()
                    .filter(|f| f.containing_oneof().is_none_or(|o| o.is_synthetic()))
                    .map(|f| f.name().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect(),
    }
}

/// The full name of a record defined at the top of an Avro text.
fn avro_full_name(schema: &serde_json::Value) -> Option<String> {
    if !matches!(schema.get("type")?.as_str()?, "record" | "error") {
        return None;
    }
    let name = schema.get("name")?.as_str()?;
    Some(match schema.get("namespace").and_then(|n| n.as_str()) {
        Some(namespace) if !name.contains('.') && !namespace.is_empty() => {
            format!("{namespace}.{name}")
        }
        _ => name.to_owned(),
    })
}

/// The first top-level property of a JSON Schema whose name starts with
/// `$$`, when Confluent's JSON Schema library loads the root as an
/// `ObjectSchema`, the only case `JsonSchema.validate(strict)` checks
/// (json-schema-provider/.../json/JsonSchema.java).
fn reserved_json_property(text: &str) -> Option<String> {
    let root: serde_json::Value = serde_json::from_str(text).ok()?;
    let object = root.as_object()?;
    if !loads_as_object_schema(object) {
        return None;
    }
    object
        .get("properties")?
        .as_object()?
        .keys()
        .find(|name| name.starts_with("$$"))
        .cloned()
}

/// Whether Confluent loads the JSON Schema object `schema` as an
/// `ObjectSchema`. Confluent loads drafts 2019-09 and 2020-12 (its
/// `SpecificationVersion.getFromUrl` of `$schema`, a trailing `#`
/// ignored) with json-sKema and translates the result
/// (`SchemaTranslator`); every other schema with Everit's `SchemaLoader`
/// (draft 7 unless `$schema` names draft 4 or 6).
fn loads_as_object_schema(schema: &serde_json::Map<String, serde_json::Value>) -> bool {
    let dialect = schema
        .get("$schema")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let url = dialect.strip_suffix('#').unwrap_or(dialect);
    let modern = ["http", "https"].iter().any(|scheme| {
        [
            "://json-schema.org/draft/2019-09/schema",
            "://json-schema.org/draft/2020-12/schema",
        ]
        .iter()
        .any(|rest| url == format!("{scheme}{rest}"))
    });
    if modern {
        translated_as_object_schema(schema)
    } else {
        everit_object_schema(schema, dialect)
    }
}

/// Everit's `SchemaLoader.loadSchemaObject`: a `$ref` makes the schema a
/// reference whatever else it has; otherwise each extractor in turn
/// (`enum`; `allOf`, `anyOf`, `oneOf` one each; `not`; `const` after
/// draft 4; `type`, whose object, array, number and string types take
/// their keywords; then the keywords no type took, sniffed by kind, and
/// `if`/`then`/`else` from draft 7) adds a schema, and the root is the
/// one schema added, or an `allOf` of several. It is an `ObjectSchema`
/// when exactly one schema is added and it is one: `"type": "object"`,
/// or object keywords without a `type`.
fn everit_object_schema(
    schema: &serde_json::Map<String, serde_json::Value>,
    dialect: &str,
) -> bool {
    if schema.contains_key("$ref") {
        return false;
    }
    // Everit's SpecificationVersion.lookupByMetaSchemaUrl (a prefix), else
    // the draft 7 Confluent asks for (`draftV7Support`).
    let draft = [("draft-04", 4), ("draft-06", 6), ("draft-07", 7)]
        .iter()
        .find(|(name, _)| {
            ["http", "https"].iter().any(|scheme| {
                dialect.starts_with(&format!("{scheme}://json-schema.org/{name}/schema"))
            })
        })
        .map_or(7, |(_, n)| *n);
    let mut object_keywords = vec![
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "dependencies",
        "patternProperties",
        "additionalProperties",
    ];
    let mut array_keywords = vec![
        "items",
        "additionalItems",
        "minItems",
        "maxItems",
        "uniqueItems",
    ];
    if draft >= 6 {
        object_keywords.push("propertyNames");
        array_keywords.push("contains");
    }
    let number_keywords = [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ];
    let string_keywords = ["minLength", "maxLength", "pattern", "format"];
    let has = |k: &str| schema.contains_key(k);

    let mut others = 0;
    let mut objects = 0;
    others += ["enum", "allOf", "anyOf", "oneOf", "not"]
        .iter()
        .filter(|k| has(k))
        .count();
    if draft > 4 && has("const") {
        others += 1;
    }
    // The kinds `type` names take their keywords from the sniffer.
    let mut taken: Vec<&str> = Vec::new();
    match schema.get("type") {
        None => {}
        Some(serde_json::Value::String(t)) => {
            if t == "object" {
                objects += 1;
            } else {
                others += 1;
            }
            taken.push(t);
        }
        Some(serde_json::Value::Array(types)) => {
            // An anyOf of the types.
            others += 1;
            taken.extend(types.iter().filter_map(serde_json::Value::as_str));
        }
        // Not a type Everit loads: the schema is refused before this.
        Some(_) => return false,
    }
    let sniffed = |kind: &[&str], keywords: &[&str]| {
        !kind.iter().any(|k| taken.contains(k)) && keywords.iter().any(|k| has(k))
    };
    if sniffed(&["array"], &array_keywords) {
        others += 1;
    }
    if sniffed(&["object"], &object_keywords) {
        objects += 1;
    }
    if sniffed(&["integer", "number"], &number_keywords) {
        others += 1;
    }
    if sniffed(&["string"], &string_keywords) {
        others += 1;
    }
    if draft >= 7 && ["if", "then", "else"].iter().any(|k| has(k)) {
        others += 1;
    }
    objects == 1 && others == 0
}

/// Confluent's `SchemaTranslator` over a json-sKema schema (2019-09,
/// 2020-12): each keyword that validates becomes an Everit schema, object
/// keywords an `ObjectSchema` each, merged into one; anything else joins
/// them in a generated `allOf`. The root is an `ObjectSchema` when every
/// keyword that validates is an object one (`format`, `readOnly` and
/// `writeOnly` are ignored; annotations and unknown keywords are not
/// schemas).
fn translated_as_object_schema(schema: &serde_json::Map<String, serde_json::Value>) -> bool {
    const OBJECT: [&str; 10] = [
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
    ];
    const OTHER: [&str; 30] = [
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "enum",
        "const",
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "minContains",
        "maxContains",
        "minItems",
        "maxItems",
        "uniqueItems",
        "unevaluatedItems",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ];
    let mut objects = OBJECT.iter().filter(|k| schema.contains_key(**k)).count();
    match schema.get("type") {
        None => {}
        Some(serde_json::Value::String(t)) if t == "object" => objects += 1,
        Some(_) => return false,
    }
    objects > 0 && !OTHER.iter().any(|k| schema.contains_key(*k))
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    /// `$$` properties are refused exactly when Confluent loads the root
    /// as an `ObjectSchema` (Everit's extractors; json-sKema and
    /// `SchemaTranslator` for 2019-09 and 2020-12).
    #[test]
    fn dollar_properties_count_only_in_what_confluent_loads_as_an_object_schema() {
        let d7 = "http://json-schema.org/draft-07/schema#";
        let d6 = "http://json-schema.org/draft-06/schema#";
        let d4 = "http://json-schema.org/draft-04/schema#";
        let d2020 = "https://json-schema.org/draft/2020-12/schema";
        let cases: &[(serde_json::Value, bool)] = &[
            (json!({"type": "object"}), true),
            (json!({}), true),
            (json!({"title": "t", "description": "d", "$id": "x"}), true),
            (json!({"required": ["a"]}), true),
            (json!({"type": "object", "$schema": d7}), true),
            // Anything that adds a schema beside the object one makes an
            // allOf (Everit's loadSchemaObject).
            (json!({"minLength": 1}), false),
            (json!({"format": "email"}), false),
            (json!({"type": "object", "enum": [{}]}), false),
            (json!({"type": "object", "not": {"required": ["x"]}}), false),
            (json!({"type": "object", "const": {}}), false),
            (json!({"type": "object", "const": {}, "$schema": d4}), true),
            (json!({"type": "object", "if": {}, "then": {}}), false),
            (json!({"type": "object", "if": {}, "$schema": d6}), true),
            (json!({"type": "object", "items": {}}), false),
            (json!({"type": "object", "allOf": [{}]}), false),
            (json!({"type": "object", "$ref": "#/definitions/x"}), false),
            (json!({"type": ["object"]}), false),
            (json!({"type": ["object", "null"]}), false),
            (json!({"type": "string"}), false),
            (json!({"type": "integer", "minimum": 1}), false),
            // The type's kind takes its keywords from the sniffer.
            (
                json!({"type": "object", "additionalProperties": false}),
                true,
            ),
            (json!({"type": "string", "propertyNames": {}}), false),
            // Draft 2020-12: format and readOnly are ignored, annotations
            // are not schemas, other keywords join an allOf.
            (
                json!({"$schema": d2020, "type": "object", "format": "x", "readOnly": true}),
                true,
            ),
            (
                json!({"$schema": d2020, "properties": {}, "dependentRequired": {}}),
                true,
            ),
            (
                json!({"$schema": format!("{d2020}#"), "type": "object", "minLength": 1}),
                false,
            ),
            (
                json!({"$schema": d2020, "type": "object", "$ref": "#/$defs/x"}),
                false,
            ),
            (
                json!({"$schema": d2020, "title": "t", "examples": [{}], "x-custom": 1}),
                true,
            ),
        ];
        for (schema, refused) in cases {
            let mut schema = schema.clone();
            let object = schema.as_object_mut().expect("object");
            let properties = object
                .entry("properties")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("properties");
            properties.insert("ok".into(), json!({}));
            properties.insert("$$meta".into(), json!({}));
            let found = reserved_json_property(&schema.to_string());
            assert_eq!(found.as_deref(), refused.then_some("$$meta"), "{schema}");
        }
    }

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

    fn schema_record(
        subject: &str,
        id: u32,
        schema: &str,
        references: Vec<SchemaReference>,
    ) -> Record {
        Record {
            key: Key::Schema {
                subject: subject.into(),
                version: 1,
            },
            value: Some(Value::Schema(SchemaValue {
                subject: subject.into(),
                version: 1,
                id,
                schema: schema.into(),
                schema_type: None,
                references,
                metadata: None,
                rule_set: None,
                deleted: false,
                ts: None,
            })),
        }
    }

    #[test]
    fn keys_are_computed_when_first_needed_and_found_in_read_order() {
        let mut state = State::new();
        let money = r#"{"type":"record","name":"Money","fields":[{"name":"cents","type":"long"}]}"#;
        let order =
            r#"{"type":"record","name":"Order","fields":[{"name":"total","type":"Money"}]}"#;
        let reference = SchemaReference {
            name: "Money".into(),
            subject: "money".into(),
            version: 1,
        };
        // Ids 2 and 3 are one schema written two ways.
        state.apply(1, &schema_record("money", 1, money, Vec::new()));
        state.apply(
            2,
            &schema_record("a", 2, r#"{"type":"string"}"#, Vec::new()),
        );
        state.apply(3, &schema_record("b", 3, r#""string""#, Vec::new()));
        state.apply(
            4,
            &schema_record("order", 4, order, vec![reference.clone()]),
        );
        assert_eq!(state.take_uncomputed().len(), 3);
        let stored = |id| Arc::clone(state.schema(DEFAULT_CONTEXT, id).expect("stored"));
        // Replay computed the keys of the schema with references only.
        assert!(!stored(1).keys_computed() && !stored(2).keys_computed());
        assert!(stored(4).keys_computed());
        // Computed later, they are what they would have been then.
        for id in 1..=4 {
            let s = stored(id);
            let eager = state.keys(
                DEFAULT_CONTEXT,
                s.schema_type,
                &s.text,
                &s.references,
                None,
                None,
                None,
            );
            assert_eq!(s.keys(), eager, "id {id}");
        }
        assert_eq!(stored(2).keys().key, stored(3).keys().key);
        // The first id read of a schema is the one found.
        assert_eq!(state.id_of(DEFAULT_CONTEXT, &stored(3).keys().key), Some(2));
        let order_key = stored(4).keys().key;
        assert_eq!(state.id_of(DEFAULT_CONTEXT, &order_key), Some(4));
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
