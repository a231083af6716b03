//! `evolve backfill` and `evolve rewrite`: flags, the progress bar on a
//! terminal, and events as text lines or JSON Lines.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use evolve_backfill::{BackfillOptions, BatchOptions, Event, JobStatus, Limits, Spec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::Format;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct BackfillArgs {
    #[command(subcommand)]
    pub verb: BackfillVerb,
}

/// The database.
#[derive(Debug, Args)]
pub struct Db {
    /// PostgreSQL connection string (postgres://user@host:port/database).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

impl Db {
    fn url(&self) -> anyhow::Result<&str> {
        match &self.database_url {
            Some(u) => Ok(u),
            None if crate::cli::libpq_environment().is_some() => Ok(""),
            None => bail!(
                "no database given; pass --database-url postgres://user@host/db, or set DATABASE_URL or libpq's PGHOST/PGDATABASE/PGSERVICE as for psql"
            ),
        }
    }

    /// `e`, whose connection error (if it is one) names what gave the
    /// connection string: the flag, `DATABASE_URL` or libpq's variables.
    fn given(&self, e: evolve_backfill::BackfillError) -> evolve_backfill::BackfillError {
        match e {
            evolve_backfill::BackfillError::Pg(pg) => evolve_backfill::BackfillError::Pg(
                pg.given_by(crate::cli::url_origin(self.database_url.is_some())),
            ),
            other => other,
        }
    }
}

/// How batches run and when they pause.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Rows per batch (the first batch's size when --batch-time adapts it).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Target duration of one batch: the size adapts to hold it (0 keeps
    /// --batch fixed).
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub batch_time: Duration,
    /// Pause while any replica's replay lag (pg_stat_replication) is above
    /// this, e.g. 5s.
    #[arg(long, value_parser = parse_duration)]
    pub max_lag: Option<Duration>,
    /// Pause while any logical replication slot retains more WAL than this,
    /// e.g. 1GB or 512MB.
    #[arg(long, value_parser = parse_bytes)]
    pub max_slot_wal: Option<u64>,
    /// lock_timeout of every statement: the batches, preparing them, the
    /// verify query, a rewrite's swap.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub lock_timeout: Duration,
    /// How many times a batch is retried after its lock_timeout expired,
    /// a deadlock or a serialization failure.
    #[arg(long, default_value_t = 5)]
    pub lock_retries: u32,
    /// First wait before such a retry, doubled each time (at most 30s).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub lock_retry_delay: Duration,
    /// How often a paused run looks again.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub poll: Duration,
    /// After each batch, wait RATIO times the batch's duration before the
    /// next, e.g. 1 to leave the server half the time (gh-ost's
    /// --nice-ratio); 0 runs batches back to back.
    #[arg(long, value_name = "RATIO", default_value_t = 0.0, value_parser = parse_nice)]
    pub nice: f64,
}

fn parse_nice(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a ratio from 0 to 100 (e.g. 0.5: after a batch of 200 ms, wait 100 ms)"
        )),
    }
}

impl BatchArgs {
    fn options(&self) -> BatchOptions {
        BatchOptions {
            batch: self.batch,
            batch_time: Some(self.batch_time).filter(|d| !d.is_zero()),
            limits: Limits {
                max_lag: self.max_lag,
                max_slot_wal: self.max_slot_wal,
            },
            lock_timeout: self.lock_timeout,
            lock_retries: self.lock_retries,
            lock_retry_delay: self.lock_retry_delay,
            poll: self.poll,
            nice: self.nice,
        }
    }
}

/// `evolve backfill run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The table, `name` or `schema.name`.
    #[arg(long, required_unless_present = "file", conflicts_with = "file")]
    pub table: Option<String>,
    /// `column = expression`, repeatable; the expression may read the
    /// row's columns.
    #[arg(long = "set", value_name = "ASSIGNMENT", conflicts_with = "file")]
    pub set: Vec<String>,
    /// Only rows matching this condition.
    #[arg(long = "where", value_name = "CONDITION", conflicts_with = "file")]
    pub filter: Option<String>,
    /// A backfill file: one `UPDATE table SET ... [WHERE ...]`
    /// statement, optionally after `-- evolve:batch N`; the job is
    /// named after the file.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The job's name (default: table.column, or the file's name).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub batches: BatchArgs,
    #[command(flatten)]
    pub db: Db,
}

