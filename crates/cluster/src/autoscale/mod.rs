//! Autoscaling: a fleet that grows and shrinks as in production, with what
//! it costs (cluster-policy-plan §D.6–D.8).
//!
//! A replica's life, every transition an event on the run's one clock:
//!
//! ```text
//!  scale-up decision ─► provisioning ─(node up)─► loading ─(weights in)─► warming ─► ready ─► draining ─► gone
//!                       (a new node,              (model size ÷ load      (slower         (no new requests;
//!                        seeded delay)             bandwidth, or a delay)  steps)           drain policy)
//! ```
//!
//! Routing sees only ready replicas (and warming ones when the warm-up
//! allows): a replica receives no request before. With none routable (scaled
//! to zero), arriving requests wait at the gateway and are counted; the
//! first one wakes the autoscaler at once (a cold start).
//!
//! Every `interval` the autoscaler scrapes aggregate metrics; `scrape_delay`
//! later it decides from that scrape ([`policy`]), then applies Kubernetes
//! HPA's behaviour: the bounds, the stabilisation windows (scale up to the
//! *lowest* recommendation of the last `scale_up_window`, down to the
//! *highest* of the last `scale_down_window`), and a cooldown after each
//! change. A change opposite to the previous one within
//! `oscillation_window` is a scale oscillation (anomaly
//! `ScaleOscillationCount`).
//!
//! One autoscaler sizes one scaling group ([`AutoscaleConfig`]): the
//! replicas of the fleet's pools that name it ([`crate::fleet::Replicas`]),
//! of one role. Replicas run on each pool's nodes ([`crate::fleet::Nodes`]:
//! GPUs per node, node bounds, price): a scale-up uses a free seat on a
//! node that is up or coming up, else requests a node from the cheapest pool
//! with room; a scale-down cancels replicas not ready yet first, then drains
//! ready ones, the most expensive first. A node with no replica left is
//! released (down to `min_nodes`). Cost is billed per node GPU from request
//! to release. A disaggregated deployment scales its prefill and decode
//! pools with a group each.

pub mod delay;
pub mod policy;
mod profile;
pub mod report;
pub(crate) mod scaler;
pub mod section;

use std::sync::Arc;

use blis_engine::latency::LatencyModel;
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;
use serde::{Deserialize, Serialize};

pub use delay::{Delay, Span};
pub use policy::{AutoscalePolicy, AutoscaleSpec, PlannerParams, ScaleContext, ScaleMetrics, Traffic};
pub use profile::PoolProfile;
pub use report::{AutoscalingReport, GroupReport, Phase, ReplicaTrace, ScaleAction, ScaleDecision, ScaleTrace, TimelinePoint};
pub use scaler::ScaleEvent;
pub use section::{AutoscaleSection, NodePoolSection};

use crate::error::ConfigError;
use crate::policy::check;

/// What happens to a replica chosen for removal.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainPolicy {
    /// Finish what it has, accept nothing new.
    #[default]
    Wait,
    /// Abort everything at once and route it elsewhere (recomputed from scratch).
    Immediate,
    /// Finish what runs; route what waits elsewhere.
    Redirect,
}

impl DrainPolicy {
    /// The accepted names.
    pub const NAMES: [&'static str; 3] = ["wait", "immediate", "redirect"];

    /// Parses a name.
    pub fn parse(name: &str) -> Result<DrainPolicy, String> {
        match name {
            "wait" => Ok(DrainPolicy::Wait),
            "immediate" => Ok(DrainPolicy::Immediate),
            "redirect" => Ok(DrainPolicy::Redirect),
            other => Err(format!("unknown drain policy `{other}`; allowed: {}", Self::NAMES.join(", "))),
        }
    }
}

/// The highest price of one GPU-hour BLIS accepts, dollars: far above any
/// real one, and small enough that every cost it sums stays readable.
pub const MAX_GPU_HOUR_COST: f64 = 1e6;

/// A fresh replica's warm-up: its first `duration` of steps take `slowdown`
/// times as long (JIT compilation, CUDA-graph capture). With
/// `route_while_warming` false it serves nothing until warm instead ("capture
/// CUDA graphs before ready") and runs at full speed after.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Warmup {
    /// How long it lasts (0: no warm-up).
    pub duration: Span,
    /// Step-time multiplier meanwhile (≥ 1).
    pub slowdown: f64,
    /// Whether requests are routed to a warming replica.
    pub route_while_warming: bool,
}

impl Default for Warmup {
    fn default() -> Warmup {
        Warmup { duration: Span(Micros::ZERO), slowdown: 2.0, route_while_warming: true }
    }
}

