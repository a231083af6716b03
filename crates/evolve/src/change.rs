//! `evolve change`: writes an expand/contract sequence of migration files,
//! and the runner that `evolve migrate apply` hands backfill files to.

use std::pin::Pin;

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use evolve_backfill::{BackfillOptions, BatchOptions};
use evolve_migrate::change::{BackfillHandoff, BackfillRunner, Change, ChangeWritten};
use evolve_pg::quote_ident;

use crate::cli::Format;
use crate::cli::{DatabaseArgs, DirArgs};
use crate::output::Out;

#[derive(Debug, Args)]
pub struct ChangeArgs {
    #[command(subcommand)]
    pub verb: ChangeVerb,
}

/// Where the files go and which database describes the table.
#[derive(Debug, Args)]
pub struct Target {
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub files: DirArgs,
}

#[derive(Debug, Subcommand)]
pub enum ChangeVerb {
    /// Rename a column: add NEW beside OLD, keep them in step both ways,
    /// backfill NEW, switch, drop OLD.
    RenameColumn {
        /// The table, `name` or `schema.name`.
        table: String,
        old: String,
        new: String,
        #[command(flatten)]
        target: Target,
    },
    /// Change a column's type through a shadow column of the new type,
    /// renamed into place at the switch.
    ChangeType {
        table: String,
        column: String,
        /// The new type, e.g. bigint or "varchar(200)".
        #[arg(name = "TYPE")]
        to: String,
        /// How each value converts, an expression over the table's columns
        /// (required when the change could lose data or there is no cast).
        #[arg(long, value_name = "EXPR")]
        using: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Make a column NOT NULL through CHECK ... NOT VALID, VALIDATE, SET
    /// NOT NULL and DROP CONSTRAINT; with --default, NULLs (old and newly
    /// written) become EXPR.
    SetNotNull {
        table: String,
        column: String,
        #[arg(long, value_name = "EXPR")]
        default: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Split a column into new ones, e.g. `split-column users name --into
    /// "first_name=split_part(name, ' ', 1)" --into "last_name=split_part(name,
    /// ' ', 2)" --merge "first_name || ' ' || last_name"`.
    SplitColumn {
        table: String,
        column: String,
        /// `NAME=EXPR`: a new column and its value from the old columns
        /// (repeat for each new column).
        #[arg(long, value_name = "NAME=EXPR", required = true, value_parser = parse_into)]
        into: Vec<(String, String)>,
        /// The old column's value from the new columns, so writers of the
        /// new shape keep the old column right.
        #[arg(long, value_name = "EXPR")]
        merge: String,
        #[command(flatten)]
        target: Target,
    },
    /// Add a foreign key: index built concurrently (when none exists), the
    /// constraint added NOT VALID, then validated.
    AddForeignKey {
        table: String,
        /// The referencing columns (comma-separated or repeated).
        #[arg(long, value_delimiter = ',', required = true)]
        columns: Vec<String>,
        /// The referenced table.
        #[arg(long)]
        references: String,
        /// The referenced columns, in the order of --columns.
        #[arg(long, value_delimiter = ',', required = true)]
        to: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
}

fn parse_into(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, expr)) if !name.trim().is_empty() && !expr.trim().is_empty() => {
            Ok((name.trim().to_string(), expr.trim().to_string()))
        }
        _ => Err(format!(
            "{s:?} is not NAME=EXPR; write the new column, '=', and its value, e.g. \"first_name=split_part(name, ' ', 1)\""
        )),
    }
}

pub async fn run(args: ChangeArgs, out: &mut Out) -> anyhow::Result<()> {
    let (change, target) = match args.verb {
        ChangeVerb::RenameColumn {
            table,
            old,
            new,
            target,
        } => (Change::RenameColumn { table, old, new }, target),
        ChangeVerb::ChangeType {
            table,
            column,
            to,
            using,
            target,
        } => (
            Change::ChangeType {
                table,
                column,
                to,
                using,
            },
            target,
        ),
        ChangeVerb::SetNotNull {
            table,
            column,
            default,
            target,
        } => (
            Change::SetNotNull {
                table,
                column,
                default,
            },
            target,
        ),
        ChangeVerb::SplitColumn {
            table,
            column,
            into,
            merge,
            target,
        } => (
            Change::SplitColumn {
                table,
                column,
                into,
                merge,
            },
            target,
        ),
        ChangeVerb::AddForeignKey {
            table,
            columns,
            references,
            to,
            target,
        } => (
            Change::AddForeignKey {
                table,
                columns,
                references,
                to,
            },
            target,
        ),
    };
    let (opts, _) = crate::cli::options(&target.db, &target.files, None, None)?;
    let written = evolve_migrate::change::write(&opts, &change).await?;
    report(out, &written)
}

