//! Command-line arguments and dispatch.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use evolve_core::migration::Version;
use evolve_migrate::{ApplyOptions, Options};
use evolve_pg::QualifiedName;

use crate::output::Out;

/// evolve: schemas that change while everything keeps running.
#[derive(Debug, Parser)]
#[command(name = "evolve", version, about)]
pub struct Cli {
    /// Output format of every command that reports.
    #[arg(
        long,
        global = true,
        default_value = "text",
        value_parser = PossibleValuesParser::new(["text", "json"])
            .map(|s| if s == "json" { Format::Json } else { Format::Text })
    )]
    pub format: Format,
    /// Which log lines go to stderr: a level (off, error, warn, info,
    /// debug, trace) or tracing's filter syntax, e.g.
    /// "warn,evolve_pipeline=debug". Wins over EVOLVE_LOG, which takes the
    /// same. Default: info for the pipeline's own lines under `evolve
    /// pipeline run`, the access log under `evolve registry serve`, warn
    /// for everything else.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// How log lines are written to stderr: text (coloured only when
    /// stderr is a terminal and NO_COLOR is not set), or json, one JSON
    /// object per line with timestamp, level, target, message and the
    /// line's fields.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// The format of log lines on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    /// Graphviz DOT (evolve deps only); Graphviz renders it: `dot -Tsvg >
    /// deps.svg`.
    Dot,
    /// Mermaid flowchart (evolve deps only).
    Mermaid,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Migrations as code for PostgreSQL.
    Migrate(MigrateArgs),
    /// Write a breaking change as expand/contract migration files (expand,
    /// backfill, switch, contract) that old and new application versions
    /// survive.
    Change(crate::change::ChangeArgs),
    /// Backfill columns in keyset batches: resumable, throttled, idempotent.
    Backfill(crate::backfill::BackfillArgs),
    /// Change a table's shape online (e.g. integer to bigint): shadow
    /// table, captured changes, batched copy, a short swap, dependents
    /// rebuilt.
    Rewrite(crate::backfill::RewriteArgs),
    /// Every view, materialized view, policy, trigger, generated column and
    /// function that depends on a table or one of its columns.
    Deps(DepsArgs),
    /// Refresh materialized views in dependency order, lowest layer first.
    Refresh(RefreshArgs),
    /// For every statement of the pending migrations: the locks it takes
    /// and for how long, whether it rewrites or scans, the table's size,
    /// the dependents rebuilt, and the safer form; from the live catalog.
    Plan(crate::plan::PlanArgs),
    /// Check migration files for changes that lock, rewrite or silently
    /// break things.
    Lint(crate::lint::LintArgs),
    /// Schema compatibility (Avro, Protobuf, JSON Schema) for CI.
    Compat(crate::compat::CompatArgs),
    /// A schema registry speaking Confluent Schema Registry's REST API.
    Registry(crate::registry::RegistryArgs),
    /// Change data capture from PostgreSQL, MySQL/MariaDB or Kafka into a
    /// stable JSON interface.
    Pipeline(crate::pipeline::PipelineArgs),
    /// Run control statements (CREATE SOURCE, SHOW TABLES, ...) against a
    /// running pipeline.
    Sql(crate::pipeline::SqlArgs),
    /// Every object of a running pipeline with its state.
    Status(crate::pipeline::StatusArgs),
    /// Replicas into nodes at other schema versions: skip the upstream
    /// transaction a halted replica stopped at.
    Replicate(crate::replicate::ReplicateArgs),
    /// Apply pending migrations one node at a time, checking first that no
    /// replica would halt, and waiting after each node until every replica
    /// has caught up; a stopped rollout resumes with the next node.
    Rollout(crate::rollout::RolloutArgs),
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
    /// What the consumers of each interface read: one row per field, with
    /// the cast applied and the consumer.
    ///
    /// Consumers are the views and materialized views on a sink's table
    /// (directly or over one another), found in the sink database's
    /// catalog and parsed, and the subscribers that declared their fields
    /// (`evolve subscribe NAME --fields a,b --as CONSUMER`). What cannot be
    /// resolved to fields is listed as reading the whole document.
    /// `migrate apply --pipeline` refuses a file that drops, renames, or
    /// retypes beyond a consumer's cast, a field a consumer reads.
    Contracts(crate::contracts::ContractsArgs),
    /// A tour against throwaway PostgreSQL clusters it starts and removes:
    /// the pipeline absorbing upstream schema changes (the default),
    /// `evolve demo migrate`, `evolve demo mysql` or `evolve demo kafka`.
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
#[command(group(ArgGroup::new("which").required(true).args(["names", "all", "status"])))]
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
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
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
    /// The pipeline's absorb flows on a MariaDB upstream (binlog), into a
    /// PostgreSQL sink; needs the MariaDB server package too.
    Mysql,
    /// A Kafka table (Avro, schema registry) whose producer changes its
    /// schema, into a PostgreSQL sink; needs Java and the Kafka jars
    /// (`cargo xtask demo kafka` fetches them).
    Kafka,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(subcommand)]
    pub verb: MigrateVerb,
}

