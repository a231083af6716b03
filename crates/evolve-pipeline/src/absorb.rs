//! `ABSORB = 'auto'`: evolve absorbs upstream schema changes behind an
//! interface by itself.
//!
//! While the pipeline runs, `run` polls the upstream catalogs every
//! [`INTERVAL`] when an interface has `ABSORB = 'auto'` (every
//! [`drift::POLL_INTERVAL`] otherwise, to keep `evolve drift` fresh;
//! [`crate::drift`]) and, for each interface with `ABSORB =
//! 'auto'` whose table shows drift (`column_drift`, `type_drift`,
//! `stalled`, or `table_dropped` with a table of the pinned name
//! upstream), runs the manual flow's steps, each logged at INFO once it is
//! done (created table, created replacement, hydrated, applied, dropped
//! the old table):
//!
//! 1. `CREATE TABLE <next version> FROM SOURCE ... (REFERENCE ...)` with
//!    the columns upstream has now (the old version's EXCLUDE COLUMNS and
//!    TEXT COLUMNS are kept for the columns that still exist, under their
//!    new names for columns renamed upstream; a listed column that is gone
//!    or now part of the key comes off the lists alone), where the
//!    next version's name is the old one's with its `_vN` suffix
//!    incremented (`orders_v1` → `orders_v2`; `_v2` appended otherwise);
//! 2. `CREATE REPLACEMENT MATERIALIZED VIEW <interface>_<version> FOR
//!    <interface>` over it, which hydrates beside the stream;
//! 3. once hydrated, `ALTER MATERIALIZED VIEW <interface> APPLY
//!    REPLACEMENT ...`: one upstream position, one change per key whose
//!    document differs;
//! 4. `DROP TABLE <old version>` when nothing else reads it.
//!
//! A renamed upstream table is followed by OID and needs nothing; once
//! it also shows column or type drift, the next version references the
//! table under its name now (unless another table took the pinned name,
//! as in a renaming cut-over, which the next version then reads). A table
//! dropped and re-created under its name (`table_dropped` with a table of
//! that name upstream, as after a cut-over that drops the old table) gets
//! a next version over the table of that name, as after a renaming
//! cut-over; a table dropped for good is left as it is.
//!
//! Interrupted flows finish: a new version that stalls before its
//! replacement is applied (the upstream changed again while it hydrated)
//! is dropped with its replacement, and the flow starts again from the
//! upstream as it is then; earlier versions of the interface's table that
//! nothing reads (an absorb killed between its APPLY and its DROP TABLE)
//! are dropped. A stall that a new version repeats (a row no version can
//! encode, a record no version can read) does not make the controller
//! copy the table over and over: once a second version in a row stalls
//! with the same error, it is dropped too, logged at WARN, and the next
//! one is made only after [`STALL_WAIT`], doubled at each such stall up
//! to [`STALL_WAIT_MAX`] (a restart, or the interface set to `manual`,
//! forgets the count).
//!
//! Readers never see an error: the interface serves the old version until
//! the swap and the new one from the swap on. A step that fails is logged
//! and retried at a later poll (after [`RETRY_AFTER`]). Only replacements
//! that this controller created are applied by it; a replacement an
//! operator created for an interface is left to the operator.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::drift::{self, Signal};
use crate::error::Result;
use crate::pipeline::{Pipeline, TableSpec};
use crate::store::{SourceKind, TableInfo, TableState};

/// How often the upstream catalogs are polled for drift.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// How long a failed step waits before it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// How long one APPLY waits for the stream.
const APPLY_WAIT: Duration = Duration::from_secs(30);

/// How long the controller waits before it makes a new version again
/// after a second one in a row stalled with the same error before its
/// swap; each further such stall doubles it, up to [`STALL_WAIT_MAX`].
pub const STALL_WAIT: Duration = Duration::from_secs(60);

/// The longest wait after new versions that keep stalling the same way.
pub const STALL_WAIT_MAX: Duration = Duration::from_secs(3600);

