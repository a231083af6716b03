//! What the pipeline tours (`demo/pipeline.rs` on a PostgreSQL upstream,
//! `demo/mysql.rs` on a MariaDB one, `demo/kafka.rs` on a Kafka topic)
//! share: their [`frame`] (the tour cut short by Ctrl-C, `--keep`, the
//! cleanup and the report), the [`Stage`] (the pipeline, the PostgreSQL
//! sink and the checks), the statements that only talk to the pipeline or
//! the sink, the waits and the counts, and the [`Background`] tasks' stop.
//!
//! What depends on the upstream stays in each tour; the one thing the
//! stage asks of it is [`Upstream::diff`], the comparison of a sink table
//! with the upstream table it mirrors.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use evolve_pg::{Client, quote_ident};
use evolve_pipeline::admin;
use evolve_pipeline::{Pipeline, PipelineError, TableInfo, TableState};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, oneshot};
use tokio::task::JoinHandle;

/// Sample rows.
pub(super) const ORDERS: i64 = 3_000;
pub(super) const CUSTOMERS: i64 = 200;

/// The load's pause between transactions.
pub(super) const LOAD_INTERVAL: Duration = Duration::from_millis(15);
/// How long the tour waits for anything (hydration, a sink catching up).
pub(super) const WAIT: Duration = Duration::from_secs(30);
/// How long flow 5 waits for evolve to absorb the change on its own.
pub(super) const ABSORB_WAIT: Duration = Duration::from_secs(30);
/// After the sink shows what was expected: how long to watch for more.
pub(super) const SETTLE: Duration = Duration::from_millis(300);
/// Between two looks at something being waited for.
pub(super) const POLL: Duration = Duration::from_millis(50);
/// How long the load runs on its own to show that ingestion goes on.
pub(super) const LOAD_GOES_ON: Duration = Duration::from_millis(1500);

/// Prints one line of the tour. An error (stdout closed) ends the tour;
/// `main` treats a broken pipe as success.
pub(super) fn say(text: impl AsRef<str>) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", text.as_ref())?;
    stdout.flush()?;
    Ok(())
}

pub(super) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The interface query over `table`.
pub(super) fn interface_query(table: &str) -> String {
    format!("SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM {table} t")
}

/// `orders_json_v2` for table `orders_v2`.
pub(super) fn replacement_name(version: &str) -> String {
    let suffix = version.strip_prefix("orders_").unwrap_or(version);
    format!("orders_json_{suffix}")
}

fn audit_table(table: &str) -> String {
    format!("{table}_audit")
}

