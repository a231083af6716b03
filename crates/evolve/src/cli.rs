//! Command-line arguments and dispatch.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use evolve_core::migration::Version;
use evolve_migrate::{ApplyOptions, Options};
use evolve_pg::QualifiedName;

use crate::output::Out;

/// evolve: schemas that change while everything keeps running.
#[derive(Debug, Parser)]
#[command(name = "evolve", version, about)]
pub struct Cli {
    /// Output format of every command that reports.
    #[arg(long, global = true, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    /// Graphviz (evolve deps only).
    Dot,
    /// Mermaid flowchart (evolve deps only).
    Mermaid,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Migrations as code for PostgreSQL.
    Migrate(MigrateArgs),
    /// Every view, materialized view, policy, trigger, generated column and
    /// function that depends on a table or one of its columns.
    Deps(DepsArgs),
    /// Refresh materialized views in dependency order, lowest layer first.
    Refresh(RefreshArgs),
    /// Check migration files for changes that lock, rewrite or silently
    /// break things.
    Lint(LintArgs),
    /// Schema compatibility (Avro, Protobuf, JSON Schema) for CI.
    Compat(crate::compat::CompatArgs),
    /// A schema registry speaking Confluent Schema Registry's REST API.
    Registry(crate::registry::RegistryArgs),
    /// Change data capture from PostgreSQL into a stable JSON interface.
    Pipeline(crate::pipeline::PipelineArgs),
    /// Run control statements (CREATE SOURCE, SHOW TABLES, ...) against a
    /// running pipeline.
    Sql(crate::pipeline::SqlArgs),
    /// Every object of a running pipeline with its state.
    Status(crate::pipeline::StatusArgs),
    /// Follow a materialized view of a running pipeline: its changes as
    /// JSON lines on stdout, until SIGINT or SIGTERM.
    ///
    /// Each line is one JSON object with a "type". A "change" is a
    /// document entering (diff 1) or leaving (diff -1) the view at upstream
    /// position ts, with its key and data; an update is a -1 and a +1 at
    /// the same ts. A "progress" line says everything up to its ts has
    /// been sent. An "error" line ends a stream that cannot go on (exit 1,
    /// the error also on stderr), e.g. a subscriber too slow to keep up.
    Subscribe(crate::pipeline::SubscribeArgs),
    /// Tables of a running pipeline whose upstream table changed since
    /// their columns were pinned, and stalled tables.
    ///
    /// One row per table that differs: columns added or dropped upstream
    /// (column_drift), an ingested column's type or typmod changed
    /// (type_drift), the table stalled (stalled, with the error), the
    /// upstream table renamed or dropped (table_renamed, table_dropped),
    /// or its upstream not answering (unknown). The pipeline reads the
    /// upstream catalogs for each request. No rows means everything
    /// matches.
    ///
    /// The exit code is 0 whether or not there is drift, and 1 on errors
    /// (the admin API cannot be reached, --source names no source).
    Drift(crate::pipeline::DriftArgs),
    /// A tour against throwaway PostgreSQL clusters it starts and removes:
    /// the pipeline absorbing upstream schema changes (the default), or
    /// `evolve demo migrate`.
    ///
    /// The pipeline tour needs nothing but the PostgreSQL server package.
    /// It starts an upstream and a sink cluster, puts an `orders` table
    /// under write load, runs a pipeline into the sink with a consumer
    /// view `open_orders` on it, and walks through four upstream schema
    /// changes (a column added, a planned drop, an unplanned drop, and the
    /// same absorbed automatically with ABSORB = 'auto'), printing each
    /// statement it runs and, after each step, the writes the sink received
    /// against the rows that really changed. It takes well under a minute
    /// and exits 1 if any expectation failed.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Files to lint, in the order they apply (default: every migration in --dir).
    pub files: Vec<PathBuf>,
    /// Directory of migration files.
    #[arg(long, default_value = "migrations", conflicts_with = "files")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct RefreshArgs {
    /// Materialized views to refresh (name or schema.name).
    pub names: Vec<String>,
    /// Refresh every materialized view.
    #[arg(long, conflicts_with = "names")]
    pub all: bool,
    /// Report each materialized view's last refresh and whether it is stale.
    #[arg(long, conflicts_with_all = ["names", "all"])]
    pub status: bool,
    /// PostgreSQL connection string (postgres://user@host:port/database).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct DepsArgs {
    /// table, schema.table, table.column or schema.table.column.
    pub target: String,
    /// PostgreSQL connection string (postgres://user@host:port/database).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Which tour.
    #[arg(value_enum, default_value_t = Tour::Pipeline)]
    pub tour: Tour,
    /// At the end, keep the throwaway clusters (and the pipeline) running
    /// and print how to reach them, until Ctrl-C; then clean up.
    #[arg(long)]
    pub keep: bool,
}

