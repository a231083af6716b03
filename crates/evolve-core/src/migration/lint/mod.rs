//! `evolve lint`: rules over migration files, read in the order they apply.
//!
//! Each rule has a name (squawk's name where squawk has the rule, so a
//! squawk configuration maps over), a default level and a message that names
//! the statement, the risk and the safe form. The rules see the files and,
//! when given, [`CatalogFacts`] read from the live database: what a file
//! creates, drops and renames is followed for the files after it, so a rule
//! knows a column's type, whether a table is new in this file (and so empty),
//! and which views read a column.
//!
//! A versioned file runs in one transaction unless it starts with
//! `-- evolve:no-transaction`; the rules know it: a statement that
//! PostgreSQL refuses inside a transaction is an error there, advice that
//! only matters outside a transaction (`IF NOT EXISTS` for a rerun, a
//! `BEGIN` left open) is given only for no-transaction files, and a
//! `VALIDATE` in the same file as its `NOT VALID` constraint holds the lock
//! of the `ADD` for the whole validation.
//!
//! Pure: no I/O. The binary reads the files, the configuration and the
//! catalog.

mod check;
mod model;
#[cfg(test)]
mod tests;
mod types;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use squawk_syntax::SyntaxKind;
use squawk_syntax::ast::{AstNode, SourceFile};

use super::{Script, line_col};

/// How bad a finding is. `evolve lint` exits 1 when any is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Warning,
    Error,
}

/// A rule's level in the configuration: off, or the level of its findings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Setting {
    Off,
    Warning,
    Error,
}

impl Setting {
    fn level(self) -> Option<Level> {
        match self {
            Setting::Off => None,
            Setting::Warning => Some(Level::Warning),
            Setting::Error => Some(Level::Error),
        }
    }
}

/// One rule, for listing and documentation.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rule {
    pub name: &'static str,
    /// The level when the configuration does not set one; `Off` for the
    /// opt-in rules.
    pub default: Setting,
    /// squawk has a rule of this name.
    pub squawk: bool,
    pub summary: &'static str,
}

const fn rule(name: &'static str, default: Setting, squawk: bool, summary: &'static str) -> Rule {
    Rule {
        name,
        default,
        squawk,
        summary,
    }
}

use Setting::{Error as E, Off, Warning as W};

