//! Rendering reports as text for people or JSON for programs.
//!
//! `--format json`: `status` prints one JSON document; `apply`, `baseline`
//! and `repair` print JSON Lines, one event per line with a `type` tag, the
//! last one of type `summary`. Errors go to stderr as one text line (plus
//! indented detail lines) in both formats.

use std::io::Write;
use std::path::Path;

use evolve_migrate::{
    ApplyReport, ChangeReport, DepsReport, Event, Kind, MatviewStatus, MigrationStatus, Refreshed,
    RepairAction, StatusReport, ValidateReport,
};
use serde::Serialize;

use crate::cli::Format;

#[derive(Clone, Debug)]
pub struct Out {
    format: Format,
}

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

impl Out {
    pub fn new(format: Format) -> Out {
        Out { format }
    }

    fn line(&self, text: &str) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{text}")?;
        stdout.flush()?;
        Ok(())
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// One line of text as it is.
    pub fn text(&self, text: &str) -> anyhow::Result<()> {
        self.line(text)
    }

    /// A JSON document, pretty-printed.
    pub fn json_value(&self, value: &serde_json::Value) -> anyhow::Result<()> {
        self.line(&serde_json::to_string_pretty(value)?)
    }

    fn json(&self, value: &impl Serialize) -> anyhow::Result<()> {
        self.line(&serde_json::to_string(value)?)
    }

    pub fn error(&self, e: &anyhow::Error) {
        let mut msg = e.to_string();
        // anyhow's context adds a prefix; show the cause after it.
        if let Some(cause) = e.chain().nth(1) {
            msg = format!("{msg}: {cause}");
        }
        eprintln!("error: {msg}");
    }

    pub fn created(&self, path: &Path) -> anyhow::Result<()> {
        match self.format {
            Format::Text | Format::Dot | Format::Mermaid => {
                self.line(&format!("created {}", path.display()))
            }
            Format::Json => self.json(&serde_json::json!({"type": "created", "path": path})),
        }
    }

    /// An event while a verb runs. Write errors are ignored here (a closed
    /// stdout must not abort a migration half-way); the final summary
    /// reports them.
    pub fn event(&mut self, e: &Event) {
        let _ = match self.format {
            Format::Json => self.json(e),
            Format::Text | Format::Dot | Format::Mermaid => self.line(&event_text(e)),
        };
    }

