//! The registry's log records, in the format of Confluent Schema Registry's
//! `_schemas` topic, so that a Confluent or Karapace export can be imported
//! and the Kafka store ([`crate::kafka`]) reads and writes the same records.
//!
//! A record is a key and a value, both JSON; a `null` value is a tombstone
//! (a permanent delete of what the key names). Keys:
//! `{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}`,
//! `{"keytype":"CONFIG","subject":null,"magic":0}`,
//! `{"keytype":"MODE","subject":"s","magic":0}`,
//! `{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}`,
//! `{"keytype":"CLEAR_SUBJECT","subject":"s","magic":0}`,
//! `{"keytype":"CONTEXT","tenant":"default","context":".ctx","magic":0}`,
//! `{"keytype":"NOOP","magic":0}`.
//!
//! A subject of a context other than the default one is qualified in
//! every record: `:.ctx:subject`, as Confluent writes it.

use serde::{Deserialize, Serialize};

use evolve_compat::Mode;

use crate::contract::ContractConfig;

/// What a record is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Schema {
        subject: String,
        version: u32,
    },
    /// Compatibility level; `None` is the global one.
    Config {
        subject: Option<String>,
    },
    /// Registry mode; `None` is the global one.
    Mode {
        subject: Option<String>,
    },
    DeleteSubject {
        subject: String,
    },
    ClearSubject {
        subject: String,
    },
    /// A context (`.ctx`) that holds subjects.
    Context {
        context: String,
    },
    Noop,
}

/// One version of a subject, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaValue {
    pub subject: String,
    pub version: u32,
    pub id: u32,
    pub schema: String,
    /// `AVRO` when absent, as in Confluent's records.
    #[serde(
        rename = "schemaType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub schema_type: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<SchemaReference>,
    /// The data contract's metadata, as registered (Confluent's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// The data contract's rules, as registered; stored, not executed.
    #[serde(rename = "ruleSet", default, skip_serializing_if = "Option::is_none")]
    pub rule_set: Option<serde_json::Value>,
    #[serde(default)]
    pub deleted: bool,
    /// When the version was registered, in milliseconds since the Unix
    /// epoch: Confluent 8.0+'s `ts` (`SchemaRegistryValue.getTimestamp`,
    /// the Kafka timestamp of the version's record). evolve writes it into
    /// the record's value; records written before it, and Confluent's
    /// (which carry no `ts` in their value), have none, unless the Kafka
    /// store reads them, which then takes the record's Kafka timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<i64>,
}

/// A configuration: the compatibility level, the data-contract defaults
/// and overrides and the other settings, each optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigValue {
    pub compatibility: Option<Mode>,
    pub contract: ContractConfig,
    pub settings: ConfigSettings,
}

impl From<Mode> for ConfigValue {
    fn from(level: Mode) -> ConfigValue {
        ConfigValue {
            compatibility: Some(level),
            ..ConfigValue::default()
        }
    }
}

/// The settings Confluent 7.4.1 added to a configuration, in its field
/// names: `alias` (the subject whose schemas a subject's reads and writes
/// go to), `normalize` (registrations and lookups normalize as with
/// `?normalize=true`), `validateFields`, `validateRules` and
/// `compatibilityGroup` (the metadata property whose value splits a
/// subject's versions into groups checked separately).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validate_fields: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validate_rules: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility_group: Option<String>,
}

impl ConfigSettings {
    pub fn is_empty(&self) -> bool {
        *self == ConfigSettings::default()
    }

    /// Each setting's own value where it has one, else `fallback`'s.
    pub fn or(&self, fallback: &ConfigSettings) -> ConfigSettings {
        ConfigSettings {
            alias: self.alias.clone().or_else(|| fallback.alias.clone()),
            normalize: self.normalize.or(fallback.normalize),
            validate_fields: self.validate_fields.or(fallback.validate_fields),
            validate_rules: self.validate_rules.or(fallback.validate_rules),
            compatibility_group: self
                .compatibility_group
                .clone()
                .or_else(|| fallback.compatibility_group.clone()),
        }
    }
}