/// The versions the controller made for one interface that stalled
/// before their swap, one after the other, with the same error.
struct Stalls {
    /// The error they stalled with.
    error: String,
    /// How many stalled with it in a row.
    times: u32,
    /// No new version is made before this.
    until: Instant,
}

impl Stalls {
    /// Counts a version that stalled with `error`: after the first, the
    /// next version is made at once (the upstream may have changed while
    /// it hydrated); after another with the same error, a new version
    /// would most likely stall the same way (a row no version can encode,
    /// a record no version can read), so the next is made only after a
    /// wait that doubles each time. Returns the wait.
    fn count(entry: &mut Option<Stalls>, error: &str) -> Duration {
        let times = match entry {
            Some(s) if s.error == error => s.times + 1,
            _ => 1,
        };
        let wait = if times < 2 {
            Duration::ZERO
        } else {
            STALL_WAIT
                .saturating_mul(1 << (times - 2).min(16))
                .min(STALL_WAIT_MAX)
        };
        *entry = Some(Stalls {
            error: error.to_owned(),
            times,
            until: Instant::now() + wait,
        });
        wait
    }
}

/// The longest name evolve takes, in bytes (PostgreSQL's identifiers).
const MAX_NAME: usize = 63;

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The name of the table version after `name`: its `_vN` suffix
/// incremented (`_v2` appended to a name without one), the first such
/// name not `taken`. A name that would be longer than 63 bytes has its
/// stem cut to fit.
pub fn next_version(name: &str, taken: impl Fn(&str) -> bool) -> String {
    let (stem, mut n) = match name.rfind("_v") {
        Some(at) if at + 2 < name.len() && name[at + 2..].bytes().all(|b| b.is_ascii_digit()) => {
            let n: u64 = name[at + 2..].parse().unwrap_or(1);
            (&name[..at], n.saturating_add(1))
        }
        _ => (name, 2),
    };
    loop {
        let suffix = format!("_v{n}");
        let candidate = format!("{}{suffix}", cut(stem, MAX_NAME - suffix.len()));
        if !taken(&candidate) {
            return candidate;
        }
        n += 1;
    }
}

/// The replacement the controller creates for `interface` over table
/// version `table`, cut to 63 bytes at a character boundary.
fn replacement_name(interface: &str, table: &str) -> String {
    let suffix = table.rsplit_once("_v").map_or(table, |(_, n)| n);
    cut(&format!("{interface}_absorb_v{suffix}"), MAX_NAME).to_owned()
}

/// Runs the controller until `stop` completes.
/// Runs the pipeline's engine ([`Pipeline::run`]) and, beside it, the
/// absorb controller (which also keeps the drift board fresh), until
/// `shutdown` completes or the engine stops; then stops the controller.
pub async fn run_with(pipeline: &Pipeline, shutdown: impl Future<Output = ()>) -> Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let engine = async {
        let result = pipeline.run(shutdown).await;
        let _ = stop.send(true);
        result
    };
    let ((), result) = tokio::join!(run(pipeline, stopped), engine);
    result
}

pub(crate) async fn run(pipeline: &Pipeline, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut failed: HashMap<String, Instant> = HashMap::new();
    let mut stalls: HashMap<String, Stalls> = HashMap::new();
    let mut polled: Option<Instant> = None;
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let step = step(pipeline, &mut failed, &mut stalls, &mut polled);
        tokio::select! {
            _ = step => {}
            _ = stop.changed() => return,
        }
    }
}