/// Counts every write into sink table `table` in `<table>_audit`; with
/// `timestamped`, each audit row also says when (`at`).
pub(super) async fn audit(sink: &Client, table: &str, timestamped: bool) -> anyhow::Result<()> {
    let (t, audit, function) = (
        quote_ident(table),
        quote_ident(&audit_table(table)),
        quote_ident(&format!("{table}_audit_fn")),
    );
    let at = if timestamped {
        ", at timestamptz NOT NULL DEFAULT clock_timestamp()"
    } else {
        ""
    };
    sink.batch_execute(&format!(
        "CREATE TABLE public.{audit} (op text NOT NULL, key jsonb NOT NULL{at});
         CREATE FUNCTION public.{function}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO public.{audit} (op, key) VALUES (TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.key ELSE NEW.key END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.{t}
           FOR EACH ROW EXECUTE FUNCTION public.{function}();"
    ))
    .await
    .with_context(|| format!("sink: creating the audit trigger on {table}"))
}

/// What a tour found: its checks, the failed ones' lines, and what
/// `--keep` prints about where to look while everything keeps running.
pub(super) struct Toured {
    pub checks: u32,
    pub failures: Vec<String>,
    pub keep: Vec<String>,
}

/// The frame every pipeline tour shares: the tour on `servers`, cut short
/// by Ctrl-C; with `keep`, the tour's `keep` lines and the state directory,
/// then a wait for Ctrl-C while everything runs; then the background tasks
/// stopped, the servers and the state directory removed (said as
/// "pipeline stopped, `<removed>` and state removed"), and the report.
pub(super) async fn frame<S: Send + 'static>(
    started: Instant,
    keep: bool,
    servers: S,
    state_dir: &std::path::Path,
    removed: &str,
    tour: impl AsyncFnOnce(&S, &mut Background) -> anyhow::Result<Toured>,
) -> anyhow::Result<()> {
    let mut background = Background::default();
    let outcome = tokio::select! {
        outcome = tour(&servers, &mut background) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    if keep && let Ok(toured) = &outcome {
        say("")?;
        say("keeping everything until Ctrl-C (the pipeline keeps running):")?;
        for line in &toured.keep {
            say(line)?;
        }
        say(format!("  pipeline state: {}", state_dir.display()))?;
        super::wait_for_ctrl_c().await;
    }
    let cleanup = Instant::now();
    let stop_errors = background.stop().await;
    tokio::task::spawn_blocking(move || drop(servers))
        .await
        .with_context(|| format!("removing the {removed}"))?;
    let _ = std::fs::remove_dir_all(state_dir);
    say(format!(
        "\npipeline stopped, {removed} and state removed ({})",
        secs(cleanup.elapsed())
    ))?;
    let Toured {
        checks,
        mut failures,
        ..
    } = outcome?;
    failures.extend(stop_errors);
    report(started, checks, &failures)
}

/// The end of a tour: "all N checks passed", or the failed ones and an
/// error (the command exits 1).
pub(super) fn report(started: Instant, checks: u32, failures: &[String]) -> anyhow::Result<()> {
    let total = secs(started.elapsed());
    if failures.is_empty() {
        say(format!("all {checks} checks passed in {total}"))?;
        return Ok(());
    }
    say(format!(
        "{} of {checks} checks failed ({total}):",
        failures.len()
    ))?;
    for f in failures {
        say(format!("  ✗ {f}"))?;
    }
    bail!(
        "the demo failed: {} expectation(s) not met, first: {}",
        failures.len(),
        failures[0]
    )
}

/// A small xorshift generator: the load needs variety, not quality.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Rng(seed | 1)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

// ----------------------------------------------------------- background

/// The tasks that run beside the tour, stopped at the end whatever
/// happened: the load, the pipeline, and a reader where the tour has one.
#[derive(Default)]
pub(super) struct Background {
    pub(super) stop_load: Arc<AtomicBool>,
    pub(super) stop_reader: Arc<AtomicBool>,
    pub(super) load: Option<JoinHandle<()>>,
    pub(super) reader: Option<JoinHandle<()>>,
    pipeline_stop: Option<oneshot::Sender<()>>,
    pipeline: Option<JoinHandle<Result<(), PipelineError>>>,
}

impl Background {
    /// Runs the pipeline in a task until [`Background::stop`].
    pub(super) fn spawn_pipeline(&mut self, pipeline: Arc<Pipeline>) {
        let (stop, stopped) = oneshot::channel::<()>();
        self.pipeline_stop = Some(stop);
        self.pipeline = Some(tokio::spawn(async move {
            evolve_pipeline::absorb::run_with(&pipeline, async {
                let _ = stopped.await;
            })
            .await
        }));
    }

    pub(super) async fn stop_load(&mut self) {
        self.stop_load.store(true, Ordering::SeqCst);
        if let Some(load) = self.load.take() {
            let _ = load.await;
        }
    }

    pub(super) async fn stop_reader(&mut self) {
        self.stop_reader.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            let _ = reader.await;
        }
    }

    /// Stops the load, the reader and the pipeline; what went wrong.
    pub(super) async fn stop(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        self.stop_load().await;
        self.stop_reader().await;
        if let Some(stop) = self.pipeline_stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut pipeline) = self.pipeline.take() {
            match tokio::time::timeout(Duration::from_secs(20), &mut pipeline).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => errors.push(format!("the pipeline failed: {e}")),
                Ok(Err(e)) => errors.push(format!("the pipeline task failed: {e}")),
                Err(_) => {
                    pipeline.abort();
                    errors.push("the pipeline did not stop within 20 s".into());
                }
            }
        }
        errors
    }
}

