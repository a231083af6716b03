//! Flyway's placeholders: `${name}` (prefix and suffix configurable) in a
//! migration is replaced by its value before the file is parsed, names
//! matched without regard to case. Flyway's built-ins
//! (`${flyway:defaultSchema}`, `${flyway:user}`, `${flyway:database}`,
//! `${flyway:timestamp}`, `${flyway:filename}`, `${flyway:table}`,
//! `${flyway:workingDirectory}`, `${flyway:environment}`) come from the
//! connection and the file. A placeholder without a value is an error that
//! names the file, the line and the placeholder.
//!
//! As in Flyway, a versioned migration's checksum is computed over the file
//! before replacement, a repeatable migration's over the replaced text (so
//! a new value runs it again).

use std::collections::BTreeMap;

/// Placeholder settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placeholders {
    /// `placeholderReplacement`: false leaves the text as it is.
    pub replace: bool,
    pub prefix: String,
    pub suffix: String,
    /// User placeholders; names are matched without regard to case, so
    /// no two names here differ only in letter case (see
    /// [`Placeholders::set`]).
    pub values: BTreeMap<String, String>,
    /// Flyway's `environment`, the value of `${flyway:environment}`
    /// (`default` when unset, as in Flyway).
    pub environment: Option<String>,
}

impl Default for Placeholders {
    fn default() -> Self {
        Placeholders {
            replace: true,
            prefix: "${".into(),
            suffix: "}".into(),
            values: BTreeMap::new(),
            environment: None,
        }
    }
}

/// The values of Flyway's built-in placeholders for one run.
#[derive(Clone, Debug, Default)]
pub struct BuiltIns {
    pub user: String,
    pub database: String,
    pub default_schema: String,
    pub table: String,
    /// `yyyy-MM-dd HH:mm:ss`, the server's local time when the run started.
    pub timestamp: String,
    pub working_directory: String,
}

/// A placeholder in a file that has no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// The placeholder as written, prefix and suffix included.
    pub placeholder: String,
    /// 1-based line of its prefix.
    pub line: u32,
}

impl Placeholders {
    /// Sets placeholder `name` to `value`, replacing one whose name
    /// differs only in letter case: Flyway matches names without regard
    /// to case, so the two are one placeholder, and the later setting (a
    /// flag over the configuration) is its value.
    pub fn set(&mut self, name: &str, value: &str) {
        let lower = name.to_lowercase();
        self.values.retain(|k, _| k.to_lowercase() != lower);
        self.values.insert(name.to_string(), value.to_string());
    }