async fn step(
    pipeline: &Pipeline,
    failed: &mut HashMap<String, Instant>,
    stalls: &mut HashMap<String, Stalls>,
    polled: &mut Option<Instant>,
) {
    let interfaces = match pipeline.interfaces() {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e.primary(), "absorb: reading the catalog failed");
            return;
        }
    };
    // An interface set to manual (or dropped) forgets its stalled versions.
    stalls.retain(|name, _| interfaces.iter().any(|i| i.name == *name && i.absorb_auto));
    let auto = interfaces.iter().any(|i| i.absorb_auto);
    if !auto && polled.is_some_and(|at| at.elapsed() < drift::POLL_INTERVAL) {
        return;
    }
    *polled = Some(Instant::now());
    let rows = match crate::poll::poll_into(pipeline.drift_board(), pipeline, None).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e.primary(), "absorb: drift poll failed");
            return;
        }
    };
    failed.retain(|_, at| at.elapsed() < RETRY_AFTER);
    for interface in interfaces.iter().filter(|i| i.absorb_auto) {
        if failed.contains_key(&interface.name) {
            continue;
        }
        let mut entry = stalls.remove(&interface.name);
        let result = absorb(pipeline, &interface.name, &rows, &mut entry).await;
        if let Some(entry) = entry {
            stalls.insert(interface.name.clone(), entry);
        }
        if let Err(e) = result {
            tracing::warn!(
                materialized_view = %interface.name,
                error = %e.primary(),
                detail = %e.detail().unwrap_or_default(),
                "absorb: step failed; retrying in {} s",
                RETRY_AFTER.as_secs()
            );
            failed.insert(interface.name.clone(), Instant::now());
        }
    }
}

