//! What autoscaling reports: its decisions and replica transitions as they
//! happen (for the decision trace), and the run's scaling, capacity and
//! cost totals with a replica timeline (`cluster.autoscaling`).

use blis_engine::metrics::Distribution;
use blis_engine::time::Micros;
use serde::Serialize;

use super::policy::ScaleMetrics;

/// Where a replica is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Waiting for its node.
    Provisioning,
    /// Loading the model's weights.
    Loading,
    /// Up, with slower steps (routable only if the warm-up allows).
    Warming,
    /// Serving.
    Ready,
    /// Removed from routing, finishing (or handing back) its requests.
    Draining,
    /// Gone.
    Gone,
}

/// What a scaling decision did.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "action", content = "replicas")]
pub enum ScaleAction {
    /// Nothing.
    None,
    /// Added replicas.
    Up(u32),
    /// Removed replicas.
    Down(u32),
}

/// Why the count changed or did not, besides the policy's wish.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Constraint {
    /// The policy's recommendation, within bounds, applied as is.
    None,
    /// Clamped to min/max replicas.
    Bounds,
    /// Held back by a stabilisation window.
    Stabilized,
    /// Held back by the cooldown.
    Cooldown,
    /// No node capacity left for every replica wanted.
    Capacity,
    /// A request arrived with no replica at all (scale from zero).
    Activation,
}

/// One scaling decision, with the metric values that caused it.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleDecision {
    /// When.
    #[serde(rename = "t_us", serialize_with = "as_us")]
    pub time: Micros,
    /// The scaling group, when the fleet has several (`prefill`, `decode`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The policy.
    pub policy: &'static str,
    /// Replicas counted (not draining) before.
    pub current: u32,
    /// Of which routable.
    pub ready: u32,
    /// The policy's wish.
    pub recommended: u32,
    /// After bounds, stabilisation and cooldown.
    pub desired: u32,
    /// What was done.
    #[serde(flatten)]
    pub action: ScaleAction,
    /// What held the policy's wish back, if anything.
    pub constraint: Constraint,
    /// The scrape the decision used.
    pub metrics: ScaleMetrics,
}

fn as_us<S: serde::Serializer>(t: &Micros, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(t.as_us())
}

/// A replica changed phase.
#[derive(Copy, Clone, Debug, Serialize)]
pub struct ReplicaTrace<'a> {
    /// When.
    #[serde(rename = "t_us", serialize_with = "as_us")]
    pub time: Micros,
    /// Its instance id (a slot a later replica may reuse once it is gone).
    pub instance: u32,
    /// Its node pool.
    pub pool: &'a str,
    /// The phase it entered.
    pub phase: Phase,
}

/// An autoscaling event for a [`crate::trace::DecisionSink`].
#[derive(Copy, Clone, Debug)]
pub enum ScaleTrace<'a> {
    /// A scaling decision.
    Decision(&'a ScaleDecision),
    /// A replica's transition.
    Replica(ReplicaTrace<'a>),
}

/// The fleet at one decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelinePoint {
    /// When, seconds.
    pub t_s: f64,
    /// Replicas coming up (provisioning, loading, warming and not routable).
    pub starting: u32,
    /// Replicas routable.
    pub ready: u32,
    /// Replicas draining.
    pub draining: u32,
    /// The decision's target.
    pub desired: u32,
    /// Nodes held (up or coming up).
    pub nodes: u32,
    /// Arrivals per second over the last interval.
    pub request_rate: f64,
    /// Mean saturation over routable replicas (see [`super::policy`]).
    pub saturation: f64,
    /// Mean KV utilisation over routable replicas.
    pub kv_utilization: f64,
    /// Requests waiting at replicas and at the gateway.
    pub waiting: u32,
    /// Mean TTFT of the first tokens of the last interval, ms.
    pub ttft_mean_ms: Option<f64>,
}

/// One pool's capacity and cost over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolReport {
    /// Pool name.
    pub name: String,
    /// Its GPU.
    pub hardware: String,
    /// GPUs per replica.
    pub gpus_per_replica: u32,
    /// KV blocks of each of its replicas.
    pub num_gpu_blocks: u64,
    /// Replicas started in it (the initial ones included).
    pub replicas_started: u32,
    /// Nodes requested (the initial ones included).
    pub nodes_requested: u32,
    /// Σ replica lifetimes (decision to gone), seconds.
    pub replica_seconds: f64,
    /// Σ time replicas were routable, seconds.
    pub ready_replica_seconds: f64,
    /// Σ node GPU time, hours (what is billed).
    pub gpu_hours: f64,
    /// gpu_hours × price, dollars (absent when unpriced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

/// `cluster.autoscaling`: scaling, capacity and cost of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoscalingReport {
    /// Policy template.
    pub policy: &'static str,
    /// Its parameters with defaults filled in.
    pub params: serde_json::Value,
    /// Replica bounds.
    pub min_replicas: u32,
    /// Replica bounds.
    pub max_replicas: u32,
    /// Decisions taken (ticks).
    pub decisions: u64,
    /// Decisions that added replicas (activations from zero included).
    pub scale_ups: u64,
    /// Decisions that removed replicas.
    pub scale_downs: u64,
    /// Replicas added.
    pub replicas_added: u64,
    /// Replicas removed (cancelled while coming up, or drained).
    pub replicas_removed: u64,
    /// Changes opposite to the previous one within the oscillation window (`ScaleOscillationCount`).
    pub oscillations: u64,
    /// Scale-ups from zero replicas triggered by a waiting request.
    pub cold_starts: u64,
    /// Requests that waited at the gateway for a routable replica.
    pub held_requests: u64,
    /// How long they waited, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_wait_ms: Option<Distribution>,
    /// Requests taken back from draining replicas and routed again.
    pub rerouted_requests: u64,
    /// Most replicas alive at once (draining ones included).
    pub peak_replicas: u32,
    /// Σ replica lifetimes, seconds.
    pub replica_seconds: f64,
    /// Σ node GPU time, hours.
    pub gpu_hours: f64,
    /// Dollars (absent when no pool is priced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Dollars per million output tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_million_output_tokens: Option<f64>,
    /// Requests that met their SLO per dollar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_per_dollar: Option<f64>,
    /// Per pool.
    pub pools: Vec<PoolReport>,
    /// The fleet at every decision.
    pub timeline: Vec<TimelinePoint>,
    /// With several scaling groups (a disaggregated deployment's prefill and
    /// decode pools): each group's own report, the figures above being the
    /// fleet's totals.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupReport>,
}

