//! `evolve compat check`: the compatibility engine for CI.
//!
//! Exit codes: 0 compatible, 1 incompatible (each incompatibility printed),
//! 2 unusable input (a file that cannot be read or a schema that does not
//! parse).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use evolve_compat::{Mode, Reference, Schema, SchemaType};
use serde::Serialize;

use crate::cli::Format;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct CompatArgs {
    #[command(subcommand)]
    pub verb: CompatVerb,
}

#[derive(Debug, Subcommand)]
pub enum CompatVerb {
    /// Check NEW against OLD schemas (newest first) under a compatibility mode.
    Check {
        /// Schema type.
        #[arg(long = "type", value_enum)]
        schema_type: TypeArg,
        /// NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE,
        /// FULL or FULL_TRANSITIVE.
        #[arg(long, default_value = "BACKWARD", value_parser = parse_mode)]
        mode: Mode,
        /// A referenced schema, NAME=FILE (Avro full name, Protobuf import
        /// path, JSON Schema $ref); repeatable.
        #[arg(long = "reference", value_name = "NAME=FILE")]
        references: Vec<String>,
        /// The new schema.
        new: PathBuf,
        /// Previous versions, newest first.
        #[arg(required = true)]
        old: Vec<PathBuf>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TypeArg {
    Avro,
    Protobuf,
    Json,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

/// Input that cannot be used: exit code 2.
#[derive(Debug)]
pub struct Unusable(pub String);

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unusable {}

/// One finding in `--format json`: `against` is the old file's path as
/// given (the library's index into the old schemas is not shown).
#[derive(Serialize)]
struct JsonFinding<'a> {
    against: String,
    direction: evolve_compat::Direction,
    #[serde(flatten)]
    incompatibility: &'a evolve_compat::Incompatibility,
}

pub fn run(args: CompatArgs, out: &Out) -> anyhow::Result<ExitCode> {
    let CompatVerb::Check {
        schema_type,
        mode,
        references,
        new,
        old,
    } = args.verb;
    let schema_type = match schema_type {
        TypeArg::Avro => SchemaType::Avro,
        TypeArg::Protobuf => SchemaType::Protobuf,
        TypeArg::Json => SchemaType::Json,
    };
    let read = |path: &PathBuf| crate::output::read_input(path).map_err(Unusable);
    let mut refs = Vec::new();
    for r in &references {
        let Some((name, file)) = r.split_once('=') else {
            return Err(Unusable(format!(
                "--reference {r:?} is not NAME=FILE; e.g. --reference common.proto=schemas/common.proto"
            ))
            .into());
        };
        refs.push(Reference {
            name: name.to_string(),
            schema: read(&PathBuf::from(file))?,
        });
    }
    // The new schema as a registry would accept it; the earlier versions
    // as it reads what it stored (a JSON Schema pattern Java refuses is
    // refused only in a schema offered as new).
    let parse = |path: &PathBuf, new: bool| -> anyhow::Result<Schema> {
        let text = read(path)?;
        let parsed = if new {
            Schema::parse(schema_type, &text, &refs)
        } else {
            Schema::parse_stored(schema_type, &text, &refs)
        };
        parsed.map_err(|e| {
            let hint = match &e.missing_import {
                Some(name) => format!(" with --reference {name}=FILE"),
                None => String::new(),
            };
            Unusable(format!("{}: {e}{hint}", path.display())).into()
        })
    };
    let new_schema = parse(&new, true)?;
    let previous = old
        .iter()
        .map(|p| parse(p, false))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let findings = evolve_compat::check(mode, &new_schema, &previous);
    let compatible = findings.is_empty();
    match out.format() {
        Format::Json => {
            let items: Vec<JsonFinding> = findings
                .iter()
                .map(|f| JsonFinding {
                    against: old[f.against].display().to_string(),
                    direction: f.direction,
                    incompatibility: &f.incompatibility,
                })
                .collect();
            out.json_value(&serde_json::json!({
                "compatible": compatible,
                "mode": mode.as_str(),
                "new": new.display().to_string(),
                "checked": old.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "findings": items,
            }))?;
        }
        _ => {
            for f in &findings {
                out.text(&format!(
                    "{} ({}): {} at {}: {}",
                    old[f.against].display(),
                    match f.direction {
                        evolve_compat::Direction::Backward => "backward",
                        evolve_compat::Direction::Forward => "forward",
                    },
                    f.incompatibility.kind,
                    f.incompatibility.path,
                    f.incompatibility.message
                ))?;
            }
            if compatible {
                out.text(&format!(
                    "{} is {} compatible with {}",
                    new.display(),
                    mode.as_str(),
                    if mode == Mode::None {
                        "anything".to_string()
                    } else {
                        old.iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ))?;
            } else {
                out.text(&format!(
                    "{} is not {} compatible: {} incompatibilit{}",
                    new.display(),
                    mode.as_str(),
                    findings.len(),
                    if findings.len() == 1 { "y" } else { "ies" }
                ))?;
            }
        }
    }
    Ok(if compatible {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
