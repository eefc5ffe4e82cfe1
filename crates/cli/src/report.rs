//! The `blis run` report: a versioned JSON document for machines and a
//! table for people (in the spirit of `vllm bench serve`'s result block).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use blis_cluster::metrics::ClusterSummary;
use blis_engine::hardware::KvBudget;
use blis_engine::metrics::{Distribution, GroupSummary, RunSummary};
use serde::Serialize;

use crate::breakdown::{self, ClientLatencyReport};
use crate::knobs::ConfigReport;

/// Version of the JSON report schema. Bumped on any incompatible change;
/// fields are only ever added within a version.
pub const SCHEMA_VERSION: u32 = 1;

/// Name and version of the program that wrote a report.
#[derive(Clone, Debug, Serialize)]
pub struct SimulatorInfo {
    /// Always "blis".
    pub name: &'static str,
    /// Crate version.
    pub version: &'static str,
}

impl SimulatorInfo {
    /// This build.
    pub fn current() -> SimulatorInfo {
        SimulatorInfo { name: "blis", version: env!("CARGO_PKG_VERSION") }
    }
}

/// What was simulated, resolved.
#[derive(Clone, Debug, Serialize)]
pub struct DeploymentInfo {
    /// Model id.
    pub model: String,
    /// GPU name.
    pub hardware: String,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Latency model name.
    pub latency_model: String,
    /// Where the latency model's coefficients came from.
    pub coefficients: String,
    /// KV blocks per instance.
    pub num_gpu_blocks: u64,
    /// How one GPU's memory was split, GiB, when the block count was derived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_memory_per_gpu: Option<KvBudget>,
}

/// The JSON document `blis run` writes.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Program and version.
    pub simulator: SimulatorInfo,
    /// Master seed.
    pub seed: u64,
    /// Model, hardware, parallelism.
    pub deployment: DeploymentInfo,
    /// Every knob with its value and source.
    pub config: ConfigReport,
    /// The measurements.
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Per-client, per-tenant, per-SLO-class and per-stage metrics, for the
    /// dimensions in which the workload has more than one value.
    pub breakdowns: BTreeMap<&'static str, BTreeMap<String, GroupSummary>>,
    /// Client-perspective TTFT and E2E, ms (server-side plus the network
    /// model), when a workload client has a network model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_latency_ms: Option<ClientLatencyReport>,
    /// Control plane, policies, per-class/tenant/instance results, anomalies.
    pub cluster: ClusterSummary,
}

/// One latency, at most 9 characters so the 10-wide columns never run
/// together: ms with two decimals, whole ms from 10⁶, then scientific.
fn latency_cell(ms: f64) -> String {
    if ms.abs() < 1e6 {
        format!("{ms:.2}")
    } else if ms.abs() < 1e9 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.2e}")
    }
}

/// A statistic `v` of `d` as a table cell: a dash when `d` has no samples
/// (nothing completed), where a zero would read as "instant".
pub(crate) fn stat_cell(d: &Distribution, v: f64) -> String {
    if d.count == 0 { "—".to_string() } else { latency_cell(v) }
}

/// A distribution's row.
fn dist_row(out: &mut String, name: &str, d: &Distribution) {
    let _ = write!(out, "{name:<24}");
    for v in [d.mean, d.p50, d.p90, d.p95, d.p99, d.max] {
        let _ = write!(out, "{:>10}", stat_cell(d, v));
    }
    out.push('\n');
}

