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
}