    pub fn status(&self, r: &StatusReport) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.line(&serde_json::to_string_pretty(r)?),
            Format::Text | Format::Dot | Format::Mermaid => self.line(&status_text(r)),
        }
    }

    pub fn apply_summary(&self, r: &ApplyReport) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.json(&Tagged {
                kind: "summary",
                inner: r,
            }),
            Format::Text | Format::Dot | Format::Mermaid => {
                let at = r
                    .current_version
                    .as_deref()
                    .map(|v| format!("version {v}"))
                    .unwrap_or_else(|| "no version".into());
                let text = if r.dry_run {
                    format!(
                        "dry run: {} migration{} would be applied; nothing was run",
                        r.applied,
                        plural(r.applied)
                    )
                } else if r.applied == 0 {
                    format!("schema is up to date at {at}")
                } else {
                    format!(
                        "{} migration{} applied in {}; schema is at {at}",
                        r.applied,
                        plural(r.applied),
                        millis(r.elapsed_ms)
                    )
                };
                self.line(&text)
            }
        }
    }

    pub fn deps(&self, r: &DepsReport) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.line(&serde_json::to_string_pretty(r)?),
            Format::Dot => self.line(evolve_migrate::to_dot(r).trim_end()),
            Format::Mermaid => self.line(evolve_migrate::to_mermaid(r).trim_end()),
            Format::Text => {
                if r.dependents.is_empty() {
                    return self.line(&format!("nothing depends on {}", r.target));
                }
                let header = [
                    "depth",
                    "kind",
                    "name",
                    "owner",
                    "populated",
                    "indexes",
                    "path",
                ];
                let rows: Vec<[String; 7]> = r
                    .dependents
                    .iter()
                    .map(|d| {
                        [
                            d.depth.to_string(),
                            d.kind.as_str().to_string(),
                            d.name.clone(),
                            d.owner.clone(),
                            d.populated.map(|p| p.to_string()).unwrap_or_default(),
                            d.indexes.len().to_string(),
                            d.path.join(" -> "),
                        ]
                    })
                    .collect();
                self.line(&format!(
                    "{} dependent{} of {}\n{}",
                    r.dependents.len(),
                    plural(r.dependents.len()),
                    r.target,
                    table(&header, &rows)
                ))
            }
        }
    }

    pub fn lint(&self, findings: &[evolve_core::migration::lint::Finding]) -> anyhow::Result<()> {
        use evolve_core::migration::lint::Level;
        match self.format {
            Format::Json => self.line(&serde_json::to_string_pretty(&serde_json::json!({
                "findings": findings,
                "errors": findings.iter().filter(|f| f.level == Level::Error).count(),
                "warnings": findings.iter().filter(|f| f.level == Level::Warning).count(),
            }))?),
            _ => {
                for f in findings {
                    let level = match f.level {
                        Level::Error => "error",
                        Level::Warning => "warning",
                    };
                    self.line(&format!(
                        "{}:{}:{}: {level}[{}]: {}",
                        f.script, f.line, f.column, f.rule, f.message
                    ))?;
                }
                let errors = findings.iter().filter(|f| f.level == Level::Error).count();
                self.line(&format!(
                    "{} finding{} ({errors} error{})",
                    findings.len(),
                    plural(findings.len()),
                    plural(errors)
                ))
            }
        }
    }

    pub fn refreshed(&mut self, r: &Refreshed) {
        let _ = match self.format {
            Format::Json => self.json(&Tagged {
                kind: "refreshed",
                inner: r,
            }),
            _ => self.line(&format!(
                "refreshed {}{} in {}",
                r.name,
                if r.concurrently { " concurrently" } else { "" },
                millis(r.duration_ms)
            )),
        };
    }

    pub fn refresh_status(&self, rows: &[MatviewStatus]) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.line(&serde_json::to_string_pretty(rows)?),
            _ => {
                if rows.is_empty() {
                    return self.line("no materialized views");
                }
                let header = [
                    "matview",
                    "populated",
                    "concurrently",
                    "reads",
                    "last refresh",
                    "stale",
                ];
                let table_rows: Vec<[String; 6]> = rows
                    .iter()
                    .map(|m| {
                        [
                            m.name.clone(),
                            m.populated.to_string(),
                            m.concurrently.to_string(),
                            m.reads.join(", "),
                            m.last_refresh
                                .clone()
                                .unwrap_or_else(|| "never (by evolve)".into()),
                            match m.stale {
                                None => "unknown".into(),
                                Some(false) => "no".into(),
                                Some(true) => format!("yes: {}", m.stale_because.join("; ")),
                            },
                        ]
                    })
                    .collect();
                self.line(&table(&header, &table_rows))
            }
        }
    }

    pub fn validated(&self, r: &ValidateReport) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.json(&Tagged {
                kind: "valid",
                inner: r,
            }),
            Format::Text | Format::Dot | Format::Mermaid => self.line(&format!(
                "{}: {} applied migration{} match their files; {} pending",
                r.history_table,
                r.applied,
                plural(r.applied),
                r.pending
            )),
        }
    }

    pub fn changed(&self, verb: &str, r: &ChangeReport) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.json(&Tagged {
                kind: "summary",
                inner: r,
            }),
            Format::Text | Format::Dot | Format::Mermaid => self.line(&format!(
                "{verb} {}: {} row{} changed",
                r.history_table,
                r.changed,
                plural(r.changed)
            )),
        }
    }
}

#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    inner: &'a T,
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.2} s", ms as f64 / 1000.0)
    }
}