/// Every rule, evolve's own first.
pub const RULES: &[Rule] = &[
    rule(
        "syntax-error",
        E,
        true,
        "a statement PostgreSQL cannot parse",
    ),
    rule(
        "alter-type-rewrite",
        E,
        false,
        "ALTER COLUMN TYPE that rewrites the whole table under an ACCESS EXCLUSIVE lock",
    ),
    rule(
        "rename-column-used-by-view",
        E,
        false,
        "RENAME COLUMN of a column a view reads: PostgreSQL accepts it and the view keeps the old output name",
    ),
    rule(
        "matview-select-star",
        W,
        false,
        "a materialized view defined with SELECT * depends on every column, so any type change anywhere in its tables is blocked",
    ),
    rule(
        "matview-chain-depth",
        W,
        false,
        "materialized views stacked more than two layers deep must be refreshed in order and rebuilt together",
    ),
    rule(
        "require-concurrent-refresh",
        E,
        false,
        "REFRESH MATERIALIZED VIEW without CONCURRENTLY blocks every read of the view while it runs",
    ),
    rule(
        "adding-field-with-default",
        E,
        true,
        "ADD COLUMN with a volatile default, a stored generated column, an identity or a serial rewrites the table under ACCESS EXCLUSIVE",
    ),
    rule(
        "adding-foreign-key-constraint",
        E,
        true,
        "ADD FOREIGN KEY without NOT VALID blocks writes to both tables while the table is scanned",
    ),
    rule(
        "adding-not-nullable-field",
        E,
        true,
        "SET NOT NULL scans the table under ACCESS EXCLUSIVE unless a valid CHECK (col IS NOT NULL) exists",
    ),
    rule(
        "adding-serial-primary-key-field",
        E,
        true,
        "a primary key added to an existing table builds its index under ACCESS EXCLUSIVE",
    ),
    rule(
        "constraint-missing-not-valid",
        E,
        true,
        "ADD CONSTRAINT without NOT VALID scans the table under a lock, and VALIDATE in the transaction of its ADD keeps that lock",
    ),
    rule(
        "disallowed-unique-constraint",
        E,
        true,
        "ADD UNIQUE builds its index under ACCESS EXCLUSIVE",
    ),
    rule(
        "changing-column-type",
        W,
        true,
        "ALTER COLUMN TYPE of a column whose type is unknown here may rewrite the table",
    ),
    rule(
        "prefer-text-field",
        W,
        true,
        "varchar(n) needs an ALTER under ACCESS EXCLUSIVE to change its limit; text with a CHECK does not",
    ),
    rule(
        "prefer-repack",
        E,
        true,
        "VACUUM FULL and CLUSTER rewrite the table under ACCESS EXCLUSIVE",
    ),
    rule(
        "require-concurrent-index-creation",
        E,
        true,
        "CREATE INDEX without CONCURRENTLY blocks writes to an existing table while it builds",
    ),
    rule(
        "concurrent-index-on-partitioned-table",
        E,
        true,
        "CREATE INDEX CONCURRENTLY on a partitioned table fails",
    ),
    rule(
        "require-concurrent-index-deletion",
        W,
        true,
        "DROP INDEX without CONCURRENTLY takes ACCESS EXCLUSIVE on the table",
    ),
    rule(
        "require-concurrent-reindex",
        E,
        true,
        "REINDEX without CONCURRENTLY blocks writes while it rebuilds",
    ),
    rule(
        "require-concurrent-partition-detach",
        W,
        true,
        "DETACH PARTITION without CONCURRENTLY takes ACCESS EXCLUSIVE on the parent",
    ),
    rule(
        "ban-concurrent-index-creation-in-transaction",
        E,
        true,
        "a CONCURRENTLY statement in a file that runs in a transaction fails",
    ),
    rule(
        "transaction-nesting",
        E,
        true,
        "BEGIN, COMMIT or ROLLBACK in a file evolve runs in its own transaction",
    ),
    rule(
        "ban-uncommitted-transaction",
        E,
        true,
        "a no-transaction file that opens a transaction and never commits it",
    ),
    rule(
        "require-lock-timeout",
        Off,
        true,
        "no SET lock_timeout before a statement that takes a strong lock (evolve migrate sets one itself)",
    ),
    rule(
        "require-statement-timeout",
        Off,
        true,
        "no SET statement_timeout before a statement that can run long",
    ),
    rule(
        "ban-drop-column",
        W,
        true,
        "DROP COLUMN breaks clients that still read or write the column",
    ),
    rule(
        "ban-drop-table",
        W,
        true,
        "DROP TABLE breaks clients that still use the table",
    ),
    rule("ban-drop-database", E, true, "DROP DATABASE in a migration"),
    rule(
        "ban-drop-not-null",
        W,
        true,
        "DROP NOT NULL lets clients that assume a value read NULLs",
    ),
    rule(
        "renaming-column",
        W,
        true,
        "RENAME COLUMN breaks clients that use the old name",
    ),
    rule(
        "renaming-table",
        W,
        true,
        "RENAME TO breaks clients that use the old name",
    ),
    rule(
        "adding-required-field",
        W,
        true,
        "ADD COLUMN NOT NULL without a default fails on a non-empty table and breaks inserts of clients that do not know the column",
    ),
    rule(
        "ban-truncate-cascade",
        E,
        true,
        "TRUNCATE ... CASCADE empties every table that references this one",
    ),
    rule(
        "ban-create-domain-with-constraint",
        W,
        true,
        "a domain's CHECK cannot be added NOT VALID later and is checked for every column using the domain",
    ),
    rule(
        "ban-alter-domain-with-add-constraint",
        W,
        true,
        "ALTER DOMAIN ADD CONSTRAINT scans every column of the domain under lock",
    ),
    rule(
        "prefer-bigint-over-int",
        W,
        true,
        "an int key runs out at 2^31",
    ),
    rule(
        "prefer-bigint-over-smallint",
        W,
        true,
        "a smallint runs out at 32767",
    ),
    rule(
        "prefer-identity",
        W,
        true,
        "serial types have sequence ownership and permission quirks that identity columns do not",
    ),
    rule(
        "prefer-timestamptz",
        W,
        true,
        "timestamp without time zone stores a wall-clock time that depends on the writer's TimeZone",
    ),
    rule(
        "ban-char-field",
        W,
        true,
        "char(n) pads with spaces and is no faster than text",
    ),
    rule(
        "prefer-robust-stmts",
        W,
        true,
        "in a no-transaction file, a statement without IF [NOT] EXISTS makes a rerun after a failure fail",
    ),
    rule(
        "require-enum-value-ordering",
        W,
        true,
        "ADD VALUE without BEFORE or AFTER appends the value at the end of the enum's order",
    ),
    rule(
        "require-table-schema",
        Off,
        true,
        "a table named without its schema lands in whatever schema search_path gives (opt-in)",
    ),
    rule(
        "identifier-too-long",
        W,
        true,
        "an identifier longer than 63 bytes is silently truncated by PostgreSQL",
    ),
    rule(
        "ban-duplicate-column-assignments",
        E,
        true,
        "the same column assigned or defined twice in one statement",
    ),
    rule(
        "unused-ignore",
        W,
        true,
        "an -- evolve:ignore comment that suppresses nothing",
    ),
];

