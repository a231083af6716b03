//! Shared pieces of evolve's benchmarks. Each benchmark is a binary in
//! `src/bin/` that runs evolve and its named baseline in the same run and
//! prints both figures and the ratio; `cargo xtask bench NAME` runs one in
//! release mode. Results are kept in BENCHMARKS.md.

use std::time::Duration;

/// `1.234 s` or `45.6 ms`.
pub fn fmt(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.3} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

/// `a / b` as a ratio like `1.13x`.
pub fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64().max(1e-9))
}
