//! `evolve lint`: reads the files (a migrations directory as `migrate`
//! reads it, or the files given), the level configuration and, with
//! `--database-url`, the live catalog, and prints the findings.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use evolve_core::migration::lint::{self, CatalogFacts, Config, Level, LintInput, Options};

use crate::cli::Format;
use crate::output::Out;

/// The configuration file read when --config is not given and it exists.
const DEFAULT_CONFIG: &str = "evolve-lint.toml";

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Files to lint, in the order they apply (default: every migration in --dir).
    pub files: Vec<PathBuf>,
    /// Directory of migration files.
    #[arg(long, default_value = "migrations", conflicts_with = "files")]
    pub dir: PathBuf,
    /// Also read symbolic links that lead out of --dir or into directories
    /// (loops are refused).
    #[arg(long, conflicts_with = "files")]
    pub follow_symlinks: bool,
    /// Read column types, NOT NULL checks, table sizes and the views that
    /// read each column from this database (postgres://user@host/db), for
    /// the tables the files name. Without it the rules know what the files
    /// themselves create.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Rule levels: lines `rule = "off" | "warning" | "error"`, optionally
    /// under `[rules]` (default: ./evolve-lint.toml when it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the rules with their default levels and exit.
    #[arg(long)]
    pub list_rules: bool,
}

pub async fn run(args: &LintArgs, out: &Out) -> anyhow::Result<ExitCode> {
    if args.list_rules {
        return list_rules(out);
    }
    let config = read_config(args.config.as_deref())?;
    let passes = load(args)?;
    let catalog = match &args.database_url {
        Some(url) => {
            let mut tables = std::collections::BTreeSet::new();
            for (_, text, _) in passes.iter().flatten() {
                tables.extend(lint::names_in(text));
            }
            let tables: Vec<String> = tables.into_iter().collect();
            Some(
                evolve_migrate::lint_catalog::lint_catalog(url, &tables)
                    .await
                    .map_err(|e| crate::cli::from_origin(e, crate::cli::url_origin(true)))
                    .context("cannot read the catalog for evolve lint --database-url")?,
            )
        }
        None => None,
    };
    let mut findings = Vec::new();
    for loaded in &passes {
        findings.extend(lint_loaded(loaded, &config, catalog.as_ref())?);
    }
    out.lint(&findings)?;
    let errors = findings.iter().filter(|f| f.level == Level::Error).count();
    Ok(if errors > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn list_rules(out: &Out) -> anyhow::Result<ExitCode> {
    match out.format() {
        Format::Json => out.text(&serde_json::to_string_pretty(&serde_json::json!({
            "rules": lint::RULES,
        }))?)?,
        _ => {
            for r in lint::RULES {
                let level = match r.default {
                    lint::Setting::Off => "off",
                    lint::Setting::Warning => "warning",
                    lint::Setting::Error => "error",
                };
                out.text(&format!("{:<46} {level:<8} {}", r.name, r.summary))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn read_config(path: Option<&Path>) -> anyhow::Result<Config> {
    let (path, required) = match path {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from(DEFAULT_CONFIG), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Config::default());
        }
        Err(e) => anyhow::bail!(
            "cannot read lint configuration {}: {e}; fix the path given to --config",
            path.display()
        ),
    };
    Config::parse(&text).map_err(|e| anyhow::anyhow!("lint configuration {}: {e}", path.display()))
}

type Loaded = Vec<(String, String, evolve_core::migration::Script)>;

/// The files to lint, in passes: the rules follow what the files of one
/// pass create, in the order they apply. A directory as `migrate` reads
/// it gives one pass per baseline migration (`B<version>__...`, each run
/// on an empty database, so each read on its own), then one of the
/// versioned files and the repeatable ones after them; files given are one
/// pass, in the order given.
fn load(args: &LintArgs) -> anyhow::Result<Vec<Loaded>> {
    if args.files.is_empty() {
        let symlinks = if args.follow_symlinks {
            evolve_migrate::Symlinks::Follow
        } else {
            evolve_migrate::Symlinks::WithinDir
        };
        let set = evolve_migrate::MigrationSet::load(&args.dir, symlinks)?;
        let entry = |f: evolve_migrate::MigrationFile| (f.script, f.text, f.parsed);
        let mut passes: Vec<Loaded> = set.baseline.into_values().map(|f| vec![entry(f)]).collect();
        passes.push(
            set.versioned
                .into_values()
                .chain(set.repeatable.into_values())
                .map(entry)
                .collect(),
        );
        return Ok(passes);
    }
    let mut v = Vec::new();
    for path in &args.files {
        let text = crate::output::read_input(path).map_err(anyhow::Error::msg)?;
        let parsed = evolve_core::migration::parse_script(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        v.push((path.display().to_string(), text, parsed));
    }
    Ok(vec![v])
}

fn lint_loaded(
    loaded: &Loaded,
    config: &Config,
    catalog: Option<&CatalogFacts>,
) -> anyhow::Result<Vec<lint::Finding>> {
    // squawk's parser recurses; give it a stack that fits what
    // parse_script already bounded.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(1 << 30)
            .spawn_scoped(scope, || {
                let inputs: Vec<LintInput> = loaded
                    .iter()
                    .map(|(script, text, parsed)| LintInput {
                        script,
                        text,
                        parsed,
                    })
                    .collect();
                lint::lint_with(
                    &inputs,
                    &Options {
                        config: Some(config),
                        catalog,
                    },
                )
            })
            .map_err(|e| anyhow::anyhow!("cannot start the lint thread: {e}"))?
            .join()
            .map_err(|_| {
                anyhow::anyhow!("the SQL parser failed; please report it with the migration files")
            })
    })
}