/// One step for one interface: create the next version, or apply a
/// hydrated replacement of ours and drop the old version. `stalls` counts
/// the versions made for it that stalled before their swap.
async fn absorb(
    pipeline: &Pipeline,
    interface: &str,
    rows: &[drift::DriftRow],
    stalls: &mut Option<Stalls>,
) -> Result<()> {
    let Some(current) = pipeline
        .interfaces()?
        .into_iter()
        .find(|i| i.name == interface)
    else {
        return Ok(());
    };
    let tables = pipeline.tables()?;
    if let Some(pending) = pipeline
        .replacements()?
        .into_iter()
        .find(|r| r.target == interface)
    {
        if pending.name != replacement_name(interface, &pending.table) {
            return Ok(()); // an operator's replacement
        }
        // The upstream changed again while the new version hydrated: it
        // stalled before it was applied, and would never be. Start over
        // from the upstream as it is now (at the next poll).
        if let Some(stalled) = tables
            .iter()
            .find(|t| t.name == pending.table && t.state == TableState::Stalled)
            && !pending.applying
        {
            let error = stalled.error.as_deref().unwrap_or("no reason recorded");
            let wait = Stalls::count(stalls, error);
            pipeline.drop_interface(&pending.name)?;
            let readers = pipeline
                .interfaces()?
                .iter()
                .any(|i| i.table == stalled.name)
                || pipeline
                    .replacements()?
                    .iter()
                    .any(|r| r.table == stalled.name);
            if !readers {
                pipeline.drop_table(&stalled.name).await?;
            }
            if wait.is_zero() {
                tracing::info!(
                    materialized_view = %interface,
                    replacement = %pending.name,
                    table = %stalled.name,
                    "absorb: table \"{}\" stalled before replacement \"{}\" was applied ({error}); dropped both, to start again from the upstream as it is now",
                    stalled.name,
                    pending.name,
                );
            } else {
                tracing::warn!(
                    materialized_view = %interface,
                    replacement = %pending.name,
                    table = %stalled.name,
                    "absorb: table \"{}\" stalled again before replacement \"{}\" was applied, with the same error ({error}); dropped both; materialized view \"{interface}\" keeps serving table \"{}\" and the next version is made in {} s, since another made now would stall the same way; fix the cause upstream, then restart the pipeline or absorb by hand (CREATE TABLE, CREATE REPLACEMENT MATERIALIZED VIEW, APPLY REPLACEMENT) to go on sooner",
                    stalled.name,
                    pending.name,
                    current.table,
                    wait.as_secs(),
                );
            }
            return Ok(());
        }
        let hydrated = tables
            .iter()
            .any(|t| t.name == pending.table && t.state == TableState::Running);
        if !hydrated || pending.applying {
            return Ok(());
        }
        tracing::info!(
            materialized_view = %interface,
            replacement = %pending.name,
            table = %pending.table,
            "absorb: replacement \"{}\" hydrated; applying it",
            pending.name
        );
        pipeline
            .apply_replacement(interface, &pending.name, APPLY_WAIT)
            .await?;
        *stalls = None;
        tracing::info!(
            materialized_view = %interface,
            replacement = %pending.name,
            table = %pending.table,
            "absorb: applied replacement \"{}\": materialized view \"{interface}\" reads table \"{}\"",
            pending.name,
            pending.table
        );
        let old = current.table;
        let readers = pipeline.interfaces()?.iter().any(|i| i.table == old)
            || pipeline.replacements()?.iter().any(|r| r.table == old);
        if readers {
            tracing::info!(table = %old, "absorb: kept the old table \"{old}\": other materialized views read it");
        } else {
            pipeline.drop_table(&old).await?;
            tracing::info!(table = %old, "absorb: dropped the old table \"{old}\"");
        }
        return Ok(());
    }
    drop_left_versions(pipeline, interface, &current.table, &tables).await?;
    let Some(row) = rows.iter().find(|r| r.table == current.table) else {
        return Ok(());
    };
    // A renamed upstream table is followed (by OID) and is no reason by
    // itself; with column or type changes, the next version references it
    // under its name now.
    let renamed_with_drift = row.signal == Signal::TableRenamed
        && (!row.added_upstream.is_empty()
            || !row.dropped_upstream.is_empty()
            || !row.type_changed.is_empty());
    // Dropped and re-created under its name: the stream follows the OID
    // that is gone, so nothing of the table reaches the interface until a
    // version over the table of that name now replaces it.
    if !renamed_with_drift
        && !drift::recreated(row)
        && !matches!(
            row.signal,
            Signal::ColumnDrift | Signal::TypeDrift | Signal::Stalled
        )
    {
        return Ok(());
    }
    let Some(old) = tables.iter().find(|t| t.name == current.table) else {
        return Ok(());
    };
    if stalls.as_ref().is_some_and(|s| Instant::now() < s.until) {
        return Ok(()); // versions made lately stalled the same way
    }
    let next = next_version(&old.name, |n| tables.iter().any(|t| t.name == n));
    // The old version's choices, for the columns upstream still has.
    let keep = |excluded: bool| -> Vec<String> {
        old.columns
            .iter()
            .filter(|c| if excluded { c.excluded } else { c.as_text })
            .filter(|c| !row.dropped_upstream.contains(&c.name))
            .map(|c| c.name.clone())
            .collect()
    };
    let spec = TableSpec {
        name: next.clone(),
        source: old.source.clone(),
        schema: old.upstream_schema.clone(),
        table: old.upstream_table.clone(),
        exclude: keep(true),
        text: keep(false),
        kafka: old.kafka.as_ref().map(|k| k.spec()),
    };
    // The table under the pinned name, which is another table after a
    // renaming cut-over (`a` to `a_old`, `a_new` to `a`); else, when the
    // upstream table was renamed, the table itself under its name now.
    let spec = match (
        create_next(pipeline, old, spec.clone()).await,
        &row.renamed_to,
    ) {
        (Err(crate::PipelineError::UpstreamTableNotFound { .. }), Some(now)) => {
            create_next(
                pipeline,
                old,
                TableSpec {
                    schema: now.schema.clone(),
                    table: now.table.clone(),
                    ..spec
                },
            )
            .await?
        }
        (other, _) => other?,
    };
    tracing::info!(
        materialized_view = %interface,
        table = %spec.name,
        old_table = %old.name,
        signal = %row.signal,
        added = ?row.added_upstream,
        dropped = ?row.dropped_upstream,
        type_changed = row.type_changed.len(),
        "absorb: created table \"{}\" from {}.{}, the next version of \"{}\" ({})",
        spec.name,
        spec.schema,
        spec.table,
        old.name,
        row.signal
    );
    let replacement = replacement_name(interface, &spec.name);
    pipeline.create_replacement(&replacement, interface, &spec.name)?;
    tracing::info!(
        materialized_view = %interface,
        %replacement,
        table = %spec.name,
        "absorb: created replacement \"{replacement}\" for materialized view \"{interface}\" over table \"{}\"; hydrating",
        spec.name
    );
    Ok(())
}