/// The tours of `evolve demo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tour {
    /// A CDC pipeline absorbing upstream schema changes under write load.
    Pipeline,
    /// `evolve migrate`: files, history, checksums, lock_timeout, rollback.
    Migrate,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// PostgreSQL connection string (postgres://user@host:port/database).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Directory of migration files (searched recursively).
    #[arg(long, global = true, default_value = "migrations")]
    pub dir: PathBuf,
    /// History table, `name` or `schema.name` (an existing
    /// flyway_schema_history can be adopted as it is).
    #[arg(long, global = true, default_value = evolve_migrate::DEFAULT_HISTORY_TABLE)]
    pub history_table: String,
    /// lock_timeout for every migration transaction (e.g. 3s, 500ms).
    #[arg(long, global = true, default_value = "3s", value_parser = parse_duration)]
    pub lock_timeout: Duration,
    /// How many times a file is retried after its lock_timeout expires.
    #[arg(long, global = true, default_value_t = 5)]
    pub lock_retries: u32,
    /// First wait before a retry, doubled each time (at most 30s).
    #[arg(long, global = true, default_value = "500ms", value_parser = parse_duration)]
    pub lock_retry_delay: Duration,
    /// Fail at once if another run holds the migration lock.
    #[arg(long, global = true)]
    pub no_wait: bool,
    /// Recorded as installed_by (default: the database user).
    #[arg(long, global = true)]
    pub installed_by: Option<String>,
    #[command(subcommand)]
    pub verb: MigrateVerb,
}

#[derive(Debug, Subcommand)]
pub enum MigrateVerb {
    /// Every migration, file or history row, with its state.
    Status,
    /// Apply pending migrations in order.
    Apply {
        /// Apply versioned migrations up to and including this version.
        #[arg(long)]
        target: Option<String>,
        /// Print what would run; run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also apply pending files that sort before applied versions.
        #[arg(long)]
        out_of_order: bool,
        /// Recreate rebuilt materialized views WITH DATA inside the
        /// migration's transaction (readers never see them unpopulated; the
        /// base table stays locked while they fill).
        #[arg(long)]
        populate_in_transaction: bool,
    },
    /// Fail if an applied file was edited or is missing, a migration failed,
    /// or a pending file sorts before an applied one.
    Validate,
    /// Mark an existing database as being at VERSION.
    Baseline {
        #[arg(long)]
        version: String,
        #[arg(long)]
        description: Option<String>,
    },
    /// After a deliberate edit: realign checksums, remove failed rows, mark
    /// deleted files as deleted.
    Repair,
    /// Create the next versioned migration file.
    New {
        /// What the migration does, e.g. "add postal code".
        description: String,
    },
}

/// Parses `3s`, `500ms`, `2min`, or a bare number of milliseconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration; use e.g. 3s or 500ms"))?;
    match unit.trim() {
        "" | "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "min" | "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?} is not a duration; use e.g. 3s or 500ms")),
    }
}

/// Runs the command; the exit code is 0 unless the command itself says
/// otherwise (`lint` with errors, `compat check` incompatible). Errors are
/// mapped to exit codes by `main`.
/// Whether the command serves requests (and wants every core) rather than
/// making round trips to PostgreSQL (which one thread does fastest).
pub fn wants_multi_thread(cli: &Cli) -> bool {
    matches!(
        &cli.command,
        Command::Registry(crate::registry::RegistryArgs {
            verb: crate::registry::RegistryVerb::Serve { .. }
        }) | Command::Pipeline(crate::pipeline::PipelineArgs {
            verb: crate::pipeline::PipelineVerb::Run { .. }
        }) | Command::Demo(DemoArgs {
            tour: Tour::Pipeline,
            ..
        })
    )
}

pub async fn run(cli: Cli, out: &mut Out) -> anyhow::Result<ExitCode> {
    if let Command::Lint(args) = &cli.command {
        return lint(args, out);
    }
    if let Command::Compat(_) = &cli.command {
        let Command::Compat(args) = cli.command else {
            unreachable!("matched above")
        };
        return crate::compat::run(args, out);
    }
    if let Command::Sql(_) = &cli.command {
        let Command::Sql(args) = cli.command else {
            unreachable!("matched above")
        };
        return crate::pipeline::sql(args, out).await;
    }
    if let Command::Subscribe(_) = &cli.command {
        let Command::Subscribe(args) = cli.command else {
            unreachable!("matched above")
        };
        return crate::pipeline::subscribe(args, out).await;
    }
    run_command(cli, out).await.map(|()| ExitCode::SUCCESS)
}

