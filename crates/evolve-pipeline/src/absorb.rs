//! `ABSORB = 'auto'`: evolve absorbs upstream schema changes behind an
//! interface by itself.
//!
//! While the pipeline runs, `run` polls the upstream catalogs every
//! [`INTERVAL`] when an interface has `ABSORB = 'auto'` (every
//! [`drift::POLL_INTERVAL`] otherwise, to keep `evolve drift` fresh;
//! [`crate::drift`]) and, for each interface with `ABSORB =
//! 'auto'` whose table shows drift (`column_drift`, `type_drift`, or
//! `stalled`), runs the manual flow's steps, each logged at INFO once it is
//! done (created table, created replacement, hydrated, applied, dropped
//! the old table):
//!
//! 1. `CREATE TABLE <next version> FROM SOURCE ... (REFERENCE ...)` with
//!    the columns upstream has now (the old version's EXCLUDE COLUMNS and
//!    TEXT COLUMNS are kept for the columns that still exist), where the
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
//! as in a renaming cut-over, which the next version then reads).
//!
//! Interrupted flows finish: a new version that stalls before its
//! replacement is applied (the upstream changed again while it hydrated)
//! is dropped with its replacement, and the flow starts again from the
//! upstream as it is then; earlier versions of the interface's table that
//! nothing reads (an absorb killed between its APPLY and its DROP TABLE)
//! are dropped.
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
use crate::store::TableState;

/// How often the upstream catalogs are polled for drift.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// How long a failed step waits before it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// How long one APPLY waits for the stream.
const APPLY_WAIT: Duration = Duration::from_secs(30);

/// The name of the table version after `name`.
pub fn next_version(name: &str, taken: impl Fn(&str) -> bool) -> String {
    let (stem, mut n) = match name.rfind("_v") {
        Some(at) if at + 2 < name.len() && name[at + 2..].bytes().all(|b| b.is_ascii_digit()) => {
            let n: u64 = name[at + 2..].parse().unwrap_or(1);
            (&name[..at], n + 1)
        }
        _ => (name, 2),
    };
    loop {
        let candidate = format!("{stem}_v{n}");
        if !taken(&candidate) && candidate.len() <= 63 {
            return candidate;
        }
        n += 1;
    }
}

/// The replacement the controller creates for `interface` over table
/// version `table`.
fn replacement_name(interface: &str, table: &str) -> String {
    let suffix = table.rsplit_once("_v").map_or(table, |(_, n)| n);
    let mut name = format!("{interface}_absorb_v{suffix}");
    name.truncate(63);
    name
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
        let step = step(pipeline, &mut failed, &mut polled);
        tokio::select! {
            _ = step => {}
            _ = stop.changed() => return,
        }
    }
}

async fn step(
    pipeline: &Pipeline,
    failed: &mut HashMap<String, Instant>,
    polled: &mut Option<Instant>,
) {
    let interfaces = match pipeline.interfaces() {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e.primary(), "absorb: reading the catalog failed");
            return;
        }
    };
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
        if let Err(e) = absorb(pipeline, &interface.name, &rows).await {
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
/// hydrated replacement of ours and drop the old version.
async fn absorb(pipeline: &Pipeline, interface: &str, rows: &[drift::DriftRow]) -> Result<()> {
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
            tracing::info!(
                materialized_view = %interface,
                replacement = %pending.name,
                table = %stalled.name,
                "absorb: table \"{}\" stalled before replacement \"{}\" was applied ({}); dropped both, to start again from the upstream as it is now",
                stalled.name,
                pending.name,
                stalled.error.as_deref().unwrap_or("no reason recorded")
            );
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
    if !renamed_with_drift
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
    let spec = match (create_next(pipeline, spec.clone()).await, &row.renamed_to) {
        (Err(crate::PipelineError::UpstreamTableNotFound { .. }), Some(now)) => {
            create_next(
                pipeline,
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

/// Creates the next version `spec`; an excluded or text column that is
/// gone upstream now is dropped from its options rather than refused.
async fn create_next(pipeline: &Pipeline, spec: TableSpec) -> Result<TableSpec> {
    match pipeline.create_table(&spec).await {
        Ok(_) => Ok(spec),
        Err(crate::PipelineError::BadColumn { .. }) => {
            let spec = TableSpec {
                exclude: Vec::new(),
                text: Vec::new(),
                ..spec
            };
            pipeline.create_table(&spec).await?;
            Ok(spec)
        }
        Err(e) => Err(e),
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
