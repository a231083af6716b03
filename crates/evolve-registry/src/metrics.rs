//! `/metrics` in Prometheus' text format: requests and their durations by
//! method, route and status, the size of the registry, and on a Kafka
//! store who writes it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::Method;

use crate::forward::ForwardStats;
use crate::kafka::WriterStats;

/// Method, route template, status.
type RequestKey = (String, String, u16);

#[derive(Default)]
pub struct Metrics {
    /// Count and total seconds per key.
    requests: Mutex<BTreeMap<RequestKey, (u64, f64)>>,
}

impl Metrics {
    pub fn observe(&self, method: &Method, route: &str, status: u16, elapsed: Duration) {
        if let Ok(mut requests) = self.requests.lock() {
            let entry = requests
                .entry((method.as_str().to_owned(), route.to_owned(), status))
                .or_default();
            entry.0 += 1;
            entry.1 += elapsed.as_secs_f64();
        }
    }

    pub fn render(&self, subjects: usize, schemas: usize, offset: i64) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP evolve_registry_requests_total HTTP requests answered."
        );
        let _ = writeln!(out, "# TYPE evolve_registry_requests_total counter");
        let requests = self.requests.lock().map(|r| r.clone()).unwrap_or_default();
        for ((method, route, status), (count, _)) in &requests {
            let _ = writeln!(
                out,
                "evolve_registry_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {count}",
                escape(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP evolve_registry_request_seconds_total Time spent answering HTTP requests."
        );
        let _ = writeln!(out, "# TYPE evolve_registry_request_seconds_total counter");
        for ((method, route, status), (_, seconds)) in &requests {
            let _ = writeln!(
                out,
                "evolve_registry_request_seconds_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {seconds}",
                escape(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP evolve_registry_subjects Subjects with a live version."
        );
        let _ = writeln!(out, "# TYPE evolve_registry_subjects gauge");
        let _ = writeln!(out, "evolve_registry_subjects {subjects}");
        let _ = writeln!(
            out,
            "# HELP evolve_registry_schemas Distinct schemas (ids)."
        );
        let _ = writeln!(out, "# TYPE evolve_registry_schemas gauge");
        let _ = writeln!(out, "evolve_registry_schemas {schemas}");
        let _ = writeln!(
            out,
            "# HELP evolve_registry_log_offset The last log record applied."
        );
        let _ = writeln!(out, "# TYPE evolve_registry_log_offset gauge");
        let _ = writeln!(out, "evolve_registry_log_offset {offset}");
        out
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Kafka store's writer: whether this instance writes, its takeovers
/// and commits, and the writes it forwarded by outcome.
pub fn render_writer(writer: &WriterStats, forwarded: &ForwardStats) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    metric(
        "evolve_registry_writer",
        "gauge",
        "1 when this instance writes the Kafka store (holds the producer and the writer record names it).",
        &[("", u64::from(writer.is_writer))],
    );
    metric(
        "evolve_registry_writer_takeovers_total",
        "counter",
        "Times this instance took over writing the Kafka store.",
        &[("", writer.takeovers)],
    );
    metric(
        "evolve_registry_writer_commits_total",
        "counter",
        "Transactions of registry records this instance committed to the Kafka store.",
        &[("", writer.commits)],
    );
    metric(
        "evolve_registry_forwarded_total",
        "counter",
        "Writes forwarded to the writer, by outcome: answered, unreachable (written here instead), failed.",
        &[
            ("{outcome=\"answered\"}", forwarded.answered),
            ("{outcome=\"unreachable\"}", forwarded.unreachable),
            ("{outcome=\"failed\"}", forwarded.failed),
        ],
    );
    out
}