#[derive(Debug, Subcommand)]
pub enum BackfillVerb {
    /// Set columns of every row in keyset batches along the primary key,
    /// resumable, throttled and idempotent; then verify nothing is left.
    ///
    /// Each batch is one transaction; progress is kept in
    /// evolve_backfill_jobs, so a run stopped at any moment (even killed)
    /// resumes at the next batch when started again. Only rows whose
    /// column IS DISTINCT FROM the new value are changed. The exit code is
    /// 1 when rows still need the change at the end.
    Run(Box<RunArgs>),
    /// Every backfill job (or the one named) with its progress and state.
    Status {
        name: Option<String>,
        #[command(flatten)]
        db: Db,
    },
    /// Make a job wait before its next batch until resumed.
    Pause {
        name: String,
        #[command(flatten)]
        db: Db,
    },
    /// Let a paused job go on.
    Resume {
        name: String,
        #[command(flatten)]
        db: Db,
    },
    /// Stop a job after its current batch; a later run starts it afresh.
    Cancel {
        name: String,
        #[command(flatten)]
        db: Db,
    },
}

/// Online rewrite of a table into a new shape.
#[derive(Debug, Args)]
pub struct RewriteArgs {
    /// The table, `name` or `schema.name`.
    pub table: String,
    /// An ALTER TABLE action for the new shape, repeatable, e.g. "ALTER
    /// COLUMN id TYPE bigint".
    #[arg(
        long = "alter",
        value_name = "ACTION",
        required_unless_present_any = ["revert", "abort", "drop_old"]
    )]
    pub alter: Vec<String>,
    /// Keep the old table (and keep recording changes for --revert).
    #[arg(long, conflicts_with = "revert")]
    pub keep_old: bool,
    /// Swap back to the old table kept by --keep-old.
    #[arg(long)]
    pub revert: bool,
    /// Give up a rewrite that has not swapped yet: drop its shadow table,
    /// log and triggers.
    #[arg(long, conflicts_with_all = ["revert", "keep_old"])]
    pub abort: bool,
    /// Keep the new table of a finished --keep-old rewrite for good: stop
    /// recording its changes and drop the old table.
    #[arg(long, conflicts_with_all = ["revert", "keep_old", "abort"])]
    pub drop_old: bool,
    #[command(flatten)]
    pub batches: BatchArgs,
    #[command(flatten)]
    pub db: Db,
}

use crate::cli::parse_duration;

/// Parses `1GB`, `512MB`, `64kB` (powers of 1024, as PostgreSQL reads
/// them) or a bare number of bytes.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("{s:?} is not a size; use e.g. 1GB, 512MB or 64kB");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1 << 10,
        "mb" | "m" => 1 << 20,
        "gb" | "g" => 1 << 30,
        "tb" | "t" => 1 << 40,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// Renders events: JSON Lines, or a progress bar on a terminal, or plain
/// lines.
struct Reporter {
    format: Format,
    bar: Option<ProgressBar>,
}