/// One pool of a scaling group as its autoscaler knows it
/// ([`crate::fleet::Pool::scaled`]): its replicas' server configuration and
/// step-time model, and its nodes.
#[derive(Clone)]
pub(crate) struct PoolConfig {
    /// Name (reports, traces).
    pub name: String,
    /// GPU name.
    pub hardware: String,
    /// Its replicas' server configuration (KV blocks for this GPU).
    pub instance: InstanceConfig,
    /// Its replicas' step-time model.
    pub latency: Arc<dyn LatencyModel>,
    /// GPUs one replica uses (its tensor-parallel degree).
    pub gpus_per_replica: u32,
    /// GPUs per node (a multiple of nothing in particular; ≥ `gpus_per_replica`).
    pub gpus_per_node: u32,
    /// Nodes up at the start.
    pub initial_nodes: u32,
    /// Nodes never released below this.
    pub min_nodes: u32,
    /// Nodes never requested beyond this.
    pub max_nodes: u32,
    /// Price of one GPU for an hour, in dollars, at most
    /// [`MAX_GPU_HOUR_COST`] (`None`: costs are not reported).
    pub cost_per_gpu_hour: Option<f64>,
    /// From requesting a node to its being up.
    pub provisioning_delay: Delay,
    /// From a replica's start on a node that is up to its weights being loaded.
    pub loading_delay: Delay,
}

impl PoolConfig {
    /// Replicas one node holds.
    pub fn replicas_per_node(&self) -> u32 {
        self.gpus_per_node / self.gpus_per_replica.max(1)
    }

    /// The price of one replica for an hour (0 when unpriced).
    pub(crate) fn replica_cost_per_hour(&self) -> f64 {
        self.cost_per_gpu_hour.unwrap_or(0.0) * f64::from(self.gpus_per_replica)
    }
}

/// One scaling group: the policy and behaviour of the autoscaler that sizes
/// the pools naming it.
#[derive(Clone)]
pub struct AutoscaleConfig {
    /// Name (reports, traces): its role's name for one of a disaggregated
    /// deployment's groups, else `autoscale`.
    pub name: String,
    /// Replicas at the start (ready at time 0).
    pub initial_replicas: u32,
    /// The policy.
    pub policy: AutoscaleSpec,
    /// Time between scrapes (and decisions).
    pub interval: Micros,
    /// From a scrape to the decision that uses it.
    pub scrape_delay: Micros,
    /// Fewest replicas (0 allows scaling to zero).
    pub min_replicas: u32,
    /// Most replicas.
    pub max_replicas: u32,
    /// Scale up only to the lowest recommendation of this past window.
    pub scale_up_window: Micros,
    /// Scale down only to the highest recommendation of this past window.
    pub scale_down_window: Micros,
    /// No change within this time of the previous one.
    pub cooldown: Micros,
    /// Opposite changes closer than this count as an oscillation.
    pub oscillation_window: Micros,
    /// What happens to removed replicas.
    pub drain: DrainPolicy,
    /// A fresh replica's warm-up.
    pub warmup: Warmup,
    /// Seed of the delay draws.
    pub seed: u64,
}

impl AutoscaleConfig {
    /// The shortest interval between scrapes: a millisecond, far below what
    /// any autoscaler runs at (Kubernetes' HPA syncs every 15 s), above
    /// which a simulated day stays tens of millions of ticks.
    pub const MIN_INTERVAL: Micros = Micros(1_000);
    /// The most scrapes taken but not yet seen by a decision
    /// (`scrape_delay / interval`), which the autoscaler holds in memory.
    pub const MAX_SCRAPES_IN_FLIGHT: u64 = 100_000;

    /// Checks the bounds against the initial replicas and the capacity of
    /// the group's `pools` (each checked with the fleet,
    /// [`crate::fleet::validate`]); errors name the `autoscale` field.
    pub(crate) fn validate(&self, pools: &[PoolConfig]) -> Result<(), ConfigError> {
        let a = "autoscale";
        let initial = self.initial_replicas;
        check(
            self.max_replicas >= 1 && self.max_replicas <= crate::MAX_INSTANCES,
            a,
            "max_replicas",
            self.max_replicas,
            &format!("between 1 and {}", crate::MAX_INSTANCES),
        )?;
        check(
            self.min_replicas <= self.max_replicas,
            a,
            "min_replicas",
            self.min_replicas,
            &format!("at most max_replicas ({})", self.max_replicas),
        )?;
        check(self.interval >= Self::MIN_INTERVAL, a, "interval", blis_engine::time::format_duration(self.interval), "at least 1ms")?;
        check(
            self.scrape_delay.0 / self.interval.0 <= Self::MAX_SCRAPES_IN_FLIGHT,
            a,
            "scrape_delay",
            blis_engine::time::format_duration(self.scrape_delay),
            &format!(
                "at most {} intervals of {} (every scrape is kept until the decisions see it)",
                Self::MAX_SCRAPES_IN_FLIGHT,
                blis_engine::time::format_duration(self.interval)
            ),
        )?;
        check(
            (self.min_replicas..=self.max_replicas).contains(&initial),
            a,
            "initial replicas",
            initial,
            &format!("between min_replicas ({}) and max_replicas ({})", self.min_replicas, self.max_replicas),
        )?;
        let w = &self.warmup;
        check(
            w.slowdown.is_finite() && (1.0..=100.0).contains(&w.slowdown),
            &format!("{a}.warmup"),
            "slowdown",
            w.slowdown,
            "a factor in [1, 100]",
        )?;
        let capacity: u64 = pools.iter().map(|p| u64::from(p.max_nodes) * u64::from(p.replicas_per_node())).sum();
        if capacity < u64::from(self.max_replicas) {
            return Err(ConfigError::new(
                "autoscale.max_replicas",
                format!("{}: the node pools hold at most {capacity} replicas (Σ max_nodes × replicas per node)", self.max_replicas),
            ));
        }
        Ok(())
    }
}
