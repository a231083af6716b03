//! Data contracts: a schema's `metadata` and `ruleSet`, and the
//! `defaultMetadata`/`overrideMetadata`/`defaultRuleSet`/`overrideRuleSet`
//! a configuration applies on registration, in Confluent's shapes and with
//! Confluent's merge rules. Pure. Rules are stored and returned, never
//! executed: the registry does not run a rule's expression or transform.
//!
//! - `metadata`: `{"tags": {path: [tag]}, "properties": {name: text},
//!   "sensitive": [name]}`, each part optional.
//! - `ruleSet`: `{"migrationRules": [rule], "domainRules": [rule],
//!   "encodingRules": [rule]}`, each rule an object with a `name`.
//! - Merging `a` then `b` (Confluent's `mergeMetadata`/`mergeRuleSets`):
//!   `b`'s tags and properties replace `a`'s of the same key, sensitive
//!   names are the union; in each rule list `a`'s rules not named in `b`
//!   come first, then `b`'s.
//! - What a registration stores: `override` merged over (the request's,
//!   else the latest version's, merged over `default`).

use serde_json::{Map, Value as Json};

use crate::error::ApiError;

/// The rule lists of a rule set.
const RULE_LISTS: [&str; 3] = ["migrationRules", "domainRules", "encodingRules"];

/// A configuration's data-contract part.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContractConfig {
    pub default_metadata: Option<Json>,
    pub override_metadata: Option<Json>,
    pub default_rule_set: Option<Json>,
    pub override_rule_set: Option<Json>,
}

impl ContractConfig {
    /// No defaults, no overrides.
    pub const EMPTY: ContractConfig = ContractConfig {
        default_metadata: None,
        override_metadata: None,
        default_rule_set: None,
        override_rule_set: None,
    };

    pub fn is_empty(&self) -> bool {
        self.default_metadata.is_none()
            && self.override_metadata.is_none()
            && self.default_rule_set.is_none()
            && self.override_rule_set.is_none()
    }

    /// Each field as Confluent names it, with its value.
    pub fn fields(&self) -> [(&'static str, Option<&Json>); 4] {
        [
            ("defaultMetadata", self.default_metadata.as_ref()),
            ("overrideMetadata", self.override_metadata.as_ref()),
            ("defaultRuleSet", self.default_rule_set.as_ref()),
            ("overrideRuleSet", self.override_rule_set.as_ref()),
        ]
    }

    /// Reads the four fields from a `/config` body (absent or `null`
    /// fields stay `None`), each checked for its shape.
    pub fn from_body(body: &Map<String, Json>) -> Result<ContractConfig, ApiError> {
        let metadata = |name: &str| -> Result<Option<Json>, ApiError> {
            optional(body, name)
                .map(|v| check_metadata(name, v).map(|()| v.clone()))
                .transpose()
        };
        let rule_set = |name: &str| -> Result<Option<Json>, ApiError> {
            optional(body, name)
                .map(|v| check_rule_set(name, v).map(|()| v.clone()))
                .transpose()
        };
        Ok(ContractConfig {
            default_metadata: metadata("defaultMetadata")?,
            override_metadata: metadata("overrideMetadata")?,
            default_rule_set: rule_set("defaultRuleSet")?,
            override_rule_set: rule_set("overrideRuleSet")?,
        })
    }

    /// `other`'s fields where it has them, else these.
    pub fn updated_with(&self, other: &ContractConfig) -> ContractConfig {
        let pick = |new: &Option<Json>, old: &Option<Json>| new.clone().or_else(|| old.clone());
        ContractConfig {
            default_metadata: pick(&other.default_metadata, &self.default_metadata),
            override_metadata: pick(&other.override_metadata, &self.override_metadata),
            default_rule_set: pick(&other.default_rule_set, &self.default_rule_set),
            override_rule_set: pick(&other.override_rule_set, &self.override_rule_set),
        }
    }

    /// The metadata and rule set a registration stores, from the ones it
    /// names (else the previous version's).
    pub fn apply(
        &self,
        metadata: Option<&Json>,
        rule_set: Option<&Json>,
    ) -> (Option<Json>, Option<Json>) {
        let metadata = merge_metadata(
            merge_metadata(self.default_metadata.as_ref(), metadata).as_ref(),
            self.override_metadata.as_ref(),
        );
        let rule_set = merge_rule_sets(
            merge_rule_sets(self.default_rule_set.as_ref(), rule_set).as_ref(),
            self.override_rule_set.as_ref(),
        );
        (metadata, rule_set)
    }
}

fn optional<'a>(body: &'a Map<String, Json>, name: &str) -> Option<&'a Json> {
    body.get(name).filter(|v| !v.is_null())
}

