//! Scoring a candidate policy for a search (GEPA, OpenEvolve): one number
//! and the evidence a reflecting model reads.
//!
//! A candidate is a policy file (`--policy-config`'s schema). It is run
//! on the caller's scenario; its score is the run's fitness
//! ([`blis_cluster::fitness`]) under the scenario's `--fitness-weights`, or
//! [`DEFAULT_WEIGHTS`]. The evidence is the run's headline metrics and
//! anomalies plus excerpts of its routing decisions: the `excerpts`
//! decisions that sent a request furthest above the least-loaded candidate
//! (load = queue + batch + pending), each as one line with the candidates'
//! loads and the policy's scores. A candidate that cannot run scores 0 and
//! its error is the evidence: a search must be able to rank invalid
//! candidates too.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

use blis_cluster::trace::{AdmissionTrace, DecisionSink, RoutingTrace};
use blis_engine::metrics::Distribution;
use serde_json::{Value, json};

use crate::knobs::KnobValues;
use crate::{Outputs, Scenario, ScenarioError};

/// Fitness weights when the scenario gives none: goodput first, then the
/// tails users feel.
pub const DEFAULT_WEIGHTS: &str = "goodput:0.5,ttft_p99:0.25,e2e_p99:0.25";

/// Keeps the routing decisions furthest above the least-loaded candidate.
struct Excerpts {
    keep: usize,
    /// (load gap, reverse decision number, line): the smallest gap on top.
    worst: BinaryHeap<Reverse<(u32, Reverse<u64>, String)>>,
    decisions: u64,
}

impl DecisionSink for Excerpts {
    fn admission(&mut self, _d: &AdmissionTrace<'_>) {}

    fn routing(&mut self, d: &RoutingTrace<'_>) {
        self.decisions += 1;
        let loads: Vec<u32> = d.snapshots.iter().map(|s| s.effective_load()).collect();
        let Some(chosen) = d.snapshots.iter().position(|s| s.instance == d.chosen) else { return };
        let gap = loads[chosen] - loads.iter().copied().min().unwrap_or(0);
        if self.keep == 0 || gap == 0 {
            return;
        }
        if self.worst.len() == self.keep && self.worst.peek().is_some_and(|Reverse((g, _, _))| *g >= gap) {
            return;
        }
        let candidates: Vec<String> = d
            .snapshots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!("instance {} load {} score {}", s.instance, loads[i], d.scores.total(i).map_or("-".into(), |t| format!("{t:.3}")))
            })
            .collect();
        let line = format!(
            "t={:.3}s {} sent request {} ({} prompt tokens) to instance {} with load {}, {} above the least loaded; candidates: {}",
            d.time.as_secs_f64(),
            d.policy,
            d.request.id.0,
            d.request.prompt_tokens(),
            d.chosen,
            loads[chosen],
            gap,
            candidates.join("; ")
        );
        self.worst.push(Reverse((gap, Reverse(self.decisions), line)));
        if self.worst.len() > self.keep {
            self.worst.pop();
        }
    }
}

/// The scenario of `values` over `files` with `policy` as its policy file,
/// scored by [`DEFAULT_WEIGHTS`] unless they give weights.
fn scenario(policy: Option<&Path>, values: &KnobValues, files: &[(KnobValues, String)]) -> Scenario {
    let mut given = values.clone();
    given.policy_config = policy.map(Path::to_path_buf);
    if given.fitness_weights.is_none() && files.iter().all(|(f, _)| f.fitness_weights.is_none()) {
        given.fitness_weights = Some(DEFAULT_WEIGHTS.to_string());
    }
    Scenario::from_values(&given, files.to_vec())
}

/// Checks, without simulating, that the scenario of `values` (and its
/// `files`) resolves with the default policies, and draws its arrivals
/// once (all of an open-loop workload's; a closed loop's first ones, which
/// wait on no completion): an error here is the caller's (a flag or file,
/// or a rate so low that arrivals pass the end of simulated time), not any
/// candidate's, and should stop the evaluation before a candidate runs.
pub fn check(values: &KnobValues, files: &[(KnobValues, String)]) -> Result<(), ScenarioError> {
    let mut resolved = scenario(None, values, files).resolve()?;
    resolved.cluster.build(&resolved.fleet, None)?;
    let stream = resolved.workload.stream.as_mut();
    while let Some(arrival) = stream.peek_arrival() {
        if resolved.horizon.is_some_and(|end| arrival > end) {
            break;
        }
        stream.next_request();
    }
    match stream.take_error() {
        Some(e) => Err(crate::workload_failed(&e)),
        None => Ok(()),
    }
}

/// A latency statistic of `d`, or null when nothing was measured (no
/// request completed), never 0.
fn measured(d: &Distribution, stat: f64) -> Value {
    if d.count == 0 { Value::Null } else { json!(stat) }
}

/// Runs `candidate` (a policy file) on the scenario of `values` (and its
/// `files`), returning `{candidate, score, fitness, metrics, anomalies,
/// trace, error}`; see the module documentation.
pub fn evaluate(candidate: &Path, values: &KnobValues, files: &[(KnobValues, String)], excerpts: usize) -> Value {
    let name = candidate.display().to_string();
    let scenario = scenario(Some(candidate), values, files);
    let mut sink = Excerpts { keep: excerpts, worst: BinaryHeap::new(), decisions: 0 };
    let report = scenario.resolve().map_err(|e| e.to_string()).and_then(|resolved| {
        crate::simulate(resolved, Outputs { observers: Vec::new(), decisions: Some(&mut sink) }).map_err(|e| e.to_string())
    });
    match report {
        Err(error) => json!({ "candidate": name, "score": 0.0, "error": error, "trace": [format!("the candidate did not run: {error}")] }),
        Ok(r) => {
            let mut worst: Vec<(u32, Reverse<u64>, String)> = sink.worst.into_iter().map(|Reverse(x)| x).collect();
            worst.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
            let s = &r.summary;
            let fitness = r.cluster.fitness.as_ref();
            json!({
                "candidate": name,
                "score": fitness.map_or(0.0, |f| f.score),
                "fitness": fitness.map(|f| &f.components),
                "metrics": {
                    "injected": s.requests.injected,
                    "completed": s.requests.completed,
                    "throughput_rps": s.throughput.requests_per_s,
                    "ttft_p99_ms": measured(&s.latency_ms.ttft, s.latency_ms.ttft.p99),
                    "itl_p99_ms": measured(&s.latency_ms.itl, s.latency_ms.itl.p99),
                    "e2e_p99_ms": measured(&s.latency_ms.e2e, s.latency_ms.e2e.p99),
                    "slo_attainment": r.cluster.goodput.slo_attainment,
                    "load_imbalance": r.cluster.load_balance.imbalance_max_over_mean,
                    "routing_decisions": sink.decisions,
                },
                "anomalies": r.cluster.anomalies,
                "trace": worst.into_iter().map(|(_, _, line)| line).collect::<Vec<_>>(),
                "error": Value::Null,
            })
        }
    }
}