    /// `text` with every placeholder replaced; `file_name` is the value of
    /// `${flyway:filename}`.
    pub fn replace(
        &self,
        text: &str,
        built_ins: &BuiltIns,
        file_name: &str,
    ) -> Result<String, Missing> {
        if !self.replace || self.prefix.is_empty() || self.suffix.is_empty() {
            return Ok(text.to_string());
        }
        let values: BTreeMap<String, &str> = self
            .values
            .iter()
            .map(|(k, v)| (k.to_lowercase(), v.as_str()))
            .collect();
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut consumed = 0;
        while let Some(start) = rest.find(self.prefix.as_str()) {
            let after = &rest[start + self.prefix.len()..];
            let Some(len) = after.find(self.suffix.as_str()) else {
                break;
            };
            let name = &after[..len];
            let environment = self.environment.as_deref().unwrap_or("default");
            let value = match built_in(name, built_ins, file_name, environment) {
                Some(v) => v,
                None => match values.get(&name.to_lowercase()) {
                    Some(v) => (*v).to_string(),
                    None => {
                        let at = consumed + start;
                        let line = 1 + line_breaks(&text[..at]);
                        return Err(Missing {
                            placeholder: format!("{}{name}{}", self.prefix, self.suffix),
                            line,
                        });
                    }
                },
            };
            out.push_str(&rest[..start]);
            out.push_str(&value);
            let skip = start + self.prefix.len() + len + self.suffix.len();
            consumed += skip;
            rest = &rest[skip..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Line breaks as Flyway counts lines: `\r\n`, `\n` and a lone `\r`.
fn line_breaks(s: &str) -> u32 {
    let bytes = s.as_bytes();
    let mut n = 0u32;
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'\n' => n = n.saturating_add(1),
            b'\r' if bytes.get(i + 1) != Some(&b'\n') => n = n.saturating_add(1),
            _ => {}
        }
    }
    n
}

fn built_in(name: &str, b: &BuiltIns, file_name: &str, environment: &str) -> Option<String> {
    let key = name.strip_prefix("flyway:")?.to_lowercase();
    Some(match key.as_str() {
        "defaultschema" => b.default_schema.clone(),
        "user" => b.user.clone(),
        "database" => b.database.clone(),
        "timestamp" => b.timestamp.clone(),
        "filename" => file_name.to_string(),
        "table" => b.table.clone(),
        "workingdirectory" => b.working_directory.clone(),
        "environment" => environment.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[(&str, &str)]) -> Placeholders {
        Placeholders {
            values: values
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Placeholders::default()
        }
    }

    #[test]
    fn replaces_user_and_built_in_placeholders() {
        let b = BuiltIns {
            user: "app".into(),
            table: "flyway_schema_history".into(),
            ..BuiltIns::default()
        };
        let p = with(&[("Name", "t1")]);
        assert_eq!(
            p.replace(
                "CREATE TABLE ${name} -- ${flyway:user} ${flyway:filename} ${flyway:table}",
                &b,
                "V1__a.sql"
            ),
            Ok("CREATE TABLE t1 -- app V1__a.sql flyway_schema_history".to_string())
        );
        // A value is not scanned again; an unterminated prefix is text.
        let p = with(&[("a", "${b}")]);
        assert_eq!(p.replace("${a} ${", &b, "f"), Ok("${b} ${".to_string()));
    }

    #[test]
    fn a_missing_placeholder_names_its_line() {
        let p = with(&[("a", "1")]);
        let err = p
            .replace("${a}\r\nx\ry\n  ${nope}", &BuiltIns::default(), "f")
            .unwrap_err();
        assert_eq!(
            err,
            Missing {
                placeholder: "${nope}".into(),
                line: 4
            }
        );
    }

    #[test]
    fn prefix_suffix_and_switch_off() {
        let mut p = with(&[("x", "1")]);
        p.prefix = "#[".into();
        p.suffix = "]".into();
        assert_eq!(
            p.replace("#[x] ${x}", &BuiltIns::default(), "f"),
            Ok("1 ${x}".into())
        );
        p.replace = false;
        assert_eq!(
            p.replace("#[y]", &BuiltIns::default(), "f"),
            Ok("#[y]".into())
        );
    }

    /// `--placeholder NAME=x` once lost to a configuration's `name`: both
    /// were kept, and the one sorted last won.
    #[test]
    fn a_later_setting_replaces_a_name_in_another_case() {
        let mut p = with(&[("name", "from_conf"), ("Other", "o")]);
        p.set("NAME", "from_flag");
        assert_eq!(
            p.replace("${name} ${Name} ${other}", &BuiltIns::default(), "f"),
            Ok("from_flag from_flag o".into())
        );
        assert_eq!(p.values.len(), 2, "{:?}", p.values);
        p.set("NaMe", "last");
        assert_eq!(
            p.replace("${NAME}", &BuiltIns::default(), "f"),
            Ok("last".into())
        );
    }

    #[test]
    fn the_environment_placeholder_follows_the_setting() {
        let mut p = with(&[]);
        assert_eq!(
            p.replace("${flyway:environment}", &BuiltIns::default(), "f"),
            Ok("default".into())
        );
        p.environment = Some("staging".into());
        assert_eq!(
            p.replace("${flyway:Environment}", &BuiltIns::default(), "f"),
            Ok("staging".into())
        );
    }
}