/// A reference from one schema to a version of another subject.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchemaReference {
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// A record's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Schema(SchemaValue),
    Config(ConfigValue),
    Mode(RegistryMode),
    /// Soft-deletes every version of `subject` up to `version`.
    DeleteSubject {
        subject: String,
        version: u32,
    },
    /// Permanently deletes every soft-deleted version of `subject` up to
    /// `version`.
    ClearSubject {
        subject: String,
        version: u32,
    },
    Context,
    Noop,
}

/// A key and its value; `value: None` is a tombstone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub key: Key,
    pub value: Option<Value>,
}

/// What writes a subject (or the registry) accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RegistryMode {
    /// Normal operation.
    Readwrite,
    /// Refuses every write.
    Readonly,
    /// Refuses every write, except a mode change.
    ReadonlyOverride,
    /// Accepts registrations with an explicit id and version, without
    /// compatibility checks, to copy another registry's content.
    Import,
}

impl RegistryMode {
    pub const ALL: [RegistryMode; 4] = [
        RegistryMode::Readwrite,
        RegistryMode::Readonly,
        RegistryMode::ReadonlyOverride,
        RegistryMode::Import,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RegistryMode::Readwrite => "READWRITE",
            RegistryMode::Readonly => "READONLY",
            RegistryMode::ReadonlyOverride => "READONLY_OVERRIDE",
            RegistryMode::Import => "IMPORT",
        }
    }

    pub fn parse(text: &str) -> Option<RegistryMode> {
        let wanted = text.trim().to_ascii_uppercase();
        RegistryMode::ALL.into_iter().find(|m| m.as_str() == wanted)
    }
}

/// A record that cannot be read: which part, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RecordError(pub String);

#[derive(Serialize, Deserialize)]
struct RawKey {
    keytype: String,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context: Option<String>,
    #[serde(default)]
    magic: u32,
}

/// A CONTEXT key, as Confluent writes it (no subject).
#[derive(Serialize)]
struct RawContextKey<'a> {
    keytype: &'a str,
    tenant: &'a str,
    context: &'a str,
    magic: u32,
}

/// Confluent's tenant of a registry without tenants.
const DEFAULT_TENANT: &str = "default";

#[derive(Serialize, Deserialize)]
struct RawContext {
    tenant: String,
    context: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    #[serde(flatten)]
    settings: ConfigSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compatibility_level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_metadata: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    override_metadata: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_rule_set: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    override_rule_set: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize)]
struct RawMode {
    mode: String,
}

#[derive(Serialize, Deserialize)]
struct RawDelete {
    subject: String,
    version: u32,
}