/// squawk's alias for both timeout rules.
const ALIASES: &[(&str, &[&str])] = &[(
    "require-timeout-settings",
    &["require-lock-timeout", "require-statement-timeout"],
)];

fn find_rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.name == name)
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    pub level: Level,
    pub script: String,
    pub line: u32,
    pub column: u32,
    pub message: String,
}

/// A file to lint: its name, text and parsed script.
pub struct LintInput<'a> {
    pub script: &'a str,
    pub text: &'a str,
    pub parsed: &'a Script,
}

/// Rule levels: the defaults of [`RULES`], changed by a configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    levels: BTreeMap<&'static str, Setting>,
}

/// A configuration that names no rule or no level.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(
        "line {line}: {name:?} is not a lint rule; 'evolve lint --list-rules' prints the rules"
    )]
    UnknownRule { line: u32, name: String },
    #[error("line {line}: {value:?} is not a level; use \"off\", \"warning\" or \"error\"")]
    UnknownLevel { line: u32, value: String },
    #[error("line {line}: expected rule = \"off\"|\"warning\"|\"error\", found {text:?}")]
    Syntax { line: u32, text: String },
}

impl Config {
    /// Sets `name` (a rule or squawk's alias `require-timeout-settings`).
    pub fn set(&mut self, name: &str, setting: Setting) -> bool {
        if let Some((_, rules)) = ALIASES.iter().find(|(a, _)| *a == name) {
            for r in *rules {
                self.set(r, setting);
            }
            return true;
        }
        match find_rule(name) {
            Some(r) => {
                self.levels.insert(r.name, setting);
                true
            }
            None => false,
        }
    }

    /// The level of `rule`'s findings, `None` when it is off.
    pub fn level(&self, rule: &str) -> Option<Level> {
        let r = find_rule(rule)?;
        self.levels
            .get(r.name)
            .copied()
            .unwrap_or(r.default)
            .level()
    }