impl Reporter {
    fn new(format: Format) -> Reporter {
        let bar = (format == Format::Text && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {human_pos}/{human_len} keys, {per_sec:0}, ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar
        });
        Reporter { format, bar }
    }

    /// Write errors are ignored: a closed stdout (`| head`) must not stop
    /// a backfill half-way.
    fn say(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => line(text),
        }
    }

    fn event(&mut self, e: &Event) {
        if self.format == Format::Json {
            if let Ok(json) = serde_json::to_string(e) {
                line(&json);
            }
            return;
        }
        match e {
            Event::Started {
                job,
                table,
                resumed,
                rows_done,
                batches,
                estimated_rows,
            } => {
                if let Some(bar) = &self.bar {
                    bar.set_length(*estimated_rows);
                    bar.set_message(job.clone());
                }
                if let Some(rewrite) = job.strip_prefix("rewrite of ") {
                    self.say(&format!(
                        "rewrite {rewrite}: copying about {estimated_rows} rows{}",
                        if *resumed {
                            format!(", resuming after {rows_done}")
                        } else {
                            String::new()
                        }
                    ));
                } else if *resumed {
                    self.say(&format!(
                        "backfill {job} on {table}: resuming after {batches} batches ({rows_done} rows done)"
                    ));
                } else {
                    self.say(&format!(
                        "backfill {job} on {table}: about {estimated_rows} rows"
                    ));
                }
            }
            Event::Batch { keys_seen, .. } => {
                if let Some(bar) = &self.bar {
                    if bar.length().is_some_and(|l| *keys_seen > l) {
                        bar.set_length(*keys_seen);
                    }
                    bar.set_position(*keys_seen);
                }
            }
            Event::Paused { job, message, .. } => self.say(&format!("{job}: paused: {message}")),
            Event::Resumed { job, paused_ms } => {
                self.say(&format!("{job}: going on after {} ms", paused_ms))
            }
            Event::Finished {
                job,
                rows_done,
                batches,
                remaining,
                ms,
            } => {
                if let Some(bar) = &self.bar {
                    bar.finish_and_clear();
                }
                self.say(&format!(
                    "backfill {job}: {rows_done} rows changed in {batches} batches, {:.1} s; verify: {remaining} rows left",
                    *ms as f64 / 1000.0
                ));
            }
            Event::Phase { table, phase } => self.say(&format!("rewrite {table}: {phase}")),
            Event::Replayed { table, entries, ms } => self.say(&format!(
                "rewrite {table}: replayed {entries} changes in {ms} ms"
            )),
            Event::Swapped {
                table,
                attempts,
                ms,
                rebuilt,
            } => self.say(&format!(
                "rewrite {table}: swapped in {ms} ms (attempt {attempts}){}",
                if rebuilt.is_empty() {
                    String::new()
                } else {
                    format!("; rebuilt {}", rebuilt.join(", "))
                }
            )),
        }
    }
}

fn line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
    let _ = stdout.flush();
}