// ------------------------------------------------------------- pausing

/// The load is paused while this lives.
pub(super) struct Paused {
    _guard: OwnedMutexGuard<()>,
    since: Instant,
}

/// Pauses the load (each of its transactions holds `gate`): returns once
/// no load transaction is running.
pub(super) async fn pause(gate: &Arc<AsyncMutex<()>>) -> anyhow::Result<Paused> {
    let guard = gate.clone().lock_owned().await;
    say("  (load paused while the numbers are taken)")?;
    Ok(Paused {
        _guard: guard,
        since: Instant::now(),
    })
}

/// Resumes the load; how long it was paused.
pub(super) fn resume(pause: Paused) -> anyhow::Result<Duration> {
    let paused = pause.since.elapsed();
    drop(pause);
    say("  (load resumed)")?;
    Ok(paused)
}

// ---------------------------------------------------------------- stage

/// How the sink compares with the upstream over some columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Diff {
    pub(super) upstream: i64,
    pub(super) sink: i64,
    /// Keys whose documents differ, or that only one side has.
    pub(super) differing: i64,
}

/// What the stage needs of a tour's upstream.
pub(super) trait Upstream {
    /// Compares sink table `<table>_json` (on `sink`) with upstream
    /// `table` (keyed by `id`), each upstream row's document taken over
    /// `columns`.
    async fn diff(
        &mut self,
        sink: &Client,
        table: &str,
        columns: &[String],
    ) -> anyhow::Result<Diff>;
}

/// The pipeline, the sink, and the checks so far.
pub(super) struct Stage {
    pub(super) pipeline: Arc<Pipeline>,
    pub(super) sink: Client,
    /// The upstream schema the tables reference (`public`, a database).
    schema: String,
    /// What a hydration streams after its snapshot, as printed.
    catch_up: &'static str,
    pub(super) checks: u32,
    /// The failed checks' lines.
    pub(super) failures: Vec<String>,
}

impl Stage {
    pub(super) fn new(
        pipeline: Arc<Pipeline>,
        sink: Client,
        schema: impl Into<String>,
        catch_up: &'static str,
    ) -> Stage {
        Stage {
            pipeline,
            sink,
            schema: schema.into(),
            catch_up,
            checks: 0,
            failures: Vec::new(),
        }
    }

    // ------------------------------------------------------- statements

    /// Runs control statements through the pipeline's SQL interface,
    /// printed like a psql session; an error stops the tour.
    pub(super) async fn control(&self, sql: &str) -> anyhow::Result<()> {
        say(format!("evolve=> {sql};"))?;
        let started = Instant::now();
        let response = admin::execute(&self.pipeline, sql).await;
        for result in &response.results {
            if let Some(notice) = &result.notice {
                say(format!("NOTICE:  {notice}"))?;
            }
            let took = started.elapsed();
            if took >= Duration::from_millis(100) {
                say(format!("{}   ({})", result.status, secs(took)))?;
            } else {
                say(&result.status)?;
            }
        }
        let Some(error) = response.error else {
            return Ok(());
        };
        say(format!("ERROR:  {}", error.message))?;
        if let Some(detail) = &error.detail {
            say(format!("DETAIL:  {detail}"))?;
        }
        if let Some(hint) = &error.hint {
            say(format!("HINT:  {hint}"))?;
        }
        bail!("{sql} failed: {}", error.message)
    }

    /// For `orders` and `customers`: table `<name>_v1`, interface
    /// `<name>_json` and sink `<name>_sink` into `public.<name>_json`.
    pub(super) async fn create_interfaces(&self) -> anyhow::Result<()> {
        for name in ["orders", "customers"] {
            self.control(&format!(
                "CREATE TABLE {name}_v1 FROM SOURCE shop (REFERENCE {}.{name})",
                self.schema
            ))
            .await?;
            self.control(&format!(
                "CREATE MATERIALIZED VIEW {name}_json AS {}",
                interface_query(&format!("{name}_v1"))
            ))
            .await?;
            self.control(&format!(
                "CREATE SINK {name}_sink FROM {name}_json INTO POSTGRES CONNECTION sink_conn \
                 (TABLE 'public.{name}_json')"
            ))
            .await?;
        }
        Ok(())
    }