/// The database and its history table.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection string (postgres://user@host:port/database).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// History table, `name` or `schema.name` (an existing
    /// flyway_schema_history can be adopted as it is) [default:
    /// evolve_schema_history, or flyway_schema_history under a Flyway
    /// configuration].
    #[arg(long)]
    pub history_table: Option<String>,
    /// Flyway configuration file (flyway.toml or flyway.conf) whose settings
    /// apply where no flag is given, read last, after the working
    /// directory's files of its kind (flyway.toml and flyway.user.toml, else
    /// flyway.conf; not the home directory's) and those FLYWAY_CONFIG_FILES
    /// lists, as Flyway's -configFiles adds to them; FLYWAY_* variables
    /// override it.
    #[arg(long, value_name = "FILE")]
    pub flyway_config: Option<PathBuf>,
}

/// The migration files.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// Directory of migration files (searched recursively) [default:
    /// migrations, or Flyway's first filesystem: location].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also read symbolic links that lead out of --dir or into directories
    /// (loops are refused).
    #[arg(long)]
    pub follow_symlinks: bool,
    /// A Flyway placeholder: `${NAME}` in the files is replaced by VALUE
    /// (repeat for more).
    #[arg(long = "placeholder", value_name = "NAME=VALUE", value_parser = parse_placeholder)]
    pub placeholders: Vec<(String, String)>,
    /// What starts a placeholder [default: ${].
    #[arg(long)]
    pub placeholder_prefix: Option<String>,
    /// What ends a placeholder [default: }].
    #[arg(long)]
    pub placeholder_suffix: Option<String>,
    /// Leave `${...}` in the files as it is.
    #[arg(long)]
    pub no_placeholder_replacement: bool,
}

/// Verbs that change the history take the migration lock.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// Fail at once if another run holds the migration lock.
    #[arg(long)]
    pub no_wait: bool,
    /// Recorded as installed_by (default: the database user).
    #[arg(long)]
    pub installed_by: Option<String>,
}

/// How `apply` treats a migration that waits for a table lock.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// lock_timeout for every migration transaction (e.g. 3s, 500ms).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub lock_timeout: Duration,
    /// How many times a file is retried after its lock_timeout expires.
    #[arg(long, default_value_t = 5)]
    pub lock_retries: u32,
    /// First wait before a retry, doubled each time (at most 30s).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub lock_retry_delay: Duration,
}

