//! The human summary of a simulation report, in the spirit of `vllm bench
//! serve`'s result block: headline numbers, a latency table, the engine,
//! per-group tables and the cluster, on stderr.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use blis_cluster::autoscale::AutoscalingReport;
use blis_cluster::metrics::ClusterSummary;
use blis_engine::metrics::{Distribution, GroupSummary};
use blis_scenario::report::{ClientLatencyReport, RunReport};

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
fn stat_cell(d: &Distribution, v: f64) -> String {
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
    // vLLM's hybrid KV cache manager: the blocks are shared by groups of layers.
    let groups =
        report.config.get("kv-cache-groups").and_then(|e| e["value"].as_str()).map_or(String::new(), |g| format!("; KV cache groups: {g}"));
    let hardware = format!("{} × {} (TP {}), {} KV blocks{groups}", d.tp, d.hardware, d.tp, d.num_gpu_blocks);
    let serving = &report.cluster.pools;
    match (report.cluster.num_instances, &report.cluster.autoscaling, &report.cluster.pd) {
        // Several serving pools: each its own GPU, TP and cache.
        _ if !serving.is_empty() => {
            let gpus: u32 = serving.iter().map(|p| p.pool.instances * p.pool.gpus_per_instance).sum();
            for (k, p) in serving.iter().enumerate() {
                let all = if k + 1 == serving.len() { format!("; {gpus} GPUs in all") } else { String::new() };
                line(
                    &mut out,
                    &format!("Hardware (pool {}):", p.name),
                    format!(
                        "{} × {} (TP {}), {} KV blocks each{all}",
                        p.pool.instances, p.hardware, p.pool.gpus_per_instance, p.num_gpu_blocks
                    ),
                );
            }
        }
        (_, _, Some(pd)) => {
            // Each pool's own GPU, TP and cache, as resolved (the deployment's are the defaults they override).
            for (name, pool) in [("prefill", &pd.prefill), ("decode", &pd.decode)] {
                let v = report.config.get(&format!("{name}-pool")).map(|e| &e["value"]);
                let field = |key: &str| {
                    v.and_then(|v| v.get(key))
                        .map_or_else(|| String::from("?"), |x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                };
                let gpus = if name == "decode" { format!("; {} GPUs in all", pd.gpus) } else { String::new() };
                line(
                    &mut out,
                    &format!("Hardware ({name} pool):"),
                    format!(
                        "{} × {} (TP {}), {} KV blocks each{gpus}",
                        pool.instances,
                        field("hardware"),
                        pool.gpus_per_instance,
                        field("num_gpu_blocks")
                    ),
                );
            }
        }
        // Each node pool's own GPU and cache, which its section may set apart from the deployment's.
        (_, Some(a), None) => {
            for p in &a.pools {
                let key = if a.pools.len() > 1 {
                    format!("Hardware (pool {}, per replica):", p.name)
                } else {
                    "Hardware (per replica, autoscaled):".to_string()
                };
                line(&mut out, &key, format!("{} × {}, {} KV blocks{groups}", p.gpus_per_replica, p.hardware, p.num_gpu_blocks));
            }
        }
        (1, None, None) => line(&mut out, "Hardware:", hardware),
        (n, None, None) => {
            line(&mut out, "Hardware (each of the instances):", format!("{hardware}; {} GPUs in all", u64::from(n) * u64::from(d.tp)))
        }
    }
    // The deployment's memory budget, unless every replica runs elsewhere
    // (P/D pools, or node pools of another GPU or width).
    let pools_differ = report
        .cluster
        .autoscaling
        .as_ref()
        .is_some_and(|a| a.pools.iter().any(|p| (p.hardware.as_str(), p.gpus_per_replica) != (d.hardware.as_str(), d.tp)));
    let pools_differ =
        pools_differ || serving.iter().any(|p| (p.hardware.as_str(), p.pool.gpus_per_instance) != (d.hardware.as_str(), d.tp));
    if let Some(b) = d.kv_memory_per_gpu.as_ref().filter(|_| report.cluster.pd.is_none() && !pools_differ) {
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
        if s.requests.dropped_by_reason.get("exceeds_max_model_len").is_some_and(|&n| n > 0) {
            let limit = report.config.get("max-model-len").map_or(String::new(), |v| format!(" {}", v["value"]));
            line(&mut out, "", format!("(prompt + output above --max-model-len{limit}: vLLM refuses them with HTTP 400;"));
            line(&mut out, "", "multi-turn prompts grow with their conversation)".to_string());
        }
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
        client_latency_rows(&mut out, c, dist_row);
    }
    let _ = writeln!(out, "{:-^84}", " Engine ");
    line(&mut out, "Prefix-cache hit rate:", format!("{:.1}%", s.kv_cache.prefix_hit_rate * 100.0));
    line(
        &mut out,
        "KV utilisation peak / mean:",
        format!("{:.1}% / {:.1}%", s.kv_cache.utilization_peak * 100.0, s.kv_cache.utilization_mean * 100.0),
    );
    line(&mut out, "Preemptions:", s.kv_cache.preemptions.to_string());
    if let Some(o) = &s.kv_cache.offload {
        const GB: f64 = 1e9;
        line(&mut out, "KV offload hit rate; loads:", format!("{:.1}%; {}", o.hit_rate * 100.0, o.loads));
        line(
            &mut out,
            "KV offload GB loaded / stored (per GPU):",
            format!("{:.2} / {:.2}", o.bytes_loaded as f64 / GB, o.bytes_stored as f64 / GB),
        );
        line(&mut out, "KV offload mean load wait; thrashing:", format!("{:.2} ms; {:.1}%", o.mean_load_wait_ms, o.thrashing_rate * 100.0));
        for t in &o.tiers {
            line(
                &mut out,
                &format!("  {} tier blocks; hit rate; thrashing:", t.medium.name()),
                format!("{}; {:.1}%; {:.1}%", t.capacity_blocks, t.hit_rate * 100.0, t.thrashing_rate * 100.0),
            );
        }
    }
    line(
        &mut out,
        "Steps; mean batch (requests / tokens):",
        format!("{}; {:.1} / {:.1}", s.batch.steps, s.batch.mean_batch_size, s.batch.mean_batch_tokens),
    );
    line(&mut out, "GPU busy:", format!("{:.1}%", s.batch.busy_fraction * 100.0));
    if s.batch.moe_kernel_compiles > 0 {
        line(
            &mut out,
            "MoE kernel compiles (cold start):",
            format!(
                "{}, stalling {:.1} s (--moe-kernel-compile 0: a warm Triton cache)",
                s.batch.moe_kernel_compiles, s.batch.moe_compile_stall_s
            ),
        );
    }
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
    out.push_str(&breakdown_table(&report.breakdowns));
    if worth_showing(&report.cluster) {
        out.push_str(&cluster_table(&report.cluster));
    }
    if let Some(a) = &report.cluster.autoscaling {
        out.push_str(&autoscaling_table(a));
    }
    let _ = writeln!(out, "{:=^84}", "");
    out
}

/// Table rows for the client-perspective latencies, in the latency block's format.
fn client_latency_rows(out: &mut String, c: &ClientLatencyReport, row: fn(&mut String, &str, &Distribution)) {
    row(out, "TTFT (client, network)", &c.overall.ttft);
    row(out, "E2E (client, network)", &c.overall.e2e);
}

/// The per-group tables (failed = dropped, timed out or rejected).
fn breakdown_table(breakdowns: &BTreeMap<&'static str, BTreeMap<String, GroupSummary>>) -> String {
    let mut out = String::new();
    for (dimension, groups) in breakdowns {
        let _ = writeln!(out, "{:-^84}", format!(" By {} ", dimension.replace('_', " ")));
        let _ = writeln!(
            out,
            "{:<20}{:>10}{:>10}{:>11}{:>11}{:>11}{:>11}",
            "", "completed", "failed", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99"
        );
        for (name, g) in groups {
            let short: String = name.chars().take(19).collect();
            let l = &g.latency_ms;
            let failed = g.dropped + g.timed_out + g.rejected;
            let cell = stat_cell;
            let _ = writeln!(
                out,
                "{short:<20}{:>10}{failed:>10}{:>11}{:>11}{:>11}{:>11}",
                g.completed,
                cell(&l.ttft, l.ttft.p50),
                cell(&l.ttft, l.ttft.p99),
                cell(&l.e2e, l.e2e.p50),
                cell(&l.e2e, l.e2e.p99)
            );
        }
    }
    out
}

/// The autoscaling part of the human summary.
fn autoscaling_table(a: &AutoscalingReport) -> String {
    let mut out = String::new();
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<44}{v}");
    };
    let _ = writeln!(out, "{:-^84}", " Autoscaling ");
    line(
        &mut out,
        "Policy; replicas min–max (peak):",
        format!("{}; {}–{} ({})", a.policy, a.min_replicas, a.max_replicas, a.peak_replicas),
    );
    line(
        &mut out,
        "Decisions; scale-ups / downs; oscillations:",
        format!("{}; {} / {}; {}", a.decisions, a.scale_ups, a.scale_downs, a.oscillations),
    );
    line(
        &mut out,
        "Replicas added / removed; re-routed:",
        format!("{} / {}; {}", a.replicas_added, a.replicas_removed, a.rerouted_requests),
    );
    if a.held_requests > 0 || a.cold_starts > 0 {
        let wait = a.held_wait_ms.as_ref().map_or("—".to_string(), |d| format!("{} / {}", latency_cell(d.mean), latency_cell(d.p99)));
        line(&mut out, "Cold starts; held, wait ms mean / p99:", format!("{}; {}, {wait}", a.cold_starts, a.held_requests));
    }
    line(&mut out, "Replica-hours; GPU-hours:", format!("{:.2}; {:.2}", a.replica_seconds / 3600.0, a.gpu_hours));
    match a.cost {
        Some(cost) => {
            let per_m = a.cost_per_million_output_tokens.map_or("—".to_string(), |c| format!("{c:.3}"));
            let per_dollar = a.goodput_per_dollar.map_or("—".to_string(), |g| format!("{g:.0}"));
            line(&mut out, "Cost $; per 1M output tok; SLO-met req/$:", format!("{cost:.2}; {per_m}; {per_dollar}"));
        }
        None => line(&mut out, "Cost:", "— (set --gpu-hour-cost or cost_per_gpu_hour)".to_string()),
    }
    if a.pools.len() > 1 {
        let _ = writeln!(out, "{:<16}{:>10}{:>10}{:>14}{:>12}{:>12}", "Pool", "GPU", "replicas", "ready-hours", "GPU-hours", "cost ($)");
        for p in &a.pools {
            let cost = p.cost.map_or("—".to_string(), |c| format!("{c:.2}"));
            let _ = writeln!(
                out,
                "{:<16}{:>10}{:>10}{:>14.2}{:>12.2}{cost:>12}",
                p.name,
                p.hardware,
                p.replicas_started,
                p.ready_replica_seconds / 3600.0,
                p.gpu_hours
            );
        }
    }
    out
}