/// One scaling group's report, under the fleet's totals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupReport {
    /// The group's name (its pools' role: `prefill`, `decode`).
    pub name: String,
    /// Its report.
    #[serde(flatten)]
    pub report: AutoscalingReport,
}

impl AutoscalingReport {
    /// The fleet's report over its scaling groups' `reports` (named by
    /// `names`): the one group's as it is; over several, their sums (peak
    /// replicas: the sum of the groups' peaks, an upper bound), the policy
    /// if they share one (else `per-group`), the params by group, every
    /// pool, a timeline of the groups' counts summed at each of their
    /// decisions (the load figures of the first group that has them), and
    /// each group's own report. `None` without groups.
    pub fn combine(mut reports: Vec<AutoscalingReport>, names: &[String], output_tokens: u64, met_slo: u64) -> Option<AutoscalingReport> {
        if reports.len() <= 1 {
            return reports.pop();
        }
        let sum_u64 = |f: fn(&AutoscalingReport) -> u64| reports.iter().map(f).sum::<u64>();
        let sum_f64 = |f: fn(&AutoscalingReport) -> f64| reports.iter().map(f).sum::<f64>();
        let policy = if reports.iter().all(|r| r.policy == reports[0].policy) { reports[0].policy } else { "per-group" };
        let params = serde_json::Value::Object(names.iter().cloned().zip(reports.iter().map(|r| r.params.clone())).collect());
        let priced = reports.iter().any(|r| r.cost.is_some());
        let cost = priced.then(|| reports.iter().filter_map(|r| r.cost).sum::<f64>());
        let per = |x: f64| cost.filter(|&c| c > 0.0).map(|c| x / c);
        Some(AutoscalingReport {
            policy,
            params,
            min_replicas: reports.iter().map(|r| r.min_replicas).sum(),
            max_replicas: reports.iter().map(|r| r.max_replicas).sum(),
            decisions: sum_u64(|r| r.decisions),
            scale_ups: sum_u64(|r| r.scale_ups),
            scale_downs: sum_u64(|r| r.scale_downs),
            replicas_added: sum_u64(|r| r.replicas_added),
            replicas_removed: sum_u64(|r| r.replicas_removed),
            oscillations: sum_u64(|r| r.oscillations),
            cold_starts: sum_u64(|r| r.cold_starts),
            held_requests: sum_u64(|r| r.held_requests),
            held_wait_ms: None,
            rerouted_requests: sum_u64(|r| r.rerouted_requests),
            peak_replicas: reports.iter().map(|r| r.peak_replicas).sum(),
            replica_seconds: sum_f64(|r| r.replica_seconds),
            gpu_hours: sum_f64(|r| r.gpu_hours),
            cost,
            cost_per_million_output_tokens: cost.filter(|_| output_tokens > 0).map(|c| c / (output_tokens as f64 / 1e6)),
            goodput_per_dollar: per(met_slo as f64),
            pools: reports.iter().flat_map(|r| r.pools.iter().cloned()).collect(),
            timeline: merged_timeline(&reports),
            groups: names.iter().cloned().zip(reports).map(|(name, report)| GroupReport { name, report }).collect(),
        })
    }
}

/// The groups' timelines as one: at each decision of any group, every
/// group's latest counts summed; the load figures are the first group's
/// latest that has them.
fn merged_timeline(reports: &[AutoscalingReport]) -> Vec<TimelinePoint> {
    let mut times: Vec<f64> = reports.iter().flat_map(|r| r.timeline.iter().map(|p| p.t_s)).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut next = vec![0usize; reports.len()];
    let mut out = Vec::with_capacity(times.len());
    for t in times {
        let latest: Vec<&TimelinePoint> = reports
            .iter()
            .zip(next.iter_mut())
            .filter_map(|(r, k)| {
                while r.timeline.get(*k).is_some_and(|p| p.t_s <= t) {
                    *k += 1;
                }
                k.checked_sub(1).map(|i| &r.timeline[i])
            })
            .collect();
        let sum = |f: fn(&TimelinePoint) -> u32| latest.iter().map(|p| f(p)).sum::<u32>();
        let first = latest[0];
        out.push(TimelinePoint {
            t_s: t,
            starting: sum(|p| p.starting),
            ready: sum(|p| p.ready),
            draining: sum(|p| p.draining),
            desired: sum(|p| p.desired),
            nodes: sum(|p| p.nodes),
            request_rate: first.request_rate,
            saturation: first.saturation,
            kv_utilization: first.kv_utilization,
            waiting: sum(|p| p.waiting),
            ttft_mean_ms: latest.iter().find_map(|p| p.ttft_mean_ms),
        });
    }
    out
}