/// Renders the human summary.
pub fn table(report: &RunReport) -> String {
    let s = &report.summary;
    let d = &report.deployment;
    let mut out = String::new();
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<44}{v}");
    };
    let _ = writeln!(out, "{:=^84}", " BLIS simulation result ");
    line(&mut out, "Model:", d.model.clone());
    let hardware = format!("{} × {} (TP {}), {} KV blocks", d.tp, d.hardware, d.tp, d.num_gpu_blocks);
    match report.cluster.num_instances {
        1 => line(&mut out, "Hardware:", hardware),
        n => line(&mut out, "Hardware (each of the instances):", format!("{hardware}; {} GPUs in all", u64::from(n) * u64::from(d.tp))),
    }
    if let Some(b) = &d.kv_memory_per_gpu {
        line(
            &mut out,
            "KV cache per GPU (GiB, derived):",
            format!(
                "{:.2} requested − {:.2} weights − {:.2} activations − {:.2} non-torch = {:.2}",
                b.requested_gib, b.weights_gib, b.activation_peak_gib, b.non_torch_gib, b.kv_cache_gib
            ),
        );
    }
    line(&mut out, "Latency model / seed:", format!("{} ({}) / {}", d.latency_model, d.coefficients, report.seed));
    line(&mut out, "Requests completed / injected:", format!("{} / {}", s.requests.completed, s.requests.injected));
    line(
        &mut out,
        "Still queued / running; dropped; timed out:",
        format!("{} / {}; {}; {}", s.requests.queued, s.requests.running, s.requests.dropped, s.requests.timed_out),
    );
    if s.requests.dropped > 0 {
        let reasons: Vec<String> = s.requests.dropped_by_reason.iter().filter(|(_, n)| **n > 0).map(|(r, n)| format!("{n} {r}")).collect();
        line(&mut out, "Dropped (never runnable):", reasons.join(", "));
    }
    line(&mut out, "Simulated duration (s):", format!("{:.2}", s.simulated_duration_s));
    line(&mut out, "Total input / output tokens:", format!("{} / {}", s.tokens.input_total, s.tokens.output_total));
    line(&mut out, "Request throughput (req/s):", format!("{:.2}", s.throughput.requests_per_s));
    line(&mut out, "Output token throughput (tok/s):", format!("{:.2}", s.throughput.output_tokens_per_s));
    line(&mut out, "Total token throughput (tok/s):", format!("{:.2}", s.throughput.total_tokens_per_s));
    let _ = writeln!(out, "{:-^84}", " Latency (ms) ");
    let _ = writeln!(out, "{:<24}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}", "", "mean", "p50", "p90", "p95", "p99", "max");
    let l = &s.latency_ms;
    dist_row(&mut out, "TTFT", &l.ttft);
    dist_row(&mut out, "TPOT (excl. 1st token)", &l.tpot);
    dist_row(&mut out, "ITL", &l.itl);
    dist_row(&mut out, "E2E", &l.e2e);
    dist_row(&mut out, "Scheduling delay", &l.scheduling_delay);
    if let Some(c) = &report.client_latency_ms {
        breakdown::client_latency_rows(&mut out, c, dist_row);
    }
    let _ = writeln!(out, "{:-^84}", " Engine ");
    line(&mut out, "Prefix-cache hit rate:", format!("{:.1}%", s.kv_cache.prefix_hit_rate * 100.0));
    line(
        &mut out,
        "KV utilisation peak / mean:",
        format!("{:.1}% / {:.1}%", s.kv_cache.utilization_peak * 100.0, s.kv_cache.utilization_mean * 100.0),
    );
    line(&mut out, "Preemptions:", s.kv_cache.preemptions.to_string());
    line(
        &mut out,
        "Steps; mean batch (requests / tokens):",
        format!("{}; {:.1} / {:.1}", s.batch.steps, s.batch.mean_batch_size, s.batch.mean_batch_tokens),
    );
    line(&mut out, "GPU busy:", format!("{:.1}%", s.batch.busy_fraction * 100.0));
    if s.batch.steps_clamped > 0 {
        line(
            &mut out,
            "WARNING: step times clamped:",
            format!("{} (predicted ≤ 1 µs or ≥ 1 h: check the coefficients)", s.batch.steps_clamped),
        );
    }
    if s.batch.overheads_clamped > 0 {
        line(
            &mut out,
            "WARNING: overheads clamped:",
            format!("{} (queueing, token or completion delays ≥ 1 h: check α)", s.batch.overheads_clamped),
        );
    }
    out.push_str(&breakdown::table(&report.breakdowns));
    if crate::cluster::worth_showing(&report.cluster) {
        out.push_str(&crate::cluster::table(&report.cluster));
    }
    let _ = writeln!(out, "{:=^84}", "");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_cells_fit_their_columns_and_empty_rows_show_dashes() {
        for ms in [0.0, 8.54, 999_999.99, 3_600_027.62, 999_999_999.0, 3.6e12, 1e300] {
            let cell = latency_cell(ms);
            assert!(cell.chars().count() <= 9, "{ms} → {cell}");
            let back: f64 = cell.parse().unwrap();
            assert!((back - ms).abs() <= 0.01 * ms.abs() + 0.005, "{ms} → {cell}");
        }
        let d = Distribution { count: 2, mean: 3_600_027.62, min: 1.0, p50: 3_600_025.32, p90: 2.0, p95: 3.0, p99: 4.0, max: 5.0 };
        let mut row = String::new();
        dist_row(&mut row, "TTFT", &d);
        let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
        assert_eq!(cells, ["3600028", "3600025", "2.00", "3.00", "4.00", "5.00"], "{row}");
        let mut empty = String::new();
        dist_row(&mut empty, "E2E", &Distribution { count: 0, ..d });
        assert_eq!(empty.split_whitespace().skip(1).collect::<Vec<_>>(), ["—"; 6], "{empty}");
    }
}