/// `V2 add index`, `R views`, `B5 base` (a baseline migration, as its
/// `B5__base.sql` names it); a file without a description (`V1.sql`) is
/// `V1`, with no space after it.
fn label(kind: Kind, version: &Option<String>, description: &str) -> String {
    let kind = match (kind, version) {
        (Kind::Baseline, Some(v)) => format!("B{v}"),
        (_, Some(v)) => format!("V{v}"),
        (_, None) => "R".to_string(),
    };
    if description.is_empty() {
        kind
    } else {
        format!("{kind} {description}")
    }
}

pub fn event_text(e: &Event) -> String {
    match e {
        Event::LockWait { table, holder } => format!(
            "waiting for the migration lock on {table}, held by {}",
            holder
                .as_ref()
                .map(|h| h.to_string())
                .unwrap_or_else(|| "another session".into())
        ),
        Event::LockAcquired { table, waited_ms } => {
            format!(
                "took the migration lock on {table} after {}",
                millis(*waited_ms)
            )
        }
        Event::HistoryCreated { table } => format!("created history table {table}"),
        Event::SchemasCreated { table, schemas } => format!(
            "created schema{} {} (recorded in {table} as Flyway records it)",
            plural(schemas.len()),
            schemas.join(", ")
        ),
        Event::Baselined {
            table,
            version,
            non_empty_schemas,
        } => format!(
            "baselined at version {version} (baselineOnMigrate: no history table {table} yet, and schema{} {} not empty)",
            plural(non_empty_schemas.len()),
            non_empty_schemas.join(", ")
        ),
        Event::Applied {
            version,
            description,
            kind,
            statements,
            execution_time_ms,
            attempts,
            resumed_at_statement,
            out_of_order,
            ..
        } => {
            let mut s = format!(
                "applied {} ({statements} statement{}, {})",
                label(*kind, version, description),
                plural(*statements),
                millis(*execution_time_ms)
            );
            if *attempts > 1 {
                s.push_str(&format!(" after {attempts} attempts"));
            }
            if let Some(n) = resumed_at_statement {
                s.push_str(&format!(", resumed at statement {n}"));
            }
            if *out_of_order {
                s.push_str(", out of order");
            }
            s
        }
        Event::WouldApply {
            version,
            description,
            kind,
            statements,
            transaction,
            resume_at_statement,
            ..
        } => {
            let mut s = format!(
                "would apply {} ({statements} statement{}, {})",
                label(*kind, version, description),
                plural(*statements),
                if *transaction {
                    "in one transaction"
                } else {
                    "outside a transaction"
                }
            );
            if let Some(n) = resume_at_statement {
                s.push_str(&format!(", resuming at statement {n}"));
            }
            s
        }
        Event::LockRetry {
            script,
            line,
            attempt,
            retries,
            wait_ms,
            blockers,
            role,
        } => {
            let who = evolve_migrate::describe_blockers(blockers, role);
            format!(
                "lock timeout in {script} at line {line}, blocked by {who}; retry {attempt} of {retries} in {}",
                millis(*wait_ms)
            )
        }
        Event::Rebuilt { script, dependents } => format!(
            "{script}: rebuilt {} dependent{} around its ALTERs: {}",
            dependents.len(),
            plural(dependents.len()),
            dependents.join(", ")
        ),
        Event::WouldRebuild {
            script,
            drop,
            create,
            refresh_after_commit,
            refresh_estimates,
        } => {
            let mut s = format!("{script} would rebuild its dependents:");
            for d in drop {
                s.push_str(&format!("\n  before: {d}"));
            }
            for c in create {
                s.push_str(&format!("\n  after:  {c}"));
            }
            for (r, e) in refresh_after_commit.iter().zip(refresh_estimates) {
                let last = e
                    .last_refresh_ms
                    .map(|ms| format!(", last refresh took {}", millis(ms.max(0) as u64)))
                    .unwrap_or_default();
                let rows = match (e.rows, e.rows_counted) {
                    (Some(n), true) => format!("{n} row{}", plural(n as usize)),
                    (Some(n), false) => format!("about {n} rows (the planner's estimate)"),
                    (None, _) => "rows unknown (never analysed)".to_string(),
                };
                s.push_str(&format!(
                    "\n  after the commit: {r} (unreadable until done: {rows}, {} kB{last})",
                    e.bytes / 1024
                ));
            }
            s
        }
        Event::Refreshed {
            name,
            refresh_ms,
            unreadable_ms,
        } => format!(
            "refreshed {name} in {} (unreadable for {} after the commit)",
            millis(*refresh_ms),
            millis(*unreadable_ms)
        ),
        Event::IndexBuildWait {
            script,
            index,
            builders,
            max_wait_ms,
        } => format!(
            "{script}: INVALID index {index} is still being built by {}; waiting up to {} for that build instead of dropping the index",
            evolve_pg::describe_sessions(builders),
            millis(*max_wait_ms)
        ),
        Event::InvalidIndexDropped { script, index } => format!(
            "{script}: dropped INVALID index {index} left by an earlier failed CREATE INDEX CONCURRENTLY; building it again"
        ),
        Event::Repaired { script, action, .. } => match action {
            RepairAction::RemovedFailedRow => format!("removed the failed row of {script}"),
            RepairAction::RealignedChecksum => {
                format!("realigned the recorded checksum of {script} with the file")
            }
            RepairAction::MarkedDeleted => format!("marked {script} as deleted"),
        },
        Event::BackfillHandedOff {
            script,
            job,
            outcome,
        } => format!("{script} handed off to backfill job {job}: {outcome}"),
        Event::StoppedAtPhase {
            script,
            phase,
            until,
        } => format!("stopped before {script} (phase {phase}), as --until-phase {until} asks"),
        Event::WouldCoordinate {
            script,
            pipeline,
            views,
            old_table,
            columns,
            before,
            statements,
            after,
        } => {
            let mut s = format!(
                "{script} changes columns table {old_table} of the pipeline at {pipeline} ingests ({columns}); materialized view{} {} would move first:",
                plural(views.len()),
                views.join(", ")
            );
            for step in before {
                s.push_str(&format!("\n  before: {step}"));
            }
            for statement in statements {
                s.push_str(&format!("\n  file:   {statement};"));
            }
            for step in after {
                s.push_str(&format!("\n  after the commit: {step}"));
            }
            s
        }
        Event::Coordinated {
            script,
            views,
            old_table,
            table,
            columns,
            when,
            ..
        } if when == "before" => format!(
            "{script}: materialized view{} {} moved from table {old_table} to {table} ({columns}) before the file; dropped {old_table}",
            plural(views.len()),
            views.join(", ")
        ),
        Event::Coordinated {
            script,
            views,
            old_table,
            table,
            columns,
            ..
        } => format!(
            "{script}: after the commit, materialized view{} {} read{} table {table} ({columns}); dropped {old_table}",
            plural(views.len()),
            views.join(", "),
            if views.len() == 1 { "s" } else { "" }
        ),
        Event::CoordinationUndone {
            script,
            views,
            table,
        } => format!(
            "{script} failed; materialized view{} {} moved back onto table {table}, a copy of the version before",
            plural(views.len()),
            views.join(", ")
        ),
        other => format!("{other:?}"),
    }
}