    /// Reads `evolve-lint.toml`: `rule = "off" | "warning" | "error"` lines,
    /// optionally under a `[rules]` (or `[lint]`) table; `#` comments.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (n, raw) in text.lines().enumerate() {
            let line = u32::try_from(n + 1).unwrap_or(u32::MAX);
            let l = raw.split('#').next().unwrap_or("").trim();
            if l.is_empty() || l == "[rules]" || l == "[lint]" || l == "[lint.rules]" {
                continue;
            }
            let Some((k, v)) = l.split_once('=') else {
                return Err(ConfigError::Syntax {
                    line,
                    text: raw.trim().to_string(),
                });
            };
            let k = k.trim().trim_matches('"');
            let v = v.trim().trim_matches('"').trim_matches('\'');
            let setting = match v.to_ascii_lowercase().as_str() {
                "off" | "allow" | "false" => Setting::Off,
                "warning" | "warn" => Setting::Warning,
                "error" | "deny" => Setting::Error,
                _ => {
                    return Err(ConfigError::UnknownLevel {
                        line,
                        value: v.to_string(),
                    });
                }
            };
            if !config.set(k, setting) {
                return Err(ConfigError::UnknownRule {
                    line,
                    name: k.to_string(),
                });
            }
        }
        Ok(config)
    }
}

/// What the live database says, for the rules that depend on types, sizes
/// and dependents. Names are as PostgreSQL stores them; a table is keyed by
/// its name without schema (the first one on the search path wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogFacts {
    pub tables: BTreeMap<String, TableFacts>,
    /// The database's TimeZone setting, which a migration session starts with.
    pub timezone: Option<String>,
    /// Functions on the search path by name (without schema): whether one
    /// of them is VOLATILE (`provolatile = 'v'`). A default that calls only
    /// functions known here as not volatile fills existing rows without a
    /// rewrite.
    pub functions: BTreeMap<String, bool>,
    /// Domains on the search path (by name, without schema) with a CHECK
    /// or NOT NULL, their own or a base domain's: a column of one is added
    /// by a rewrite, default or not.
    pub checked_domains: BTreeSet<String>,
}

/// One table (or materialized view) of the live database.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableFacts {
    /// Column -> type as `format_type` prints it.
    pub columns: BTreeMap<String, String>,
    /// Columns that are NOT NULL already.
    pub not_null: BTreeSet<String>,
    /// CHECK (col IS NOT NULL) constraints: name -> (column, validated).
    pub not_null_checks: BTreeMap<String, (String, bool)>,
    /// Estimated rows (`reltuples`, `None` when never analyzed).
    pub rows: Option<u64>,
    /// Size of the table's main fork.
    pub bytes: u64,
    /// Column -> views and materialized views that read it.
    pub readers: BTreeMap<String, BTreeSet<String>>,
    /// Whether it is a materialized view.
    pub matview: bool,
    /// Whether it is a partitioned table; `rows` and `bytes` are then its
    /// partitions'.
    pub partitioned: bool,
}

/// What to lint with.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    pub config: Option<&'a Config>,
    pub catalog: Option<&'a CatalogFacts>,
}

/// Lints `files` in the order they apply, with the default levels and the
/// schema the files build.
pub fn lint(files: &[LintInput<'_>]) -> Vec<Finding> {
    lint_with(files, &Options::default())
}

/// The names (identifiers, folded) a file uses: what to ask the catalog
/// about.
pub fn names_in(text: &str) -> BTreeSet<String> {
    SourceFile::parse(text)
        .tree()
        .syntax()
        .descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| t.kind() == SyntaxKind::IDENT)
        .map(
            |t| match t.text().strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
                Some(inner) => inner.replace("\"\"", "\""),
                None => t.text().to_lowercase(),
            },
        )
        .collect()
}

/// A finding before levels and ignore comments: a byte offset in the file.
pub(crate) struct Raw {
    pub rule: &'static str,
    pub offset: usize,
    pub message: String,
}

