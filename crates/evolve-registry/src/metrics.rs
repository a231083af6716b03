//! `/metrics` in Prometheus' text format: requests and their durations by
//! method, route and status, and the size of the registry.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::Method;

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