async fn run_command(cli: Cli, out: &mut Out) -> anyhow::Result<()> {
    if matches!(cli.format, Format::Dot | Format::Mermaid)
        && !matches!(cli.command, Command::Deps(_))
    {
        bail!("--format dot and --format mermaid are for evolve deps; use text or json here");
    }
    match cli.command {
        Command::Migrate(args) => migrate(args, out).await,
        Command::Deps(args) => {
            let Some(url) = args.database_url else {
                bail!(
                    "no database given; pass --database-url postgres://user@host/db or set DATABASE_URL"
                );
            };
            let report = evolve_migrate::dependents(&url, &args.target).await?;
            out.deps(&report)
        }
        Command::Refresh(args) => {
            let Some(url) = args.database_url else {
                bail!(
                    "no database given; pass --database-url postgres://user@host/db or set DATABASE_URL"
                );
            };
            if args.status {
                let status = evolve_migrate::refresh_status(&url).await?;
                return out.refresh_status(&status);
            }
            if !args.all && args.names.is_empty() {
                bail!("name the materialized views to refresh, or pass --all");
            }
            let mut events = out.clone();
            evolve_migrate::refresh_matviews(&url, &args.names, &mut |r| events.refreshed(r))
                .await?;
            Ok(())
        }
        Command::Demo(args) => crate::demo::run(args, out).await,
        Command::Registry(args) => crate::registry::run(args).await,
        Command::Pipeline(args) => crate::pipeline::run(args).await,
        Command::Status(args) => crate::pipeline::status(args, out).await,
        Command::Drift(args) => crate::pipeline::drift(args, out).await,
        Command::Lint(_) | Command::Compat(_) | Command::Sql(_) | Command::Subscribe(_) => {
            unreachable!("handled in run")
        }
    }
}

fn lint(args: &LintArgs, out: &Out) -> anyhow::Result<ExitCode> {
    use evolve_core::migration::lint::{LintInput, lint};
    // Files in the order they apply: a directory as `migrate` reads it, or
    // the files given, in the order given.
    let loaded: Vec<(String, String, evolve_core::migration::Script)> = if args.files.is_empty() {
        let set = evolve_migrate::MigrationSet::load(&args.dir)?;
        set.versioned
            .into_values()
            .chain(set.repeatable.into_values())
            .map(|f| (f.script, f.text, f.parsed))
            .collect()
    } else {
        let mut v = Vec::new();
        for path in &args.files {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let parsed = evolve_core::migration::parse_script(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            v.push((path.display().to_string(), text, parsed));
        }
        v
    };
    // squawk's parser recurses; give it a stack that fits what
    // parse_script already bounded.
    let findings = std::thread::scope(|scope| {
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
                lint(&inputs)
            })
            .map_err(|e| anyhow::anyhow!("cannot start the lint thread: {e}"))?
            .join()
            .map_err(|_| {
                anyhow::anyhow!("the SQL parser failed; please report it with the migration files")
            })
    })?;
    out.lint(&findings)?;
    let errors = findings
        .iter()
        .filter(|f| f.level == evolve_core::migration::lint::Level::Error)
        .count();
    Ok(if errors > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn migrate(args: MigrateArgs, out: &mut Out) -> anyhow::Result<()> {
    if let MigrateVerb::New { description } = &args.verb {
        let path = evolve_migrate::new_migration(&args.dir, description)?;
        return out.created(&path);
    }
    let opts = options(&args)?;
    match args.verb {
        MigrateVerb::Status => {
            let report = evolve_migrate::status(&opts).await?;
            out.status(&report)
        }
        MigrateVerb::Apply {
            target,
            dry_run,
            out_of_order,
            populate_in_transaction,
        } => {
            let target = target
                .map(|t| Version::parse(&t))
                .transpose()
                .context("--target")?;
            let apply_opts = ApplyOptions {
                target,
                out_of_order,
                dry_run,
                populate_in_transaction,
            };
            let mut event_out = out.clone();
            let report = evolve_migrate::apply(&opts, &apply_opts, &mut |e| {
                event_out.event(&e);
            })
            .await?;
            out.apply_summary(&report)
        }
        MigrateVerb::Validate => {
            let report = evolve_migrate::validate(&opts).await?;
            out.validated(&report)
        }
        MigrateVerb::Baseline {
            version,
            description,
        } => {
            let version = Version::parse(&version).context("--version")?;
            let mut event_out = out.clone();
            let report =
                evolve_migrate::baseline(&opts, &version, description.as_deref(), &mut |e| {
                    event_out.event(&e)
                })
                .await?;
            out.changed("baselined", &report)
        }
        MigrateVerb::Repair => {
            let mut event_out = out.clone();
            let report = evolve_migrate::repair(&opts, &mut |e| event_out.event(&e)).await?;
            out.changed("repaired", &report)
        }
        MigrateVerb::New { .. } => unreachable!("handled above"),
    }
}

fn options(args: &MigrateArgs) -> anyhow::Result<Options> {
    let Some(url) = args.database_url.clone() else {
        bail!("no database given; pass --database-url postgres://user@host/db or set DATABASE_URL");
    };
    let (schema, name) = QualifiedName::parse_user(&args.history_table)
        .map_err(|e| anyhow::anyhow!("--history-table {e}"))?;
    let mut opts = Options::new(url, args.dir.clone());
    opts.history_table = (schema, name);
    opts.lock_timeout = args.lock_timeout;
    opts.lock_retries = args.lock_retries;
    opts.retry_delay = args.lock_retry_delay;
    opts.wait_for_lock = !args.no_wait;
    opts.installed_by = args.installed_by.clone();
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1500"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