/// Lints `files` in the order they apply.
pub fn lint_with(files: &[LintInput<'_>], options: &Options<'_>) -> Vec<Finding> {
    let default = Config::default();
    let config = options.config.unwrap_or(&default);
    let mut model = model::Model::new(options.catalog);
    let mut out = Vec::new();
    for file in files {
        let bom = if file.text.starts_with('\u{feff}') {
            3
        } else {
            0
        };
        let body = &file.text[bom..];
        let parse = SourceFile::parse(body);
        let tree = parse.tree();
        let mut raw: Vec<Raw> = Vec::new();
        let stmts: Vec<_> = tree.stmts().collect();
        let ranges: Vec<(usize, usize)> = stmts
            .iter()
            .map(|s| {
                let r = s.syntax().text_range();
                (usize::from(r.start()), usize::from(r.end()))
            })
            .collect();
        // The first error of each statement: the ones after it follow from it.
        let mut erred = BTreeSet::new();
        for e in parse.errors() {
            let offset = usize::from(e.range().start());
            let stmt = ranges.iter().position(|(s, e)| offset >= *s && offset < *e);
            if !erred.insert(stmt) {
                continue;
            }
            raw.push(Raw {
                rule: "syntax-error",
                offset: usize::from(e.range().start()),
                message: format!(
                    "{}; PostgreSQL would refuse this statement, so the migration fails here",
                    e.message()
                ),
            });
        }
        check::lint_file(&mut model, &stmts, file.parsed, config, &mut raw);
        let ignores = ignores(&tree, &ranges);
        let mut used: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); ignores.len()];
        raw.retain(|f| {
            let stmt = ranges
                .iter()
                .position(|(s, e)| f.offset >= *s && f.offset <= *e);
            let mut keep = true;
            for (i, ig) in ignores.iter().enumerate() {
                let applies = match ig.target {
                    Target::File => true,
                    Target::Statement(s) => Some(s) == stmt,
                };
                if applies && ig.rules.iter().any(|r| r == f.rule) {
                    used[i].insert(f.rule);
                    keep = false;
                }
            }
            keep
        });
        for (ig, used) in ignores.iter().zip(used) {
            for r in &ig.rules {
                let message = if find_rule(r).is_none() {
                    format!(
                        "-- evolve:ignore names {r:?}, which is not a lint rule; fix the name or remove it"
                    )
                } else if !used.contains(r.as_str()) {
                    format!("-- evolve:ignore {r} suppresses no finding here; remove it")
                } else {
                    continue;
                };
                raw.push(Raw {
                    rule: "unused-ignore",
                    offset: ig.offset,
                    message,
                });
            }
        }
        raw.sort_by_key(|f| f.offset);
        for f in raw {
            let Some(level) = config.level(f.rule) else {
                continue;
            };
            let (line, column) = line_col(file.text, f.offset + bom);
            out.push(Finding {
                rule: f.rule,
                level,
                script: file.script.to_string(),
                line,
                column,
                message: f.message,
            });
        }
    }
    out
}

enum Target {
    File,
    Statement(usize),
}

struct Ignore {
    offset: usize,
    rules: Vec<String>,
    target: Target,
}

/// `-- evolve:ignore RULE[, RULE]` before a statement and
/// `-- evolve:ignore-file RULE[, RULE]` anywhere.
fn ignores(tree: &SourceFile, ranges: &[(usize, usize)]) -> Vec<Ignore> {
    let mut out = Vec::new();
    for token in tree
        .syntax()
        .descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| t.kind() == SyntaxKind::COMMENT)
    {
        let Some(body) = token.text().strip_prefix("--") else {
            continue;
        };
        let body = body.trim();
        let Some(rest) = body
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case("evolve:"))
            .map(|_| &body[7..])
        else {
            continue;
        };
        let (file, list) = if let Some(l) = rest.strip_prefix("ignore-file") {
            (true, l)
        } else if let Some(l) = rest.strip_prefix("ignore") {
            (false, l)
        } else {
            continue;
        };
        let offset = usize::from(token.text_range().start());
        let rules: Vec<String> = list
            .split([',', ' '])
            .map(|r| r.trim().to_ascii_lowercase())
            .filter(|r| !r.is_empty())
            .collect();
        let target = if file {
            Target::File
        } else {
            match ranges.iter().position(|(_, e)| *e > offset) {
                Some(i) => Target::Statement(i),
                None => Target::File,
            }
        };
        out.push(Ignore {
            offset,
            rules,
            target,
        });
    }
    out
}