/// Creates the next version `spec` of table `old`. A column of its
/// EXCLUDE COLUMNS or TEXT COLUMNS that cannot be listed any more (gone
/// upstream, or now part of the key) is taken off the lists, and only
/// that one: every other column keeps the old version's choice, so a
/// column excluded to keep it out of documents stays out, and one read as
/// text stays text. A PostgreSQL column renamed upstream keeps its choice
/// under its new name (found by its attribute number in the same upstream
/// table).
async fn create_next(
    pipeline: &Pipeline,
    old: &TableInfo,
    mut spec: TableSpec,
) -> Result<TableSpec> {
    follow_renamed_columns(pipeline, old, &mut spec).await;
    loop {
        match pipeline.create_table(&spec).await {
            Ok(_) => return Ok(spec),
            Err(crate::PipelineError::BadColumn {
                reference,
                column,
                reason,
            }) if spec.exclude.contains(&column) || spec.text.contains(&column) => {
                spec.exclude.retain(|c| *c != column);
                spec.text.retain(|c| *c != column);
                tracing::info!(
                    table = %spec.name,
                    %column,
                    "absorb: column \"{column}\" of upstream table \"{reference}\" {reason}; table \"{}\" is created without it in its EXCLUDE COLUMNS and TEXT COLUMNS",
                    spec.name
                );
            }
            Err(e) => return Err(e),
        }
    }
}

/// Lists under their new names the columns `old` excluded or read as
/// text that were renamed upstream since: columns of the same upstream
/// table (by OID) at the same attribute number under a name `old` does
/// not pin. Only for PostgreSQL sources; when the upstream cannot be read
/// here, creating the table says why.
async fn follow_renamed_columns(pipeline: &Pipeline, old: &TableInfo, spec: &mut TableSpec) {
    if old.kafka.is_some() || !old.columns.iter().any(|c| c.excluded || c.as_text) {
        return;
    }
    let Ok(sources) = pipeline.sources() else {
        return;
    };
    let Some(source) = sources
        .iter()
        .find(|s| s.name == old.source && s.kind == SourceKind::Postgres)
    else {
        return;
    };
    let Ok(conn) = pipeline.config().connection(&source.connection) else {
        return;
    };
    let Ok(client) = crate::upstream::connect(&source.connection, conn).await else {
        return;
    };
    let Ok(upstream) =
        crate::upstream::inspect_table(&client, &source.name, &spec.schema, &spec.table).await
    else {
        return;
    };
    if upstream.oid != old.upstream_oid {
        return;
    }
    for c in old.columns.iter().filter(|c| c.excluded || c.as_text) {
        if upstream.columns.iter().any(|u| u.name == c.name) {
            continue;
        }
        let Some(now) = upstream
            .columns
            .iter()
            .find(|u| u.attnum == c.attnum && !old.columns.iter().any(|o| o.name == u.name))
        else {
            continue;
        };
        let excluded = c.excluded && !now.key && !spec.exclude.contains(&now.name);
        let as_text = c.as_text && !spec.text.contains(&now.name);
        if excluded {
            spec.exclude.push(now.name.clone());
        }
        if as_text {
            spec.text.push(now.name.clone());
        }
        if excluded || as_text {
            tracing::info!(
                table = %spec.name,
                column = %now.name,
                "absorb: column \"{}\" of upstream table \"{}.{}\" was renamed to \"{}\"; table \"{}\" keeps it {}",
                c.name,
                spec.schema,
                spec.table,
                now.name,
                spec.name,
                if excluded { "excluded" } else { "read as text" }
            );
        }
    }
}

/// A version name's stem and number: `orders_v3` is (`orders`, 3), and a
/// name without a `_vN` suffix is its own stem's version 1 (what
/// [`next_version`] counts from).
fn version_of(name: &str) -> (&str, u64) {
    match name.rfind("_v") {
        Some(at) if at + 2 < name.len() && name[at + 2..].bytes().all(|b| b.is_ascii_digit()) => {
            (&name[..at], name[at + 2..].parse().unwrap_or(u64::MAX))
        }
        _ => (name, 1),
    }
}