#[derive(Debug, Subcommand)]
pub enum MigrateVerb {
    /// Every migration, file or history row, with its state.
    Status {
        #[command(flatten)]
        db: DatabaseArgs,
        #[command(flatten)]
        files: DirArgs,
    },
    /// Apply pending migrations in order.
    Apply {
        /// Apply versioned migrations up to and including this version
        /// (one a file or the history has; `2.1?`: which none need have),
        /// `latest` (every one, the default), `current` (none beyond the
        /// applied version) or `next` (the first pending one), as Flyway's
        /// target; repeatable migrations run whatever it is.
        #[arg(long, value_parser = parse_target)]
        target: Option<evolve_migrate::Target>,
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
        /// Apply every pending migration in one transaction: one failure
        /// rolls back all of them (Flyway's group).
        #[arg(long)]
        group: bool,
        /// Run a file with a statement PostgreSQL refuses in a transaction
        /// outside one, as if it began with '-- evolve:no-transaction'
        /// (Flyway's mixed).
        #[arg(long)]
        mixed: bool,
        /// Apply pending files while their '-- evolve:phase' is at most
        /// PHASE (expand < backfill < switch < contract); stop before the
        /// first later one, or before an earlier one (the next change).
        /// Files without a phase never stop the run; repeatable files run
        /// only when it is not stopped.
        #[arg(long, visible_alias = "phase", value_name = "PHASE", value_parser = parse_phase)]
        until_phase: Option<evolve_core::migration::Phase>,
        /// What to do with a file that hands off to a backfill job
        /// ('-- evolve:backfill NAME'): start the job in the background,
        /// wait for it, or only record the hand-off.
        #[arg(long, value_enum, default_value = "start")]
        backfill: crate::change::BackfillMode,
        /// Run backfill jobs to the end before going on (--backfill wait).
        #[arg(long)]
        wait_backfill: bool,
        /// A running pipeline's admin API (e.g. http://127.0.0.1:7800):
        /// before each file, the table versions that ingest the columns it
        /// drops, retypes or renames are swapped onto versions without
        /// them, so no table stalls [default: pipeline in the Flyway
        /// configuration]. The token comes from EVOLVE_ADMIN_TOKEN or
        /// --pipeline-config.
        #[arg(long, value_name = "URL")]
        pipeline: Option<String>,
        /// The pipeline's evolve.toml, for its admin API's token (and
        /// address, when --pipeline is not given).
        #[arg(long, value_name = "FILE")]
        pipeline_config: Option<PathBuf>,
        /// How long --pipeline waits for each new table version to be
        /// hydrated (e.g. 60s, 10min).
        #[arg(long, value_name = "DURATION", default_value = "10min", value_parser = crate::pipeline::parse_wait)]
        pipeline_timeout: Duration,
        /// With --pipeline: let the files take FIELD (`field` or
        /// `interface.field`) from the consumers that read it (repeat for
        /// more fields); otherwise such a file is refused before it runs.
        #[arg(long, value_name = "FIELD")]
        allow_breaking_contract: Vec<String>,
        #[command(flatten)]
        db: DatabaseArgs,
        #[command(flatten)]
        files: DirArgs,
        #[command(flatten)]
        lock: LockArgs,
        #[command(flatten)]
        retry: RetryArgs,
    },
    /// Fail if an applied file was edited or is missing, a migration failed
    /// or is pending (as Flyway's validate; ignoreMigrationPatterns =
    /// *:pending lets pending ones be), a pending file sorts before an
    /// applied one, or a file has a version that repair marked deleted.
    Validate {
        #[command(flatten)]
        db: DatabaseArgs,
        #[command(flatten)]
        files: DirArgs,
    },
    /// Mark an existing database as being at VERSION: files at or below it
    /// are never applied.
    Baseline {
        /// The version the database is at (e.g. 40 or 2024_01_01) [default:
        /// Flyway's baselineVersion, else 1].
        #[arg(long, value_parser = parse_version)]
        version: Option<Version>,
        /// Recorded as the baseline row's description (default: << Flyway Baseline >>, as Flyway writes it).
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        db: DatabaseArgs,
        #[command(flatten)]
        lock: LockArgs,
    },
    /// After a deliberate edit: realign checksums, remove failed rows, mark
    /// deleted files as deleted.
    Repair {
        #[command(flatten)]
        db: DatabaseArgs,
        #[command(flatten)]
        files: DirArgs,
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Create the next versioned migration file: one above the highest
    /// version among the files and, when a database is given, every version
    /// its history ever recorded (deleted ones included).
    New {
        /// What the migration does, e.g. "add postal code".
        description: String,
        #[command(flatten)]
        files: DirArgs,
        #[command(flatten)]
        db: DatabaseArgs,
    },
}

fn parse_placeholder(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

fn parse_phase(s: &str) -> Result<evolve_core::migration::Phase, String> {
    evolve_core::migration::Phase::parse(s)
        .ok_or_else(|| format!("{s:?} is not a phase; use expand, backfill, switch or contract"))
}

fn parse_version(s: &str) -> Result<Version, String> {
    Version::parse(s).map_err(|e| e.to_string())
}

/// What `--target` and `flyway.target` name, as Flyway reads `target`: a
/// version, `<version>?`, `latest`, `current` or `next`
/// ([`evolve_migrate::Target::parse`]).
fn parse_target(s: &str) -> Result<evolve_migrate::Target, String> {
    evolve_migrate::Target::parse(s)
}

/// Parses a duration as evolve writes them everywhere (`3s`, `500ms`,
/// `2min`, `1m30s`; [`evolve_core::control::parse_duration`]), or a bare
/// number of `bare` units (milliseconds, as PostgreSQL reads
/// `lock_timeout`, for most options).
pub(crate) fn parse_duration_or(bare: Duration, s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let parsed = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse::<u32>().ok().and_then(|n| bare.checked_mul(n))
    } else {
        evolve_core::control::parse_duration(t)
    };
    parsed.ok_or_else(|| {
        format!(
            "{s:?} is not a duration; use {}",
            evolve_core::control::DURATION_FORMAT
        )
    })
}

/// [`parse_duration_or`] with a bare number in milliseconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_duration_or(Duration::from_millis(1), s)
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
            tour: Tour::Pipeline | Tour::Mysql,
            ..
        })
    )
}