pub fn status_text(r: &StatusReport) -> String {
    let mut out = String::new();
    let at = r.current_version.as_deref().unwrap_or("none");
    if !r.history_exists {
        out.push_str(&format!(
            "{}: no history table yet (created by the first apply)\n",
            r.history_table
        ));
    } else {
        out.push_str(&format!("{}: schema version {at}\n", r.history_table));
    }
    if r.migrations.is_empty() {
        out.push_str("no migrations found");
        return out;
    }
    let header = [
        "version",
        "description",
        "type",
        "state",
        "checksum",
        "applied at",
        "time",
        "note",
    ];
    let rows: Vec<[String; 8]> = r.migrations.iter().map(status_row).collect();
    if r.migrations.iter().any(|m| m.phase.is_some()) {
        // Files of `evolve change` say which phase they are.
        let mut header9 = [""; 9];
        header9[..2].copy_from_slice(&header[..2]);
        header9[2] = "phase";
        header9[3..].copy_from_slice(&header[2..]);
        let rows9: Vec<[String; 9]> = r
            .migrations
            .iter()
            .zip(rows)
            .map(|(m, row)| {
                let [a, b, rest @ ..] = row;
                let mut out: [String; 9] = Default::default();
                out[0] = a;
                out[1] = b;
                out[2] = m.phase.clone().unwrap_or_default();
                for (o, r) in out[3..].iter_mut().zip(rest) {
                    *o = r;
                }
                out
            })
            .collect();
        out.push_str(&table(&header9, &rows9));
        return out;
    }
    out.push_str(&table(&header, &rows));
    out
}