impl Key {
    /// The key's JSON text, as Confluent writes it.
    pub fn to_json(&self) -> String {
        if let Key::Context { context } = self {
            return serde_json::to_string(&RawContextKey {
                keytype: "CONTEXT",
                tenant: DEFAULT_TENANT,
                context,
                magic: 0,
            })
            .unwrap_or_default();
        }
        let (keytype, subject, version, magic) = match self {
            Key::Schema { subject, version } => {
                ("SCHEMA", Some(subject.clone()), Some(*version), 1)
            }
            Key::Config { subject } => ("CONFIG", subject.clone(), None, 0),
            Key::Mode { subject } => ("MODE", subject.clone(), None, 0),
            Key::DeleteSubject { subject } => ("DELETE_SUBJECT", Some(subject.clone()), None, 0),
            Key::ClearSubject { subject } => ("CLEAR_SUBJECT", Some(subject.clone()), None, 0),
            Key::Context { .. } | Key::Noop => ("NOOP", None, None, 0),
        };
        serde_json::to_string(&RawKey {
            keytype: keytype.to_owned(),
            subject,
            version,
            context: None,
            magic,
        })
        .unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Result<Key, RecordError> {
        let raw: RawKey = serde_json::from_str(text)
            .map_err(|e| RecordError(format!("record key {text:?} is not a key: {e}")))?;
        let subject = || {
            raw.subject
                .clone()
                .ok_or_else(|| RecordError(format!("record key {text:?} has no subject")))
        };
        Ok(match raw.keytype.as_str() {
            "SCHEMA" => Key::Schema {
                subject: subject()?,
                version: raw
                    .version
                    .ok_or_else(|| RecordError(format!("record key {text:?} has no version")))?,
            },
            "CONFIG" => Key::Config {
                subject: raw.subject,
            },
            "MODE" => Key::Mode {
                subject: raw.subject,
            },
            "DELETE_SUBJECT" => Key::DeleteSubject {
                subject: subject()?,
            },
            "CLEAR_SUBJECT" => Key::ClearSubject {
                subject: subject()?,
            },
            "CONTEXT" => Key::Context {
                context: raw
                    .context
                    .clone()
                    .ok_or_else(|| RecordError(format!("record key {text:?} has no context")))?,
            },
            "NOOP" => Key::Noop,
            other => {
                return Err(RecordError(format!(
                    "record key {text:?} has an unknown keytype {other:?}"
                )));
            }
        })
    }
}

impl Record {
    /// The value's JSON text; `None` for a tombstone.
    pub fn value_json(&self) -> Option<String> {
        let value = self.value.as_ref()?;
        Some(match value {
            Value::Schema(v) => serde_json::to_string(v).unwrap_or_default(),
            Value::Config(config) => serde_json::to_string(&RawConfig {
                settings: config.settings.clone(),
                compatibility_level: config.compatibility.map(|m| m.as_str().to_owned()),
                default_metadata: config.contract.default_metadata.clone(),
                override_metadata: config.contract.override_metadata.clone(),
                default_rule_set: config.contract.default_rule_set.clone(),
                override_rule_set: config.contract.override_rule_set.clone(),
            })
            .unwrap_or_default(),
            Value::Mode(mode) => serde_json::to_string(&RawMode {
                mode: mode.as_str().to_owned(),
            })
            .unwrap_or_default(),
            Value::DeleteSubject { subject, version }
            | Value::ClearSubject { subject, version } => serde_json::to_string(&RawDelete {
                subject: subject.clone(),
                version: *version,
            })
            .unwrap_or_default(),
            Value::Context => {
                let context = match &self.key {
                    Key::Context { context } => context.clone(),
                    _ => String::new(),
                };
                serde_json::to_string(&RawContext {
                    tenant: DEFAULT_TENANT.to_owned(),
                    context,
                })
                .unwrap_or_default()
            }
            Value::Noop => "{}".to_owned(),
        })
    }

    /// Reads a record from its key and value texts (`None` or `"null"` for
    /// a tombstone).
    pub fn from_json(key: &str, value: Option<&str>) -> Result<Record, RecordError> {
        let key = Key::from_json(key)?;
        let value = match value.map(str::trim) {
            None | Some("null") | Some("") => None,
            Some(text) => Some(Self::parse_value(&key, text)?),
        };
        Ok(Record { key, value })
    }