    /// `CREATE TABLE version ... options`, a replacement of orders_json
    /// over it, and the wait until it is hydrated.
    pub(super) async fn replace(&self, version: &str, options: &str) -> anyhow::Result<()> {
        self.control(&format!(
            "CREATE TABLE {version} FROM SOURCE shop (REFERENCE {}.orders){options}",
            self.schema
        ))
        .await?;
        self.control(&format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW {} FOR orders_json AS {}",
            replacement_name(version),
            interface_query(version)
        ))
        .await?;
        let started = Instant::now();
        let table = self
            .wait_table(version, |t| t.state == TableState::Running)
            .await?;
        say(format!(
            "  {version} hydrated while the load went on: {} rows copied, then {} ({})",
            table.rows_copied,
            self.catch_up,
            secs(started.elapsed())
        ))
    }

    /// With the load paused and the sink caught up: applies the
    /// replacement over `version` and checks the writes.
    pub(super) async fn apply_counted(
        &mut self,
        up: &mut impl Upstream,
        version: &str,
        expected: i64,
        what: &str,
    ) -> anyhow::Result<()> {
        let before = self.audit("orders_json").await?;
        self.control(&format!(
            "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT {}",
            replacement_name(version)
        ))
        .await?;
        self.count_writes(up, before, version, expected, what).await
    }

    /// Waits until the sink shows `version`'s documents, then compares the
    /// writes since `before` with `expected`: the check line of a flow.
    pub(super) async fn count_writes(
        &mut self,
        up: &mut impl Upstream,
        before: i64,
        version: &str,
        expected: i64,
        what: &str,
    ) -> anyhow::Result<()> {
        let columns = self.document_columns(version)?;
        self.wait_converged(up, "orders", &columns).await?;
        tokio::time::sleep(SETTLE).await;
        let writes = self.audit("orders_json").await? - before;
        self.check(
            writes == expected,
            format!("downstream changes: {writes}   rows that really changed: {expected}"),
        )?;
        say(format!("    ({what})"))
    }

    // ------------------------------------------------------------ waits

    /// Waits until the sink has every change of the paused load:
    /// customers_json equals upstream, and orders_json too (over its
    /// table's columns) or, when `orders_stalled` is given, its audit
    /// count holds still (`orders_stalled` is the error if it does not
    /// within [`WAIT`]). The comparisons: customers, and orders unless
    /// stalled.
    pub(super) async fn caught_up(
        &self,
        up: &mut impl Upstream,
        orders_stalled: Option<&str>,
    ) -> anyhow::Result<(Diff, Option<Diff>)> {
        let columns = self.document_columns("customers_v1")?;
        let customers = self.wait_converged(up, "customers", &columns).await?;
        let Some(stalled) = orders_stalled else {
            let table = self.interface_table("orders_json")?;
            let columns = self.document_columns(&table)?;
            let orders = self.wait_converged(up, "orders", &columns).await?;
            return Ok((customers, Some(orders)));
        };
        let started = Instant::now();
        let mut count = self.audit("orders_json").await?;
        loop {
            tokio::time::sleep(SETTLE).await;
            let now = self.audit("orders_json").await?;
            if now == count {
                return Ok((customers, None));
            }
            if started.elapsed() >= WAIT {
                bail!("{stalled}");
            }
            count = now;
        }
    }

    /// Waits until `<table>_json` on the sink equals upstream `table` over
    /// `columns`; an error after [`WAIT`].
    pub(super) async fn wait_converged(
        &self,
        up: &mut impl Upstream,
        table: &str,
        columns: &[String],
    ) -> anyhow::Result<Diff> {
        let diff = self.converge(up, table, columns).await?;
        if diff.differing != 0 {
            bail!(
                "the sink table {table}_json did not catch up with upstream {table} within {} s: {} rows upstream, {} in the sink, {} differing",
                WAIT.as_secs(),
                diff.upstream,
                diff.sink,
                diff.differing
            );
        }
        Ok(diff)
    }

    /// [`Stage::wait_converged`], handing back the last comparison after
    /// [`WAIT`].
    pub(super) async fn converge(
        &self,
        up: &mut impl Upstream,
        table: &str,
        columns: &[String],
    ) -> anyhow::Result<Diff> {
        let started = Instant::now();
        loop {
            let diff = up.diff(&self.sink, table, columns).await?;
            if diff.differing == 0 || started.elapsed() >= WAIT {
                return Ok(diff);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until table `name` satisfies `ready`.
    pub(super) async fn wait_table(
        &self,
        name: &str,
        ready: impl Fn(&TableInfo) -> bool,
    ) -> anyhow::Result<TableInfo> {
        let started = Instant::now();
        loop {
            let table = self.table(name)?;
            if ready(&table) {
                return Ok(table);
            }
            if started.elapsed() >= WAIT {
                bail!(
                    "table {name} is still {} after {} s{}",
                    table.state.as_str(),
                    WAIT.as_secs(),
                    table.error.map(|e| format!(": {e}")).unwrap_or_default()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until orders_json reads a table other than `old` and `old`
    /// is gone (evolve absorbed a change itself): the new table, or
    /// `None` (and a failed check) after [`ABSORB_WAIT`].
    pub(super) async fn wait_absorbed(&mut self, old: &str) -> anyhow::Result<Option<String>> {
        let waiting = Instant::now();
        let new = loop {
            let now_reads = self.interface_table("orders_json")?;
            let old_exists = self.pipeline.tables()?.iter().any(|t| t.name == old);
            if now_reads != old && !old_exists {
                break Some(now_reads);
            }
            if waiting.elapsed() >= ABSORB_WAIT {
                break None;
            }
            tokio::time::sleep(POLL).await;
        };
        let Some(new) = new else {
            let now_reads = self.interface_table("orders_json")?;
            self.check(
                false,
                format!(
                    "evolve did not absorb the change within {} s (orders_json reads {now_reads})",
                    ABSORB_WAIT.as_secs()
                ),
            )?;
            return Ok(None);
        };
        say(format!(
            "  orders_json now reads {new}, and {old} is gone ({})",
            secs(waiting.elapsed())
        ))?;
        Ok(Some(new))
    }

    // ----------------------------------------------------------- checks

    pub(super) fn check(&mut self, ok: bool, line: String) -> anyhow::Result<()> {
        self.checks += 1;
        if !ok {
            self.failures.push(line.clone());
        }
        say(format!("  {line}   {}", if ok { "✓" } else { "✗" }))
    }

    /// After an upstream change the old version does not read: the load
    /// goes on for [`LOAD_GOES_ON`], and orders_v1 keeps running and
    /// orders_json keeps receiving its writes (since audit count `before`).
    pub(super) async fn check_ingestion_goes_on(&mut self, before: i64) -> anyhow::Result<()> {
        tokio::time::sleep(LOAD_GOES_ON).await;
        let writes = self.audit("orders_json").await? - before;
        let state = self.table("orders_v1")?.state;
        self.check(
            writes > 0 && state == TableState::Running,
            format!(
                "ingestion goes on: orders_v1 is {}, orders_json received {writes} writes from the load since the ALTER",
                state.as_str()
            ),
        )
    }

    /// Waits until table `version` stalls, prints why, and checks that
    /// `evolve status` says orders_json is stale and why.
    pub(super) async fn check_stalled(&mut self, version: &str) -> anyhow::Result<()> {
        let stalled_at = Instant::now();
        let table = self
            .wait_table(version, |t| t.state == TableState::Stalled)
            .await?;
        say(format!(
            "  {version} stalled after {}: {}",
            secs(stalled_at.elapsed()),
            table.error.as_deref().unwrap_or("(no error)")
        ))?;
        let status = admin::status(&self.pipeline)
            .await
            .context("reading the pipeline's status")?;
        let interface = status
            .objects
            .iter()
            .find(|o| o.name == "orders_json")
            .ok_or_else(|| anyhow!("evolve status does not list orders_json"))?;
        say(format!(
            "  evolve status: materialized view orders_json is {}: {}",
            interface.state,
            interface.error.as_deref().unwrap_or("(no reason given)")
        ))?;
        self.check(
            interface.state == "stale" && interface.error.is_some(),
            format!("status says orders_json is {} and why", interface.state),
        )
    }

    /// Once the load has stopped: orders_json and customers_json equal
    /// upstream.
    pub(super) async fn check_equal_upstream(
        &mut self,
        up: &mut impl Upstream,
    ) -> anyhow::Result<()> {
        let customers = self
            .converge(up, "customers", &self.document_columns("customers_v1")?)
            .await?;
        let table = self.interface_table("orders_json")?;
        let orders = self
            .converge(up, "orders", &self.document_columns(&table)?)
            .await?;
        self.check(
            orders.differing == 0 && customers.differing == 0,
            format!(
                "orders_json ({} documents, {} differing) and customers_json ({}, {} differing) equal upstream",
                orders.sink, orders.differing, customers.sink, customers.differing
            ),
        )
    }

    /// With the load paused, after setup: both sink tables equal upstream.
    pub(super) async fn check_hydrated(&mut self, up: &mut impl Upstream) -> anyhow::Result<()> {
        let (customers, orders) = self.caught_up(up, None).await?;
        let orders = orders.unwrap_or_default();
        self.check(
            orders.differing == 0 && customers.differing == 0,
            format!(
                "orders_json ({} documents) and customers_json ({}) in the sink equal upstream",
                orders.sink, customers.sink
            ),
        )
    }

    // --------------------------------------------------------- readings

    /// `evolve drift`, in one line per table.
    pub(super) async fn drift(&self) -> anyhow::Result<()> {
        let rows = evolve_pipeline::poll::drift(&self.pipeline, None)
            .await
            .context("reading drift")?;
        for row in rows {
            let mut what = Vec::new();
            if !row.added_upstream.is_empty() {
                what.push(format!("added upstream: {}", row.added_upstream.join(", ")));
            }
            if !row.dropped_upstream.is_empty() {
                what.push(format!(
                    "dropped upstream: {}",
                    row.dropped_upstream.join(", ")
                ));
            }
            for change in &row.type_changed {
                what.push(format!("type changed: {change}"));
            }
            say(format!(
                "  evolve drift: {} ({}) {}, {}; {}",
                row.table,
                row.upstream,
                row.signal,
                row.status,
                what.join("; ")
            ))?;
        }
        Ok(())
    }

    pub(super) fn table(&self, name: &str) -> anyhow::Result<TableInfo> {
        self.pipeline
            .tables()?
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| anyhow!("the pipeline has no table {name}"))
    }

    pub(super) fn interface_table(&self, name: &str) -> anyhow::Result<String> {
        self.pipeline
            .interfaces()?
            .into_iter()
            .find(|i| i.name == name)
            .map(|i| i.table)
            .ok_or_else(|| anyhow!("the pipeline has no materialized view {name}"))
    }

    pub(super) fn document_columns(&self, table: &str) -> anyhow::Result<Vec<String>> {
        Ok(self
            .table(table)?
            .document_columns()
            .map(|c| c.name.clone())
            .collect())
    }

    /// How many writes sink table `table` received.
    pub(super) async fn audit(&self, table: &str) -> anyhow::Result<i64> {
        let sql = format!(
            "SELECT count(*) FROM public.{}",
            quote_ident(&audit_table(table))
        );
        let row = self
            .sink
            .query_one(&sql, &[])
            .await
            .with_context(|| format!("sink: {sql}"))?;
        Ok(row.get(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_query_is_the_accepted_form() {
        let sql = format!(
            "CREATE MATERIALIZED VIEW x AS {}",
            interface_query("orders_v1")
        );
        let parsed = evolve_core::control::parse(&sql).expect("parses");
        assert_eq!(parsed.len(), 1);
    }
}