fn status_row(m: &MigrationStatus) -> [String; 8] {
    [
        m.version.clone().unwrap_or_default(),
        m.description.clone(),
        serde_json::to_value(m.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        m.state.as_str().to_string(),
        m.checksum.map(|c| c.to_string()).unwrap_or_default(),
        m.applied_at.clone().unwrap_or_default(),
        m.execution_time_ms
            .map(|t| format!("{t} ms"))
            .unwrap_or_default(),
        m.note.clone().unwrap_or_default(),
    ]
}

/// A psql-like aligned table.
fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let fmt_row = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!(" {}", parts.join(" | ")).trim_end().to_string()
    };
    let mut out = fmt_row(header.to_vec());
    out.push('\n');
    out.push_str(
        &widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+"),
    );
    for row in rows {
        out.push('\n');
        out.push_str(&fmt_row(row.iter().map(String::as_str).collect()));
    }
    out
}

/// Completes on SIGINT or SIGTERM: when a server command (`registry serve`,
/// `pipeline run`) should stop.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

/// The most a file named on the command line may hold: a stream that
/// does not end (`/dev/zero` behind a FIFO) fails here, not in memory.
const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Reads the text file at `path`, named on the command line: a regular
/// file, or a FIFO (process substitution, `<(...)`); devices and sockets
/// are refused, as is anything past 1 GiB or not UTF-8. The error is one
/// line naming the file, what is wrong, and the way out.
pub fn read_input(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    use std::os::unix::fs::FileTypeExt as _;
    let shown = path.display();
    let way_out = |e: &std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => "; check the path",
        std::io::ErrorKind::PermissionDenied => "; make it readable for this user",
        _ => "",
    };
    let metadata =
        std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}{}", way_out(&e)))?;
    let kind = metadata.file_type();
    if kind.is_dir() {
        return Err(format!(
            "cannot read {shown}: it is a directory; name a file"
        ));
    }
    if kind.is_char_device() || kind.is_block_device() || kind.is_socket() {
        return Err(format!(
            "cannot read {shown}: it is a device or socket, not a file; name a file (or `-` for stdin where the command takes it)"
        ));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read {shown}: {e}{}", way_out(&e)))?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "cannot read {shown}: it holds more than 1 GiB; split it into smaller files"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|b| **b == b'\n').count();
        format!(
            "cannot read {shown}: invalid UTF-8 at byte offset {at} (line {line}); save the file as UTF-8"
        )
    })
}

#[cfg(test)]
mod input_tests {
    use super::read_input;

    #[test]
    fn only_files_are_read_and_bad_bytes_are_located() {
        let dir = std::env::temp_dir().join(format!("evolve-read-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("a.sql");
        std::fs::write(&good, "select 1;\n").unwrap();
        assert_eq!(read_input(&good).unwrap(), "select 1;\n");
        let bad = dir.join("b.sql");
        std::fs::write(&bad, b"select 1;\nselect '\xe9';\n").unwrap();
        let e = read_input(&bad).unwrap_err();
        assert!(
            e.ends_with("invalid UTF-8 at byte offset 18 (line 2); save the file as UTF-8"),
            "{e}"
        );
        let e = read_input(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("it is a device or socket, not a file"), "{e}");
        assert!(read_input(&dir).unwrap_err().contains("it is a directory"));
        let e = read_input(&dir.join("missing.sql")).unwrap_err();
        assert!(e.ends_with("; check the path"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