/// A request's `metadata`: an object of `tags` (an object of string
/// arrays), `properties` (an object of strings) and `sensitive` (an array
/// of strings). `field` names it in the error.
pub fn check_metadata(field: &str, value: &Json) -> Result<(), ApiError> {
    let wrong = |what: &str| {
        Err(ApiError::invalid_schema(format!(
            "Invalid \"{field}\": {what}; e.g. {{\"properties\":{{\"owner\":\"team-a\"}},\"tags\":{{\"$.ssn\":[\"PII\"]}},\"sensitive\":[\"ssn\"]}}"
        )))
    };
    let Some(object) = value.as_object() else {
        return wrong("it must be an object");
    };
    for (key, part) in object {
        let ok = match key.as_str() {
            "tags" => {
                part.is_null()
                    || part.as_object().is_some_and(|tags| {
                        tags.values()
                            .all(|t| t.as_array().is_some_and(|a| a.iter().all(Json::is_string)))
                    })
            }
            "properties" => {
                part.is_null()
                    || part
                        .as_object()
                        .is_some_and(|p| p.values().all(Json::is_string))
            }
            "sensitive" => {
                part.is_null()
                    || part
                        .as_array()
                        .is_some_and(|a| a.iter().all(Json::is_string))
            }
            _ => true,
        };
        if !ok {
            return wrong(&format!(
                "\"{key}\" must be {}",
                match key.as_str() {
                    "tags" => "an object of string arrays",
                    "properties" => "an object of strings",
                    _ => "an array of strings",
                }
            ));
        }
    }
    Ok(())
}

/// A request's `ruleSet`: an object whose `migrationRules`, `domainRules`
/// and `encodingRules` are arrays of rules, each an object with a string
/// `name`. `field` names it in the error.
pub fn check_rule_set(field: &str, value: &Json) -> Result<(), ApiError> {
    let wrong = |what: String| {
        Err(ApiError::invalid_schema(format!(
            "Invalid \"{field}\": {what}; e.g. {{\"domainRules\":[{{\"name\":\"checkSsn\",\"kind\":\"CONDITION\",\"type\":\"CEL\",\"mode\":\"WRITE\",\"expr\":\"message.ssn != ''\"}}]}}"
        )))
    };
    let Some(object) = value.as_object() else {
        return wrong("it must be an object".into());
    };
    for list in RULE_LISTS {
        match object.get(list) {
            None | Some(Json::Null) => {}
            Some(Json::Array(rules)) => {
                for (i, rule) in rules.iter().enumerate() {
                    if !rule.get("name").is_some_and(Json::is_string) {
                        return wrong(format!("rule {i} of \"{list}\" has no string \"name\""));
                    }
                }
            }
            Some(_) => return wrong(format!("\"{list}\" must be an array of rules")),
        }
    }
    Ok(())
}

/// The metadata property Confluent (7.4+) stamps with a schema's version
/// in its subject (`Metadata.CONFLUENT_VERSION`).
pub const CONFLUENT_VERSION: &str = "confluent:version";

/// The `confluent:version` property of `metadata`, as written.
pub fn confluent_version(metadata: Option<&Json>) -> Option<&str> {
    metadata?
        .get("properties")?
        .get(CONFLUENT_VERSION)?
        .as_str()
}

/// The `confluent:version` property as a number, as Confluent's
/// `getConfluentVersionNumber` reads it (`Integer.parseInt`; `None` when
/// absent or not an int).
pub fn confluent_version_number(metadata: Option<&Json>) -> Option<i32> {
    confluent_version(metadata)?.parse().ok()
}

/// `metadata` with `confluent:version` set to `version` (Confluent's
/// `Metadata.setConfluentVersion`: the metadata created when there is
/// none).
pub fn with_confluent_version(metadata: Option<&Json>, version: &str) -> Json {
    let mut out = metadata
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default();
    let mut properties = out
        .get("properties")
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default();
    properties.insert(
        CONFLUENT_VERSION.to_owned(),
        Json::String(version.to_owned()),
    );
    out.insert("properties".to_owned(), Json::Object(properties));
    Json::Object(out)
}

/// `metadata` without `confluent:version` (Confluent's
/// `Metadata.removeConfluentVersion`). Parts left empty are dropped, and
/// metadata left with nothing is none: Confluent's `Metadata` holds an
/// absent part as an empty one, so `{"properties": {}}` and no metadata
/// compare equal there.
pub fn without_confluent_version(metadata: Option<&Json>) -> Option<Json> {
    let mut out = metadata?.as_object()?.clone();
    if let Some(properties) = out.get_mut("properties").and_then(Json::as_object_mut) {
        properties.remove(CONFLUENT_VERSION);
    }
    out.retain(|_, part| match part {
        Json::Object(o) => !o.is_empty(),
        Json::Array(a) => !a.is_empty(),
        Json::Null => false,
        _ => true,
    });
    (!out.is_empty()).then_some(Json::Object(out))
}