/// Whether the cluster section of the human summary has anything to say.
fn worth_showing(s: &ClusterSummary) -> bool {
    let p = &s.policies;
    s.num_instances > 1
        || (p.admission.name, p.priority.name, p.routing.name, p.scheduler.name) != ("always-admit", "constant", "round-robin", "fcfs")
        || s.slo_classes.len() > 1
        || s.tenants.len() > 1
}

/// Whether any SLO class has a latency target (else every request "meets" its SLO).
fn has_targets(s: &ClusterSummary) -> bool {
    s.slo_classes.values().any(|g| g.targets.is_some_and(|t| t.ttft_ms.or(t.itl_ms).or(t.e2e_ms).is_some()))
}

/// The cluster part of the human summary.
fn cluster_table(s: &ClusterSummary) -> String {
    let mut out = String::new();
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<44}{v}");
    };
    let _ = writeln!(out, "{:-^84}", " Cluster ");
    let p = &s.policies;
    match s.autoscaling {
        Some(_) => line(&mut out, "Instance slots (replicas take turns):", s.num_instances.to_string()),
        None => line(&mut out, "Instances:", s.num_instances.to_string()),
    }
    line(&mut out, "Admission / priority:", format!("{} / {}", p.admission.name, p.priority.name));
    line(&mut out, "Routing / scheduler:", format!("{} / {}", p.routing.name, p.scheduler.name));
    let r = &s.requests;
    line(&mut out, "Arrived / admitted / rejected:", format!("{} / {} / {}", r.arrived, r.admitted, r.rejected));
    if let Some(d) = &r.admission_delay_ms {
        line(&mut out, "Delayed by admission; wait (ms) mean / p99:", format!("{}; {:.2} / {:.2}", r.delayed, d.mean, d.p99));
    }
    match has_targets(s) {
        true => line(
            &mut out,
            "Goodput (req/s) / SLO attainment:",
            format!("{:.2} / {:.1}%", s.goodput.requests_per_s, s.goodput.slo_attainment * 100.0),
        ),
        false => line(&mut out, "Goodput / SLO attainment:", "— (no SLO targets: set --slo-targets or slo_targets)".to_string()),
    }
    line(&mut out, "Load imbalance (max/mean requests):", format!("{:.2}", s.load_balance.imbalance_max_over_mean));
    line(
        &mut out,
        "Priority inversions / HOL blocking:",
        format!("{} / {}", s.anomalies.priority_inversions, s.anomalies.hol_blocking_events),
    );
    line(&mut out, "Jain fairness over tenants:", format!("{:.3}", s.fairness.jain_index_over_tenants));
    if let Some(c) = &s.counterfactual {
        line(
            &mut out,
            "Routing regret (ms) mean / p99; suboptimal:",
            format!("{:.2} / {:.2}; {} of {}", c.regret_ms.mean, c.regret_ms.p99, c.suboptimal_decisions, c.decisions),
        );
    }
    if let Some(f) = &s.fitness {
        line(&mut out, "Fitness:", format!("{:.4}", f.score));
    }
    if let Some(pd) = &s.pd {
        line(&mut out, "P:D instances; decider:", format!("{}; {}", pd.ratio, pd.decider));
        line(
            &mut out,
            "Disaggregated / local / prefill failed:",
            format!("{} / {} / {}", pd.requests.disaggregated, pd.requests.local, pd.requests.prefill_failed),
        );
        line(
            &mut out,
            "Busy prefill / decode:",
            format!("{:.1}% / {:.1}%", pd.prefill.batch.busy_fraction * 100.0, pd.decode.batch.busy_fraction * 100.0),
        );
        let t = &pd.kv_transfer;
        line(
            &mut out,
            "KV transfers; GiB; mean ms; link busy:",
            format!(
                "{}; {:.2}; {:.3}; {:.1}%",
                t.count,
                t.bytes as f64 / f64::from(1u32 << 30),
                t.mean_time_ms,
                t.link_utilization * 100.0
            ),
        );
        if has_targets(s) {
            line(&mut out, "Goodput per GPU (req/s):", format!("{:.3}", pd.goodput_per_gpu));
        }
    }
    if s.slo_classes.len() > 1 {
        let _ = writeln!(
            out,
            "{:<16}{:>9}{:>9}{:>10}{:>11}{:>12}{:>12}{:>12}",
            "SLO class", "arrived", "rejected", "completed", "attained", "TTFT p50", "TTFT p99", "E2E p99"
        );
        for (name, g) in &s.slo_classes {
            let attained = match g.targets.is_some_and(|t| t.ttft_ms.or(t.itl_ms).or(t.e2e_ms).is_some()) {
                true => format!("{:.1}%", g.slo_attainment * 100.0),
                false => "—".to_string(),
            };
            let _ = writeln!(
                out,
                "{name:<16}{:>9}{:>9}{:>10}{attained:>11}{:>12.2}{:>12.2}{:>12.2}",
                g.arrived, g.rejected, g.completed, g.latency_ms.ttft.p50, g.latency_ms.ttft.p99, g.latency_ms.e2e.p99
            );
        }
    }
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