fn report(out: &Out, w: &ChangeWritten) -> anyhow::Result<()> {
    if out.format() == Format::Json {
        return out.text(&serde_json::to_string(w)?);
    }
    for f in &w.files {
        out.text(&format!("created {} ({})", f.path.display(), f.phase))?;
    }
    let mut next = String::from(
        "apply one phase at a time with 'evolve migrate apply --until-phase expand', then backfill, switch and contract, deploying the application between them",
    );
    if let Some(job) = &w.backfill_job {
        next.push_str(&format!(
            "; the backfill step starts job {job} ('evolve backfill status {job}')"
        ));
    }
    out.text(&next)
}

/// What `apply` does with a file that hands off to a backfill job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BackfillMode {
    /// Start the job in the background and go on (a deploy never waits).
    #[default]
    Start,
    /// Run the job to the end before going on.
    Wait,
    /// Record the hand-off only; run the job with 'evolve backfill run'.
    Defer,
}

/// Hands backfill files to `evolve backfill`.
#[derive(Debug)]
pub struct Runner {
    pub database_url: String,
    pub mode: BackfillMode,
}

/// `evolve backfill run` arguments for the job (without the database).
fn job_args(job: &BackfillHandoff) -> Result<(evolve_backfill::Spec, Vec<String>), String> {
    let spec = evolve_backfill::script::parse_file(&job.script, &job.statement)?;
    let mut args = vec![
        "backfill".to_string(),
        "run".to_string(),
        "--name".to_string(),
        job.job.clone(),
        "--table".to_string(),
        spec.table.clone(),
    ];
    for a in &spec.set {
        args.push("--set".to_string());
        args.push(format!("{} = {}", quote_ident(&a.column), a.expr));
    }
    if let Some(w) = &spec.filter {
        args.push("--where".to_string());
        args.push(w.clone());
    }
    Ok((spec, args))
}

fn shell_line(args: &[String]) -> String {
    args.iter()
        .map(|a| evolve_pg::shell_word(a))
        .collect::<Vec<_>>()
        .join(" ")
}

impl BackfillRunner for Runner {
    fn hand_off<'a>(
        &'a self,
        job: &'a BackfillHandoff,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<String, String>> + 'a>> {
        Box::pin(async move {
            let (spec, args) = job_args(job)?;
            match self.mode {
                BackfillMode::Defer => Ok(format!(
                    "deferred; run it with: evolve {}",
                    shell_line(&args)
                )),
                BackfillMode::Wait => {
                    let opts = BackfillOptions {
                        database_url: self.database_url.clone(),
                        name: job.job.clone(),
                        spec,
                        batches: BatchOptions::default(),
                    };
                    let status = evolve_backfill::run(&opts, &mut |_| {})
                        .await
                        .map_err(|e| format!("backfill job {} failed: {e}", job.job))?;
                    Ok(format!(
                        "ran to the end: {} rows in {} batches",
                        status.rows_done, status.batches
                    ))
                }
                BackfillMode::Start => {
                    let exe = std::env::current_exe().map_err(|e| {
                        format!("cannot find the evolve binary to start the backfill: {e}")
                    })?;
                    let mut cmd = std::process::Command::new(exe);
                    cmd.args(&args)
                        .env("DATABASE_URL", &self.database_url)
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null());
                    #[cfg(unix)]
                    {
                        use std::os::unix::process::CommandExt;
                        // Its own process group: it outlives this run and a
                        // Ctrl-C of the deploy.
                        cmd.process_group(0);
                    }
                    let child = cmd
                        .spawn()
                        .map_err(|e| format!("cannot start backfill job {}: {e}", job.job))?;
                    Ok(format!(
                        "started in the background (process {}); follow it with evolve backfill status {}, restart it with: evolve {}",
                        child.id(),
                        job.job,
                        shell_line(&args)
                    ))
                }
            }
        })
    }
}

/// The runner for `apply`, from its flags.
pub fn runner(database_url: &str, mode: BackfillMode, wait: bool) -> anyhow::Result<Runner> {
    let mode = match (mode, wait) {
        (BackfillMode::Defer, true) => {
            bail!("--wait-backfill and --backfill defer contradict each other; choose one")
        }
        (_, true) => BackfillMode::Wait,
        (m, false) => m,
    };
    Ok(Runner {
        database_url: database_url.to_string(),
        mode,
    })
}