/// Drops the earlier versions of `interface`'s table `current` that
/// nothing reads: what the drop step of an absorb that was interrupted
/// after its swap (the process killed right after APPLY) left ingesting.
/// An earlier version is a table of the same source and upstream table
/// whose name is `current`'s stem with a lower version number.
async fn drop_left_versions(
    pipeline: &Pipeline,
    interface: &str,
    current: &str,
    tables: &[crate::store::TableInfo],
) -> Result<()> {
    let Some(now) = tables.iter().find(|t| t.name == current) else {
        return Ok(());
    };
    let (stem, n) = version_of(current);
    for old in tables.iter().filter(|t| {
        t.name != now.name
            && t.source == now.source
            && t.upstream_schema == now.upstream_schema
            && t.upstream_table == now.upstream_table
            && version_of(&t.name).0 == stem
            && version_of(&t.name).1 < n
    }) {
        let readers = pipeline.interfaces()?.iter().any(|i| i.table == old.name)
            || pipeline.replacements()?.iter().any(|r| r.table == old.name);
        if readers {
            continue;
        }
        pipeline.drop_table(&old.name).await?;
        tracing::info!(
            materialized_view = %interface,
            table = %old.name,
            "absorb: dropped the old table \"{}\", which an earlier absorb of materialized view \"{interface}\" had replaced by \"{current}\" but not dropped",
            old.name
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_repeated_waits_longer_each_time() {
        let mut stalls = None;
        assert_eq!(Stalls::count(&mut stalls, "a"), Duration::ZERO);
        assert_eq!(Stalls::count(&mut stalls, "a"), STALL_WAIT);
        assert_eq!(Stalls::count(&mut stalls, "a"), STALL_WAIT * 2);
        assert_eq!(Stalls::count(&mut stalls, "a"), STALL_WAIT * 4);
        // Another error is another situation: made again at once.
        assert_eq!(Stalls::count(&mut stalls, "b"), Duration::ZERO);
        for _ in 0..40 {
            Stalls::count(&mut stalls, "b");
        }
        assert_eq!(Stalls::count(&mut stalls, "b"), STALL_WAIT_MAX);
    }

    #[test]
    fn names_at_the_length_limit_are_shortened_not_looped_over() {
        // 63 bytes, the longest name: the next version's stem is cut to
        // fit, at a character boundary.
        let next = next_version(&format!("{}_v9", "o".repeat(60)), |_| false);
        assert_eq!(next, format!("{}_v10", "o".repeat(59)));
        assert_eq!(
            next_version(&"p".repeat(63), |_| false),
            format!("{}_v2", "p".repeat(60))
        );
        let cyrillic = "з".repeat(31);
        let next = next_version(&cyrillic, |_| false);
        assert_eq!(next, format!("{}_v2", "з".repeat(30)));
        let taken = format!("{}_v2", "з".repeat(30));
        assert_eq!(
            next_version(&cyrillic, |n| n == taken),
            format!("{}_v3", "з".repeat(30))
        );
        // A replacement's name is cut to 63 bytes where a character
        // begins (31 two-byte letters and `_`).
        assert_eq!(
            replacement_name(&"з".repeat(31), "t_v2"),
            format!("{}_", "з".repeat(31))
        );
    }

    #[test]
    fn next_versions() {
        let none = |_: &str| false;
        assert_eq!(next_version("orders_v1", none), "orders_v2");
        assert_eq!(next_version("orders_v9", none), "orders_v10");
        assert_eq!(next_version("orders", none), "orders_v2");
        assert_eq!(next_version("orders_vx", none), "orders_vx_v2");
        assert_eq!(next_version("orders_v1", |n| n == "orders_v2"), "orders_v3");
        assert_eq!(
            replacement_name("orders_json", "orders_v3"),
            "orders_json_absorb_v3"
        );
        assert_eq!(version_of("orders_v3"), ("orders", 3));
        assert_eq!(version_of("orders"), ("orders", 1));
        assert_eq!(version_of("orders_vx"), ("orders_vx", 1));
        assert_eq!(version_of("a_v2_v10"), ("a_v2", 10));
    }
}