/// Confluent's `mergeMetadata(a, b)`: `b` over `a`.
pub fn merge_metadata(a: Option<&Json>, b: Option<&Json>) -> Option<Json> {
    let (a, b) = match (a, b) {
        (None, None) => return None,
        (Some(x), None) | (None, Some(x)) => return Some(x.clone()),
        (Some(a), Some(b)) => (a, b),
    };
    let mut out = a.as_object().cloned().unwrap_or_default();
    let Some(b) = b.as_object() else {
        return Some(Json::Object(out));
    };
    for (key, value) in b {
        match key.as_str() {
            "tags" | "properties" => {
                let mut merged = out
                    .get(key)
                    .and_then(Json::as_object)
                    .cloned()
                    .unwrap_or_default();
                if let Some(entries) = value.as_object() {
                    for (k, v) in entries {
                        merged.insert(k.clone(), v.clone());
                    }
                }
                out.insert(key.clone(), Json::Object(merged));
            }
            "sensitive" => {
                let mut names: Vec<Json> = out
                    .get(key)
                    .and_then(Json::as_array)
                    .cloned()
                    .unwrap_or_default();
                for name in value.as_array().into_iter().flatten() {
                    if !names.contains(name) {
                        names.push(name.clone());
                    }
                }
                out.insert(key.clone(), Json::Array(names));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Some(Json::Object(out))
}

/// Confluent's `mergeRuleSets(a, b)`: per list, `a`'s rules not named in
/// `b`, then `b`'s.
pub fn merge_rule_sets(a: Option<&Json>, b: Option<&Json>) -> Option<Json> {
    let (a, b) = match (a, b) {
        (None, None) => return None,
        (Some(x), None) | (None, Some(x)) => return Some(x.clone()),
        (Some(a), Some(b)) => (a, b),
    };
    let mut out = a.as_object().cloned().unwrap_or_default();
    let Some(b) = b.as_object() else {
        return Some(Json::Object(out));
    };
    for (key, value) in b {
        if !RULE_LISTS.contains(&key.as_str()) {
            out.insert(key.clone(), value.clone());
            continue;
        }
        let new: Vec<Json> = value.as_array().cloned().unwrap_or_default();
        let names: Vec<&Json> = new.iter().filter_map(|r| r.get("name")).collect();
        let mut merged: Vec<Json> = out
            .get(key)
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter(|r| r.get("name").is_none_or(|n| !names.contains(&n)))
            .cloned()
            .collect();
        merged.extend(new.iter().cloned());
        out.insert(key.clone(), Json::Array(merged));
    }
    Some(Json::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_merges_later_over_earlier() {
        let a = json!({"properties": {"owner": "a", "team": "x"}, "tags": {"$.a": ["PII"]}, "sensitive": ["a"]});
        let b = json!({"properties": {"owner": "b"}, "sensitive": ["b", "a"]});
        assert_eq!(
            merge_metadata(Some(&a), Some(&b)),
            Some(
                json!({"properties": {"owner": "b", "team": "x"}, "tags": {"$.a": ["PII"]}, "sensitive": ["a", "b"]})
            )
        );
        assert_eq!(merge_metadata(None, Some(&b)), Some(b.clone()));
        assert_eq!(merge_metadata(None, None), None);
    }

    #[test]
    fn rule_sets_merge_by_rule_name() {
        let a = json!({"domainRules": [{"name": "r1", "expr": "old"}, {"name": "r2"}]});
        let b = json!({"domainRules": [{"name": "r1", "expr": "new"}], "migrationRules": [{"name": "m"}]});
        assert_eq!(
            merge_rule_sets(Some(&a), Some(&b)),
            Some(
                json!({"domainRules": [{"name": "r2"}, {"name": "r1", "expr": "new"}], "migrationRules": [{"name": "m"}]})
            )
        );
    }

    #[test]
    fn defaults_then_the_request_then_overrides() {
        let config = ContractConfig {
            default_metadata: Some(json!({"properties": {"owner": "default", "tier": "1"}})),
            override_metadata: Some(json!({"properties": {"tier": "2"}})),
            default_rule_set: None,
            override_rule_set: Some(json!({"domainRules": [{"name": "always"}]})),
        };
        let (metadata, rules) = config.apply(Some(&json!({"properties": {"owner": "me"}})), None);
        assert_eq!(
            metadata,
            Some(json!({"properties": {"owner": "me", "tier": "2"}}))
        );
        assert_eq!(rules, Some(json!({"domainRules": [{"name": "always"}]})));
        assert_eq!(ContractConfig::default().apply(None, None), (None, None));
    }

    #[test]
    fn bad_shapes_are_named() {
        let err = check_metadata("metadata", &json!({"properties": {"a": 1}})).unwrap_err();
        assert_eq!(err.error_code, 42201);
        assert!(
            err.message
                .contains("\"properties\" must be an object of strings"),
            "{}",
            err.message
        );
        let err = check_rule_set("ruleSet", &json!({"domainRules": [{"kind": "CONDITION"}]}))
            .unwrap_err();
        assert!(
            err.message
                .contains("rule 0 of \"domainRules\" has no string \"name\""),
            "{}",
            err.message
        );
        assert!(check_rule_set("ruleSet", &json!([])).is_err());
        assert!(check_metadata("metadata", &json!({"tags": {"$.a": ["PII"]}})).is_ok());
    }
}