pub async fn run(cli: Cli, out: &mut Out) -> anyhow::Result<ExitCode> {
    if let Command::Lint(args) = &cli.command {
        return crate::lint::run(args, out).await;
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
    if let Command::Plan(_) = &cli.command {
        let Command::Plan(args) = cli.command else {
            unreachable!("matched above")
        };
        return crate::plan::run(args, out).await;
    }
    run_command(cli, out).await.map(|()| ExitCode::SUCCESS)
}

/// An empty connection string when libpq's environment names a server or
/// database (`PGHOST`, `PGHOSTADDR`, `PGPORT`, `PGDATABASE`, `PGUSER`,
/// `PGSERVICE`), so that evolve connects where psql would; `None`
/// otherwise, and the command asks for `--database-url`.
pub(crate) fn libpq_environment() -> Option<String> {
    const VARIABLES: [&str; 6] = [
        "PGHOST",
        "PGHOSTADDR",
        "PGPORT",
        "PGDATABASE",
        "PGUSER",
        "PGSERVICE",
    ];
    VARIABLES
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
        .then(String::new)
}

async fn run_command(cli: Cli, out: &mut Out) -> anyhow::Result<()> {
    match cli.command {
        Command::Migrate(args) => migrate(args, out).await,
        Command::Change(args) => crate::change::run(args, out).await,
        Command::Backfill(args) => crate::backfill::run(args, out).await,
        Command::Rewrite(args) => crate::backfill::rewrite(args, out).await,
        Command::Deps(args) => {
            let origin = url_origin(args.database_url.is_some());
            let Some(url) = args.database_url.or_else(libpq_environment) else {
                bail!(
                    "no database given; pass --database-url postgres://user@host/db, or set DATABASE_URL or libpq's PGHOST/PGDATABASE/PGSERVICE as for psql"
                );
            };
            let report = evolve_migrate::dependents(&url, &args.target)
                .await
                .map_err(|e| from_origin(e, origin))?;
            Out::new(args.format).deps(&report)
        }
        Command::Refresh(args) => {
            let origin = url_origin(args.database_url.is_some());
            let Some(url) = args.database_url.or_else(libpq_environment) else {
                bail!(
                    "no database given; pass --database-url postgres://user@host/db, or set DATABASE_URL or libpq's PGHOST/PGDATABASE/PGSERVICE as for psql"
                );
            };
            if args.status {
                let status = evolve_migrate::refresh_status(&url)
                    .await
                    .map_err(|e| from_origin(e, origin))?;
                return out.refresh_status(&status);
            }
            let mut events = out.clone();
            evolve_migrate::refresh_matviews(&url, &args.names, &mut |r| events.refreshed(r))
                .await
                .map_err(|e| from_origin(e, origin))?;
            Ok(())
        }
        Command::Demo(args) => crate::demo::run(args, out).await,
        Command::Registry(args) => crate::registry::run(args).await,
        Command::Pipeline(args) => crate::pipeline::run(args, out).await,
        Command::Status(args) => crate::pipeline::status(args, out).await,
        Command::Drift(args) => crate::pipeline::drift(args, out).await,
        Command::Contracts(args) => crate::contracts::run(args, out).await,
        Command::Replicate(args) => crate::replicate::run(args, out).await,
        Command::Rollout(args) => crate::rollout::run(args, out).await,
        Command::Lint(_)
        | Command::Compat(_)
        | Command::Sql(_)
        | Command::Subscribe(_)
        | Command::Plan(_) => {
            unreachable!("handled in run")
        }
    }
}

async fn migrate(args: MigrateArgs, out: &mut Out) -> anyhow::Result<()> {
    match args.verb {
        MigrateVerb::New {
            description,
            files,
            db,
        } => {
            let flyway = flyway_settings(db.flyway_config.as_deref())?;
            let opts = match db
                .database_url
                .clone()
                .or(flyway.database_url.clone())
                .or_else(libpq_environment)
            {
                Some(_) => Some(options(&db, &files, None, None)?.0),
                None => None,
            };
            let dir = files
                .dir
                .clone()
                .or(flyway.dir.clone())
                .unwrap_or_else(|| PathBuf::from("migrations"));
            let path = evolve_migrate::new_migration_named(
                &dir,
                symlinks(&files),
                &flyway.naming(),
                &description,
                opts.as_ref(),
            )
            .await?;
            out.created(&path)
        }
        MigrateVerb::Status { db, files } => {
            let report = evolve_migrate::status(&options(&db, &files, None, None)?.0).await?;
            out.status(&report)
        }
        MigrateVerb::Apply {
            target,
            dry_run,
            out_of_order,
            populate_in_transaction,
            group,
            mixed,
            until_phase,
            backfill,
            wait_backfill,
            pipeline,
            pipeline_config,
            pipeline_timeout,
            allow_breaking_contract,
            db,
            files,
            lock,
            retry,
        } => {
            let (opts, flyway) = options(&db, &files, Some(&lock), Some(&retry))?;
            let target = match (target, &flyway.target) {
                (Some(t), _) => t,
                (None, Some(t)) => parse_target(t)
                    .map_err(|e| anyhow::anyhow!("Flyway setting flyway.target: {e}"))?,
                (None, None) => evolve_migrate::Target::Latest,
            };
            let mut apply_opts = ApplyOptions {
                target,
                out_of_order: out_of_order || flyway.out_of_order == Some(true),
                dry_run,
                populate_in_transaction,
                group: group || flyway.group == Some(true),
                mixed: mixed || flyway.mixed == Some(true),
                until_phase,
                // Flyway's migrate refuses schemas with objects but no
                // history; baseline (or baselineOnMigrate) is the way out.
                require_history_or_empty: true,
                backfill: Some(std::sync::Arc::new(crate::change::runner(
                    &opts.database_url,
                    backfill,
                    wait_backfill,
                )?)),
                ..ApplyOptions::default()
            };
            flyway
                .configure_apply(&mut apply_opts)
                .map_err(anyhow::Error::msg)?;
            let pipeline = pipeline.or(flyway.pipeline.clone());
            if pipeline.is_some() || pipeline_config.is_some() {
                let admin = crate::pipeline::AdminArg {
                    admin: pipeline,
                    config: pipeline_config,
                }
                .resolve_as("--pipeline")?;
                apply_opts.pipeline = Some(std::sync::Arc::new(
                    crate::coordinate::HttpCoordinator::new(admin),
                ));
                apply_opts.pipeline_timeout = Some(pipeline_timeout);
                apply_opts.allow_breaking_contract = allow_breaking_contract;
            }
            let mut event_out = out.clone();
            let report = evolve_migrate::apply(&opts, &apply_opts, &mut |e| {
                event_out.event(&e);
            })
            .await?;
            out.apply_summary(&report)
        }
        MigrateVerb::Validate { db, files } => {
            let report = evolve_migrate::validate(&options(&db, &files, None, None)?.0).await?;
            if out.format() == Format::Json {
                return out.validated(&report);
            }
            let applied = match report.applied {
                1 => "1 applied migration matches its file".to_string(),
                n => format!("{n} applied migrations match their files"),
            };
            out.text(&format!(
                "{}: {applied}; {} pending",
                report.history_table, report.pending
            ))
        }
        MigrateVerb::Baseline {
            version,
            description,
            db,
            lock,
        } => {
            let no_files = DirArgs {
                dir: None,
                follow_symlinks: false,
                placeholders: Vec::new(),
                placeholder_prefix: None,
                placeholder_suffix: None,
                no_placeholder_replacement: false,
            };
            let (opts, flyway) = options(&db, &no_files, Some(&lock), None)?;
            let version = match (version, &flyway.baseline_version) {
                (Some(v), _) => v,
                (None, Some(v)) => Version::parse(v)
                    .map_err(|e| anyhow::anyhow!("Flyway setting flyway.baselineVersion: {e}"))?,
                (None, None) => Version::parse("1").map_err(|e| anyhow::anyhow!("{e}"))?,
            };
            let description = description.or(flyway.baseline_description);
            let mut event_out = out.clone();
            let report =
                evolve_migrate::baseline(&opts, &version, description.as_deref(), &mut |e| {
                    event_out.event(&e)
                })
                .await?;
            out.changed("baselined", &report)
        }
        MigrateVerb::Repair { db, files, lock } => {
            let (opts, _) = options(&db, &files, Some(&lock), None)?;
            let mut event_out = out.clone();
            let report = evolve_migrate::repair(&opts, &mut |e| event_out.event(&e)).await?;
            out.changed("repaired", &report)
        }
    }
}

fn symlinks(files: &DirArgs) -> evolve_migrate::Symlinks {
    if files.follow_symlinks {
        evolve_migrate::Symlinks::Follow
    } else {
        evolve_migrate::Symlinks::WithinDir
    }
}

/// Flyway's configuration files read before `FLYWAY_CONFIG_FILES`' and
/// `--flyway-config`'s, lowest precedence first: `flyway.conf`, `flyway.toml` and
/// `flyway.user.toml` in the working directory, the project's own. Flyway's
/// command line also reads them from the home directory (and its
/// installation's `conf/`); evolve does not: a `~/flyway.conf` kept for
/// other projects would change every project evolve runs in (its
/// database, and its history table, which a Flyway configuration makes
/// `flyway_schema_history`). `FLYWAY_CONFIG_FILES` names such files
/// explicitly.
fn default_config_files() -> Vec<PathBuf> {
    ["flyway.conf", "flyway.toml", "flyway.user.toml"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

/// Flyway's configuration: the files [`evolve_migrate::config_files`]
/// picks (those of [`default_config_files`] that exist, those
/// `FLYWAY_CONFIG_FILES` lists, then `file`), later files overriding
/// earlier ones, then the `FLYWAY_*` variables. Environment variables in
/// the files are expanded as Flyway expands them (`${NAME}` in a
/// flyway.conf, `${env.NAME}` in a flyway.toml); in flyway.toml files the
/// `[environments.<name>]` that applies is the one `FLYWAY_ENVIRONMENT`,
/// else the last file's `[flyway] environment`, names. Each key evolve
/// does not apply is named in a warning on stderr.
fn flyway_settings(file: Option<&std::path::Path>) -> anyhow::Result<evolve_migrate::FlywayConfig> {
    let listed = std::env::var("FLYWAY_CONFIG_FILES").ok();
    let picked =
        evolve_migrate::config_files(file, listed.as_deref(), &default_config_files(), &|p| {
            p.is_file()
        })
        .map_err(|e| anyhow::anyhow!("Flyway configuration: {e}"))?;
    for w in &picked.warnings {
        eprintln!("warning: Flyway configuration: {w}");
    }
    let lookup = |name: &str| std::env::var(name).ok();
    let mut texts = Vec::new();
    for path in &picked.files {
        let text = std::fs::read_to_string(path).with_context(|| {
            let way_out = if file.is_some_and(|f| f == path) {
                "fix the path given to --flyway-config"
            } else {
                "fix FLYWAY_CONFIG_FILES, which names it"
            };
            format!(
                "Flyway configuration {} cannot be read; {way_out}",
                path.display()
            )
        })?;
        texts.push(text);
    }
    let fix = |path: &PathBuf, e: evolve_migrate::ConfigError| {
        anyhow::anyhow!("Flyway configuration {}: {e}; fix the file", path.display())
    };
    // The environment of flyway.toml files is picked once they are all
    // read, as Flyway picks it.
    let mut environment = std::env::var("FLYWAY_ENVIRONMENT")
        .ok()
        .filter(|e| !e.is_empty());
    if environment.is_none() {
        for (path, text) in picked.files.iter().zip(&texts) {
            if path.extension().is_some_and(|e| e == "toml")
                && let Some(e) = evolve_migrate::toml_environment(text).map_err(|e| fix(path, e))?
            {
                environment = Some(e);
            }
        }
    }
    let mut pairs = Vec::new();
    let mut url_file = None;
    for (path, text) in picked.files.iter().zip(&texts) {
        let parsed = if path.extension().is_some_and(|e| e == "toml") {
            evolve_migrate::parse_toml_in(text, environment.as_deref(), &lookup)
                .map_err(|e| fix(path, e))?
        } else {
            let (text, unset) = evolve_migrate::expand_conf_env(text, &lookup);
            for w in &unset {
                eprintln!("warning: Flyway configuration {}: {w}", path.display());
            }
            let parsed = evolve_migrate::parse_conf(&text);
            if let Some((_, value)) = parsed
                .iter()
                .find(|(k, _)| k == evolve_migrate::CONF_ENVIRONMENT)
            {
                anyhow::bail!(
                    "Flyway configuration {}: {}",
                    path.display(),
                    evolve_migrate::conf_environment_error(value)
                );
            }
            parsed
        };
        if parsed.iter().any(|(k, _)| k == "flyway.url") {
            url_file = Some(path);
        }
        pairs.extend(parsed);
    }
    let mut env = evolve_migrate::from_env(std::env::vars());
    // Flyway reads only .conf files in FLYWAY_CONFIG_FILE_ENCODING; a
    // flyway.toml is UTF-8 whatever it says.
    if !picked
        .files
        .iter()
        .any(|p| p.extension().is_some_and(|e| e != "toml"))
    {
        env.retain(|(k, _)| k != "FLYWAY_CONFIG_FILE_ENCODING");
    }
    let present = !picked.files.is_empty() || !env.is_empty();
    let url_source = if env.iter().any(|(k, _)| k == "flyway.url") {
        Some("FLYWAY_URL".to_string())
    } else {
        url_file.map(|p| format!("flyway.url in {}", p.display()))
    };
    pairs.extend(env);
    let mut config = evolve_migrate::FlywayConfig::from_pairs(&pairs);
    config.url_source = url_source;
    if present && config.history_table.is_none() {
        config.history_table = Some("flyway_schema_history".into());
    }
    for w in &config.warnings {
        eprintln!("warning: Flyway configuration: {w}");
    }
    Ok(config)
}

/// Where the connection string clap read for `--database-url` came from:
/// the flag when the command line has it, else the `DATABASE_URL`
/// variable clap fell back on. A connection error's way out names it, so
/// that someone who exported a wrong `DATABASE_URL` is not sent looking
/// for a flag they never typed.
pub(crate) fn database_url_origin(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> &'static str {
    let flag = args.into_iter().skip(1).any(|a| {
        let a = a.to_string_lossy();
        a == "--database-url" || a.starts_with("--database-url=")
    });
    if flag {
        "--database-url"
    } else {
        "DATABASE_URL"
    }
}

/// What a connection error's way out names for a connection string that
/// was `given` by `--database-url` or `DATABASE_URL` (else libpq's
/// variables gave it).
pub(crate) fn url_origin(given: bool) -> &'static str {
    if given {
        database_url_origin(std::env::args_os())
    } else {
        "the PG* environment variables (PGHOST, PGPORT, PGUSER, PGDATABASE, PGSERVICE)"
    }
}

/// `e`, whose connection error (if it is one) names `origin` as where the
/// connection string came from.
pub(crate) fn from_origin(
    e: evolve_migrate::MigrateError,
    origin: &'static str,
) -> evolve_migrate::MigrateError {
    match e {
        evolve_migrate::MigrateError::Pg(pg) => {
            evolve_migrate::MigrateError::Pg(pg.given_by(origin))
        }
        other => other,
    }
}

/// The library's options from the flags a verb has, then Flyway's
/// configuration; the others keep their defaults.
pub(crate) fn options(
    db: &DatabaseArgs,
    files: &DirArgs,
    lock: Option<&LockArgs>,
    retry: Option<&RetryArgs>,
) -> anyhow::Result<(Options, evolve_migrate::FlywayConfig)> {
    let flyway = flyway_settings(db.flyway_config.as_deref())?;
    let source = flyway
        .url_source
        .clone()
        .unwrap_or_else(|| "flyway.url".into());
    if db.database_url.is_none()
        && let Some(error) = &flyway.database_url_error
    {
        bail!("Flyway configuration {source}: {error}");
    }
    let from_flyway = db.database_url.is_none() && flyway.database_url.is_some();
    let Some(url) = db
        .database_url
        .clone()
        .or(flyway.database_url.clone())
        .or_else(libpq_environment)
    else {
        bail!(
            "no database given; pass --database-url postgres://user@host/db, or set DATABASE_URL or libpq's PGHOST/PGDATABASE/PGSERVICE as for psql"
        );
    };
    let (schema, name) = match (&db.history_table, &flyway.history_table) {
        (Some(t), _) => {
            QualifiedName::parse_user(t).map_err(|e| anyhow::anyhow!("--history-table {e}"))?
        }
        (None, Some(t)) => (flyway.history_schema.clone(), t.clone()),
        (None, None) => (None, evolve_migrate::DEFAULT_HISTORY_TABLE.to_string()),
    };
    let dir = files
        .dir
        .clone()
        .or(flyway.dir.clone())
        .unwrap_or_else(|| PathBuf::from("migrations"));
    let mut opts = Options::new(url, dir);
    if from_flyway {
        // Named in a connection error's way out; one string per run.
        opts.database_url_given = Box::leak(source.into_boxed_str());
    } else {
        opts.database_url_given = url_origin(db.database_url.is_some());
    }
    opts.history_table = (schema, name);
    opts.symlinks = symlinks(files);
    let p = &mut opts.placeholders;
    p.values = flyway.placeholders.clone();
    // A flag wins over the configuration, also for a name in another case.
    for (name, value) in &files.placeholders {
        p.set(name, value);
    }
    if let Some(prefix) = files
        .placeholder_prefix
        .clone()
        .or(flyway.placeholder_prefix.clone())
    {
        p.prefix = prefix;
    }
    if let Some(suffix) = files
        .placeholder_suffix
        .clone()
        .or(flyway.placeholder_suffix.clone())
    {
        p.suffix = suffix;
    }
    p.replace = !files.no_placeholder_replacement && flyway.placeholder_replacement != Some(false);
    opts.installed_by = flyway.installed_by.clone();
    flyway.configure(&mut opts);
    if let Some(lock) = lock {
        opts.wait_for_lock = !lock.no_wait;
        if lock.installed_by.is_some() {
            opts.installed_by = lock.installed_by.clone();
        }
    }
    if let Some(retry) = retry {
        opts.lock_timeout = retry.lock_timeout;
        opts.lock_retries = retry.lock_retries;
        opts.retry_delay = retry.lock_retry_delay;
    }
    Ok((opts, flyway))
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
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 1d "), Ok(Duration::from_secs(86_400)));
        assert_eq!(
            parse_duration_or(Duration::from_secs(1), "90"),
            Ok(Duration::from_secs(90))
        );
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("99999999999999999999").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