    fn parse_value(key: &Key, text: &str) -> Result<Value, RecordError> {
        let bad = |e: serde_json::Error| RecordError(format!("record value {text:?}: {e}"));
        Ok(match key {
            Key::Schema { .. } => Value::Schema(serde_json::from_str(text).map_err(bad)?),
            Key::Config { .. } => {
                let raw: RawConfig = serde_json::from_str(text).map_err(bad)?;
                let compatibility = raw
                    .compatibility_level
                    .map(|level| level.parse())
                    .transpose()
                    .map_err(|e: String| RecordError(format!("record value {text:?}: {e}")))?;
                Value::Config(ConfigValue {
                    compatibility,
                    contract: ContractConfig {
                        default_metadata: raw.default_metadata,
                        override_metadata: raw.override_metadata,
                        default_rule_set: raw.default_rule_set,
                        override_rule_set: raw.override_rule_set,
                    },
                    settings: raw.settings,
                })
            }
            Key::Mode { .. } => {
                let raw: RawMode = serde_json::from_str(text).map_err(bad)?;
                Value::Mode(RegistryMode::parse(&raw.mode).ok_or_else(|| {
                    RecordError(format!(
                        "record value {text:?}: unknown mode {:?}",
                        raw.mode
                    ))
                })?)
            }
            Key::DeleteSubject { .. } => {
                let raw: RawDelete = serde_json::from_str(text).map_err(bad)?;
                Value::DeleteSubject {
                    subject: raw.subject,
                    version: raw.version,
                }
            }
            Key::ClearSubject { .. } => {
                let raw: RawDelete = serde_json::from_str(text).map_err(bad)?;
                Value::ClearSubject {
                    subject: raw.subject,
                    version: raw.version,
                }
            }
            Key::Context { .. } => Value::Context,
            Key::Noop => Value::Noop,
        })
    }
}

/// Reads an export of a `_schemas` topic: either lines of `KEY<TAB>VALUE`
/// (what `kafka-console-consumer --property print.key=true` and Karapace's
/// backup format v2 write; a value of `null` is a tombstone) or a JSON array
/// of `[key, value]` pairs (Karapace's backup format v1). Blank lines and
/// lines starting with `#` are skipped. Errors name the line.
pub fn parse_export(text: &str) -> Result<Vec<Record>, RecordError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let pairs: Vec<(serde_json::Value, serde_json::Value)> = serde_json::from_str(trimmed)
            .map_err(|e| {
                RecordError(format!(
                    "export is a JSON array but not of [key, value] pairs: {e}"
                ))
            })?;
        return pairs
            .into_iter()
            .enumerate()
            .map(|(i, (key, value))| {
                let value = (!value.is_null()).then(|| value.to_string());
                Record::from_json(&key.to_string(), value.as_deref())
                    .map_err(|e| RecordError(format!("pair {}: {}", i + 1, e.0)))
            })
            .collect();
    }
    let mut records = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('\t').ok_or_else(|| {
            RecordError(format!(
                "line {}: expected KEY<TAB>VALUE (a `_schemas` topic export)",
                number + 1
            ))
        })?;
        records.push(
            Record::from_json(key, Some(value))
                .map_err(|e| RecordError(format!("line {}: {}", number + 1, e.0)))?,
        );
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_confluent_json() {
        let records = [
            Record {
                key: Key::Schema {
                    subject: "orders-value".into(),
                    version: 3,
                },
                value: Some(Value::Schema(SchemaValue {
                    subject: "orders-value".into(),
                    version: 3,
                    id: 7,
                    schema: "\"string\"".into(),
                    schema_type: Some("JSON".into()),
                    references: vec![SchemaReference {
                        name: "a.json".into(),
                        subject: "a".into(),
                        version: 1,
                    }],
                    metadata: Some(serde_json::json!({"properties": {"owner": "shop"}})),
                    rule_set: Some(serde_json::json!({"domainRules": [{"name": "r"}]})),
                    deleted: false,
                    ts: Some(1_700_000_000_123),
                })),
            },
            Record {
                key: Key::Config { subject: None },
                value: Some(Value::Config(Mode::FullTransitive.into())),
            },
            Record {
                key: Key::Config {
                    subject: Some("s".into()),
                },
                value: Some(Value::Config(ConfigValue {
                    compatibility: None,
                    contract: ContractConfig {
                        default_metadata: Some(serde_json::json!({"properties": {"a": "b"}})),
                        override_rule_set: Some(serde_json::json!({"domainRules": []})),
                        ..ContractConfig::default()
                    },
                    settings: ConfigSettings::default(),
                })),
            },
            Record {
                key: Key::Config {
                    subject: Some("t".into()),
                },
                value: Some(Value::Config(ConfigValue {
                    compatibility: Some(Mode::Full),
                    contract: ContractConfig::default(),
                    settings: ConfigSettings {
                        alias: Some("orders".into()),
                        normalize: Some(true),
                        validate_fields: Some(false),
                        validate_rules: Some(true),
                        compatibility_group: Some("major".into()),
                    },
                })),
            },
            Record {
                key: Key::Mode {
                    subject: Some("s".into()),
                },
                value: Some(Value::Mode(RegistryMode::Import)),
            },
            Record {
                key: Key::DeleteSubject {
                    subject: "s".into(),
                },
                value: Some(Value::DeleteSubject {
                    subject: "s".into(),
                    version: 2,
                }),
            },
            Record {
                key: Key::Schema {
                    subject: "s".into(),
                    version: 1,
                },
                value: None,
            },
            Record {
                key: Key::Context {
                    context: ".orders".into(),
                },
                value: Some(Value::Context),
            },
        ];
        for record in records {
            let key = record.key.to_json();
            let value = record.value_json();
            let back = Record::from_json(&key, value.as_deref()).expect("parses");
            assert_eq!(back, record, "{key} {value:?}");
        }
        assert_eq!(
            Key::Schema {
                subject: "s".into(),
                version: 1
            }
            .to_json(),
            r#"{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}"#
        );
        // Confluent's CONTEXT record, and a schema in that context.
        let key = r#"{"keytype":"CONTEXT","tenant":"default","context":".orders","magic":0}"#;
        assert_eq!(
            Key::Context {
                context: ".orders".into()
            }
            .to_json(),
            key
        );
        let record = Record::from_json(key, Some(r#"{"tenant":"default","context":".orders"}"#))
            .expect("a CONTEXT record");
        assert_eq!(record.value, Some(Value::Context));
        // A value written before data contracts and contexts still reads.
        let old = Record::from_json(
            r#"{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}"#,
            Some(r#"{"subject":"s","version":1,"id":1,"schema":"\"int\"","deleted":false}"#),
        )
        .expect("an old record");
        let Some(Value::Schema(v)) = old.value else {
            panic!("a schema value")
        };
        assert_eq!((v.metadata, v.rule_set), (None, None));
        // A configuration as Confluent 7.4.1+ writes it: its settings are
        // read, its `subject` field is not needed.
        let config = Record::from_json(
            r#"{"keytype":"CONFIG","subject":"s","magic":0}"#,
            Some(
                r#"{"subject":"s","alias":"orders","normalize":true,"validateFields":false,"compatibilityLevel":"FULL","compatibilityGroup":"major"}"#,
            ),
        )
        .expect("a config record");
        let Some(Value::Config(config)) = config.value else {
            panic!("a config value")
        };
        assert_eq!(config.compatibility, Some(Mode::Full));
        assert_eq!(
            config.settings,
            ConfigSettings {
                alias: Some("orders".into()),
                normalize: Some(true),
                validate_fields: Some(false),
                validate_rules: None,
                compatibility_group: Some("major".into()),
            }
        );
    }

    #[test]
    fn exports_in_both_formats_are_read_and_bad_lines_named() {
        let lines = "{\"keytype\":\"SCHEMA\",\"subject\":\"s\",\"version\":1,\"magic\":1}\t{\"subject\":\"s\",\"version\":1,\"id\":1,\"schema\":\"\\\"int\\\"\",\"deleted\":false}\n\n{\"keytype\":\"NOOP\",\"magic\":0}\tnull\n";
        assert_eq!(parse_export(lines).expect("lines").len(), 2);
        let array =
            r#"[[{"keytype":"CONFIG","subject":null,"magic":0},{"compatibilityLevel":"NONE"}]]"#;
        assert_eq!(
            parse_export(array).expect("array")[0].value,
            Some(Value::Config(Mode::None.into()))
        );
        let err = parse_export("{\"keytype\":\"SCHEMA\"}\tnull\nnot a record").unwrap_err();
        assert!(err.0.starts_with("line 1:"), "{err}");
        let err = parse_export("{\"keytype\":\"NOOP\"}\tnull\nno tab here").unwrap_err();
        assert!(err.0.starts_with("line 2:"), "{err}");
    }
}