/// One job as one line of the table: the state starred while a run holds
/// the job's lock (a paused job's run waits, `paused*`), and a stored
/// error's detail and hint lines joined onto that line.
fn job_line(j: &JobStatus) -> String {
    let state = if j.running {
        format!("{}*", j.state)
    } else {
        j.state.clone()
    };
    format!(
        "{:<24} {:<28} {:<10} {:>12} {:>8} {}{}",
        j.name,
        j.table,
        state,
        j.rows_done,
        j.batches,
        j.updated_at,
        j.error
            .as_ref()
            .map(|e| format!(
                "  {}",
                e.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
            .unwrap_or_default()
    )
}

fn print_jobs(out: &Out, jobs: &[JobStatus]) -> anyhow::Result<()> {
    match out.format() {
        Format::Json => out.json_value(&serde_json::to_value(jobs)?),
        _ => {
            out.text(&format!(
                "{:<24} {:<28} {:<10} {:>12} {:>8} {}",
                "job", "table", "state", "rows", "batches", "updated"
            ))?;
            for j in jobs {
                out.text(&job_line(j))?;
            }
            if jobs.iter().any(|j| j.running) {
                out.text("(* a run holds the job's lock now)")?;
            }
            Ok(())
        }
    }
}

pub async fn run(args: BackfillArgs, out: &mut Out) -> anyhow::Result<()> {
    match args.verb {
        BackfillVerb::Run(run) => {
            let RunArgs {
                table,
                set,
                filter,
                file,
                name,
                batches,
                db,
            } = *run;
            let (spec, default_name) = match file {
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read backfill file {}", path.display()))?;
                    let stem = path
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let spec =
                        evolve_backfill::script::parse_file(&path.display().to_string(), &text)
                            .map_err(anyhow::Error::msg)?;
                    (spec, stem)
                }
                None => {
                    let table = table.unwrap_or_default();
                    let set = set
                        .iter()
                        .map(|s| evolve_backfill::script::parse_assignment(s))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(anyhow::Error::msg)?;
                    if set.is_empty() {
                        bail!("a backfill needs at least one --set \"column = expression\"");
                    }
                    let filter = filter
                        .map(|f| evolve_backfill::script::check_condition(&f))
                        .transpose()
                        .map_err(anyhow::Error::msg)?;
                    let columns: Vec<&str> = set.iter().map(|a| a.column.as_str()).collect();
                    let default_name = format!("{}.{}", table, columns.join(","));
                    (
                        Spec {
                            table,
                            set,
                            filter,
                            batch: None,
                        },
                        default_name,
                    )
                }
            };
            let opts = BackfillOptions {
                database_url: db.url()?.to_string(),
                name: name.unwrap_or(default_name),
                spec,
                batches: batches.options(),
            };
            let mut reporter = Reporter::new(out.format());
            let result = evolve_backfill::run(&opts, &mut |e| reporter.event(e)).await;
            if let Some(bar) = &reporter.bar {
                bar.finish_and_clear();
            }
            result.map_err(|e| db.given(e))?;
            Ok(())
        }
        BackfillVerb::Status { name, db } => {
            let jobs = evolve_backfill::status(db.url()?, name.as_deref())
                .await
                .map_err(|e| db.given(e))?;
            print_jobs(out, &jobs)
        }
        BackfillVerb::Pause { name, db } => {
            let j = evolve_backfill::pause(db.url()?, &name)
                .await
                .map_err(|e| db.given(e))?;
            print_jobs(out, &[j])
        }
        BackfillVerb::Resume { name, db } => {
            let j = evolve_backfill::resume(db.url()?, &name)
                .await
                .map_err(|e| db.given(e))?;
            print_jobs(out, &[j])
        }
        BackfillVerb::Cancel { name, db } => {
            let j = evolve_backfill::cancel(db.url()?, &name)
                .await
                .map_err(|e| db.given(e))?;
            print_jobs(out, &[j])
        }
    }
}

pub async fn rewrite(args: RewriteArgs, out: &mut Out) -> anyhow::Result<()> {
    let opts = evolve_backfill::rewrite::RewriteOptions {
        database_url: args.db.url()?.to_string(),
        table: args.table,
        alters: args.alter,
        keep_old: args.keep_old,
        batches: args.batches.options(),
    };
    let mut reporter = Reporter::new(out.format());
    let result = if args.revert {
        evolve_backfill::rewrite::revert(&opts, &mut |e| reporter.event(e)).await
    } else if args.abort {
        evolve_backfill::rewrite::abort(&opts, &mut |e| reporter.event(e)).await
    } else if args.drop_old {
        evolve_backfill::rewrite::drop_old(&opts, &mut |e| reporter.event(e)).await
    } else {
        evolve_backfill::rewrite::run(&opts, &mut |e| reporter.event(e)).await
    };
    if let Some(bar) = &reporter.bar {
        bar.finish_and_clear();
    }
    result.map_err(|e| args.db.given(e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_bytes("1GB"), Ok(1 << 30));
        assert_eq!(parse_bytes("512 MB"), Ok(512 << 20));
        assert_eq!(parse_bytes("64kB"), Ok(64 << 10));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("1PB").is_err());
        assert!(parse_bytes("lots").is_err());
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert!(parse_duration("soon").is_err());
    }

    fn job(state: &str, running: bool, error: Option<&str>) -> JobStatus {
        JobStatus {
            name: "j".into(),
            table: "public.t".into(),
            state: state.into(),
            running,
            rows_done: 1,
            batches: 1,
            keys_seen: 1,
            started_at: "s".into(),
            updated_at: "u".into(),
            finished_at: None,
            error: error.map(String::from),
        }
    }

    #[test]
    fn a_job_is_one_line_starred_while_a_run_holds_it() {
        assert!(job_line(&job("paused", true, None)).contains(" paused* "));
        assert!(job_line(&job("running", true, None)).contains(" running* "));
        assert!(job_line(&job("failed", false, None)).contains(" failed "));
        let line = job_line(&job(
            "failed",
            false,
            Some(
                "keys after (1) up to (2): ERROR 23514: no\n  detail: Failing row\n  hint: fix it",
            ),
        ));
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.ends_with("ERROR 23514: no; detail: Failing row; hint: fix it"),
            "{line}"
        );
    }
}
