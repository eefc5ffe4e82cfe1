//! A cluster run: the fleet's pools ([`crate::fleet`]) and a [`Gateway`] on
//! the engine's event driver ([`blis_engine::driver`]), which fixes the total
//! order of simultaneous events; the gateway's module draws a request's way
//! through admission, routing and delivery.

use std::collections::BTreeMap;
use std::sync::Arc;

use blis_engine::driver::{Driver, RunEnd, Workload};
use blis_engine::instance::{Instance, InstanceStats, Observer};
use blis_engine::latency::LatencyModel;
use blis_engine::metrics::RunSummary;
use blis_engine::request::{Labels, Request};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::{Micros, US_PER_MS};

use crate::anomaly::AnomalyDetector;
use crate::autoscale::AutoscaleConfig;
use crate::autoscale::scaler::Actions;
use crate::error::{ClusterError, ConfigError};
use crate::estimate::TtftEstimator;
use crate::fitness::{FitnessInputs, FitnessWeights, evaluate};
use crate::fleet::{Pool, Replicas, Role};
use crate::fleet_state::FleetState;
use crate::gateway::{Book, Gateway};
use crate::metrics::{
    Anomalies, ClusterMetrics, ClusterRequests, ClusterSummary, ControlPlaneReport, Fairness, Goodput, InstanceReport, LoadBalance,
    PoliciesReport, PolicyReport,
};
use crate::pd::{PdGate, PdPolicy, PdReport};
use crate::policy::{BuildContext, PolicyBundle, RejectReason};
use crate::prefix::PrefixIndex;
use crate::slo::SloClasses;
use crate::snapshot::{Dispatched, SnapshotStore};
use crate::trace::{Counterfactuals, DecisionSink};

/// Everything that defines a cluster run (besides the workload).
#[derive(Clone)]
pub struct ClusterConfig {
    /// The fleet, in slot order: fixed pools' instances first as listed, a
    /// scaling group's initial replicas at the place of its first pool
    /// ([`crate::fleet`]).
    pub pools: Vec<Pool>,
    /// The scaling groups the autoscaled pools name, by index.
    pub scaling: Vec<AutoscaleConfig>,
    /// How a fleet of prefill and decode pools disaggregates requests
    /// ([`crate::pd`]); required with prefill pools, refused without.
    pub pd: Option<PdPolicy>,
    /// Policies, SLO targets and snapshot staleness.
    pub policies: PolicyBundle,
    /// Arrival → admission decision.
    pub admission_latency: Micros,
    /// Routing decision → delivery.
    pub routing_latency: Micros,
    /// Names of tenants and SLO classes.
    pub labels: Labels,
    /// Alternatives kept per routing decision for counterfactuals; 0 = off.
    pub counterfactual_k: u32,
}

impl ClusterConfig {
    /// `num_instances` identical serving instances (one pool, `serve`) under
    /// `policies`, with decisions taking no time, no tenants or classes
    /// named, no counterfactuals, no autoscaling and no disaggregation; set
    /// those fields after.
    pub fn fixed(num_instances: u32, instance: InstanceConfig, latency: Arc<dyn LatencyModel>, policies: PolicyBundle) -> ClusterConfig {
        ClusterConfig::of(vec![Pool::serving("serve", num_instances, instance, latency)], policies)
    }

    /// A fleet of `pools`, fixed or autoscaled by `scaling` groups set
    /// after, under `policies`, with the other fields as [`ClusterConfig::fixed`] sets them.
    pub fn of(pools: Vec<Pool>, policies: PolicyBundle) -> ClusterConfig {
        ClusterConfig {
            pools,
            scaling: Vec::new(),
            pd: None,
            policies,
            admission_latency: Micros::ZERO,
            routing_latency: Micros::ZERO,
            labels: Labels::default(),
            counterfactual_k: 0,
        }
    }

    /// Checks the fleet ([`crate::fleet::validate`]): its pools, that prefill
    /// pools come with a P/D policy and only they, each scaling group
    /// against its pools (bounds, node capacity, policy parameters). Errors
    /// name the pool or section.
    pub fn validate(&self) -> Result<(), ClusterError> {
        if let [Pool { role: Role::Serve, replicas: Replicas::Fixed(n), .. }] = self.pools.as_slice()
            && !(1..=MAX_INSTANCES).contains(n)
        {
            return Err(ClusterError::NumInstances(*n));
        }
        crate::fleet::validate(&self.pools, self.scaling.len())?;
        let disaggregated = self.pools.iter().any(|p| p.role == Role::Prefill);
        if disaggregated != self.pd.is_some() {
            let why = if disaggregated {
                "prefill pools need a P/D policy (decider, prefill routing)"
            } else {
                "a P/D policy needs prefill and decode pools"
            };
            return Err(ConfigError::new("pd", why).into());
        }
        for (g, auto) in self.scaling.iter().enumerate() {
            let group: Vec<&Pool> = self.pools.iter().filter(|p| p.group() == Some(g)).collect();
            let pools: Vec<_> = group.iter().filter_map(|p| p.scaled()).collect();
            let at = crate::fleet_state::group_path(auto, self.scaling.len());
            auto.validate(&pools).map_err(|e| ConfigError::new(e.path.replacen("autoscale", &at, 1), e.message))?;
            auto.policy.build(&at, &group[0].profile())?;
        }
        Ok(())
    }

    /// The pool whose step-time model the policies' TTFT estimates use:
    /// the first that serves or decodes requests.
    pub fn primary(&self) -> &Pool {
        self.pools.iter().find(|p| p.role.routed()).unwrap_or(&self.pools[0])
    }
}

/// N instances behind a gateway, on one clock; `'s` is the lifetime of the
/// decision sink, if decisions are traced.
pub struct Cluster<'s> {
    driver: Driver<Gateway<'s>>,
}

/// Largest supported instance count (every routing decision scores every instance).
pub const MAX_INSTANCES: u32 = 1024;

impl<'s> Cluster<'s> {
    /// Builds instances and policies; validates every policy parameter
    /// against the run's labels.
    pub fn new(cfg: ClusterConfig) -> Result<Cluster<'s>, ClusterError> {
        Cluster::build(cfg, None)
    }

    /// [`Cluster::new`], handing every admission and routing decision to `sink` as it is made.
    pub fn traced(cfg: ClusterConfig, sink: &'s mut dyn DecisionSink) -> Result<Cluster<'s>, ClusterError> {
        Cluster::build(cfg, Some(sink))
    }

    fn build(mut cfg: ClusterConfig, sink: Option<&'s mut dyn DecisionSink>) -> Result<Cluster<'s>, ClusterError> {
        cfg.validate()?;
        for pool in &mut cfg.pools {
            cfg.policies.scheduler.apply(&mut pool.instance.scheduler);
        }
        let (instances, fleet) = FleetState::build(&cfg.pools, &cfg.scaling, sink.is_some())?;
        let n = instances.len();
        if n > MAX_INSTANCES as usize {
            return Err(ConfigError::new("pools", format!("{n} instances at the start; a fleet may have at most {MAX_INSTANCES}")).into());
        }
        // Tables per instance are sized for the most replicas there may be, and grow past it.
        let most: usize = fleet.fixed_instances() + cfg.scaling.iter().map(|a| a.max_replicas as usize).sum::<usize>();
        let slots = if cfg.scaling.is_empty() { n } else { n.max(most).max(2) };
        let classes = SloClasses::new(&cfg.labels, &cfg.policies.slo_targets, "slo_targets")?;
        let estimator = TtftEstimator::from_latency_model(cfg.primary().latency.as_ref());
        let ctx = BuildContext { labels: &cfg.labels, classes: &classes, estimator };
        let admission = cfg.policies.admission.build(&ctx, "admission")?;
        let priority = cfg.policies.priority.build(&ctx, "priority")?;
        let (routing, sheet) = cfg.policies.routing.build(slots, "routing")?;
        let store = SnapshotStore::new(cfg.policies.snapshots, &instances);
        let mut prefix = PrefixIndex::new(0, 1);
        for (i, inst) in instances.iter().enumerate() {
            prefix.reset(i, inst.kv().capacity_blocks());
        }
        let p = &cfg.policies;
        let keep_prefix_index = p.routing.uses_prefix_index() || p.admission.uses_prefix_index() || cfg.counterfactual_k > 0;
        let book = Book {
            metrics: ClusterMetrics::new(classes.clone(), &cfg.labels, slots),
            anomalies: AnomalyDetector::new(classes, slots),
            dispatched: Dispatched { in_flight: vec![0; n], pending: vec![0; n] },
            tenant_in_flight: vec![0; cfg.labels.tenants.len()],
            counters: Default::default(),
            reroutes: BTreeMap::new(),
        };
        let mut gateway = Gateway {
            admission,
            priority,
            routing,
            sheet,
            store,
            prefix,
            keep_prefix_index,
            hash_at_admission: p.admission.uses_prefix_index(),
            hash_at_routing: keep_prefix_index || p.routing.uses_true_cache(),
            hashes: Vec::new(),
            spare_hashes: Vec::new(),
            book,
            counterfactuals: (cfg.counterfactual_k > 0).then(|| Counterfactuals::new(cfg.counterfactual_k, estimator, slots)),
            policies: cfg.policies.clone(),
            labels: cfg.labels.clone(),
            admission_latency: cfg.admission_latency,
            routing_latency: cfg.routing_latency,
            block_size: cfg.primary().instance.block_size,
            in_control_plane: 0,
            sink,
            candidates: Vec::new(),
            held: Default::default(),
            fleet,
            actions: Actions::default(),
            pd: cfg.pd.as_ref().map(|p| PdGate::new(p, slots)).transpose()?,
        };
        gateway.refresh_candidates();
        Ok(Cluster { driver: Driver::new(instances, gateway) })
    }

    /// Runs `workload` until it, the gateway and every instance are
    /// exhausted, or the next event is past `horizon`. Every request record
    /// reaches `obs` (and the workload's `on_finish`). A run cut at a
    /// horizon can be continued by calling `run` again.
    pub fn run(&mut self, workload: &mut dyn Workload, horizon: Option<Micros>, obs: &mut dyn Observer) -> RunEnd {
        let end = self.driver.run(workload, horizon, obs);
        self.driver.plane_and_fleet().0.book.metrics.gather_token_gaps();
        end
    }

    /// Asks the routing policy where `req` would go now, from the current
    /// snapshots, without dispatching it: the router's counts and prefix
    /// index are not touched (a stateful policy such as round-robin still
    /// advances). For what-if tools, and to measure the cost of a decision.
    /// `None` when no instance is routable (autoscaled to zero).
    pub fn route_probe(&mut self, req: &Request) -> Option<u32> {
        let (gateway, fleet) = self.driver.plane_and_fleet();
        gateway.route_probe(req, fleet.instances(), fleet.now()).map(|(_, id)| id)
    }

    /// Each instance slot's counters: its instance's, plus those of the
    /// replicas that held the slot before (autoscaling).
    fn slot_stats(&self) -> Vec<InstanceStats> {
        let fleet = &self.gateway().fleet;
        self.instances()
            .iter()
            .enumerate()
            .map(|(i, inst)| match fleet.retired(i) {
                Some(retired) => {
                    let mut total = retired.clone();
                    total.absorb(inst.stats());
                    total
                }
                None => inst.stats().clone(),
            })
            .collect()
    }

    /// The cluster-wide summary (same schema as a single instance's).
    pub fn summary(&self, end: &RunEnd) -> RunSummary {
        let stats = self.slot_stats();
        let refs: Vec<&InstanceStats> = stats.iter().collect();
        let mut summary = RunSummary::build(&self.gateway().book.metrics.collector, &refs, end.end, end.queued, end.running);
        if let Some(pd) = &self.gateway().pd {
            // A disaggregated request reaches two instances; it is one request.
            summary.requests.injected -= pd.counts.handed_over;
        }
        summary
    }

    /// Everything the cluster adds: policies, control plane, per-class,
    /// per-tenant and per-instance results, goodput, fairness, anomalies,
    /// load balance, counterfactuals and (with `weights`) fitness. `run` is
    /// [`Cluster::summary`] of the same end.
    pub fn cluster_summary(&self, end: &RunEnd, run: &RunSummary, weights: Option<&FitnessWeights>) -> ClusterSummary {
        let g = self.gateway();
        let m = &g.book.metrics;
        let policy = |name, params| PolicyReport { name, params };
        let p = &g.policies;
        let stats = self.slot_stats();
        let instances: Vec<InstanceReport> = self
            .instances()
            .iter()
            .zip(&stats)
            .map(|(inst, s)| {
                let (q, r) = inst.unfinished();
                let collector = m.instance_collector(inst.id());
                InstanceReport { id: inst.id(), summary: RunSummary::build(collector, &[s], end.end, u64::from(q), u64::from(r)) }
            })
            .collect();
        let per_instance: Vec<u64> = stats.iter().map(|s| s.injected).collect();
        let mean = per_instance.iter().sum::<u64>() as f64 / per_instance.len() as f64;
        let max = per_instance.iter().copied().max().unwrap_or(0) as f64;
        let jain = m.jain_over_tenants(&g.labels);
        let duration_s = run.simulated_duration_s;
        let fitness = weights.map(|w| {
            evaluate(
                w,
                &FitnessInputs {
                    arrived: m.arrived,
                    completed: run.requests.completed,
                    met_slo: m.met_slo,
                    duration_s,
                    ttft_ms: &run.latency_ms.ttft,
                    itl_ms: &run.latency_ms.itl,
                    e2e_ms: &run.latency_ms.e2e,
                    jain,
                    cache_hit_rate: run.kv_cache.prefix_hit_rate,
                },
            )
        });
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        ClusterSummary {
            num_instances: self.instances().len() as u32,
            policies: PoliciesReport {
                admission: policy(p.admission.name(), p.admission.params_json()),
                priority: policy(p.priority.name(), p.priority.params_json()),
                routing: policy(p.routing.name(), p.routing.params_json()),
                scheduler: policy(p.scheduler.name(), p.scheduler.params_json()),
            },
            control_plane: ControlPlaneReport {
                admission_latency_us: g.admission_latency.as_us(),
                routing_latency_us: g.routing_latency.as_us(),
                snapshot_refresh: p.snapshots,
            },
            requests: ClusterRequests {
                arrived: m.arrived,
                admitted: m.admitted,
                rejected: m.rejected_total(),
                rejected_by_reason: RejectReason::ALL.iter().map(|r| (r.as_str(), m.rejected[r.index()])).collect(),
                delayed: m.admission_delays_us.len(),
                admission_delay_ms: (!m.admission_delays_us.is_empty()).then(|| m.admission_delays_us.summary(US_PER_MS)),
                in_control_plane: end.in_control_plane,
                injected: run.requests.injected,
                completed: run.requests.completed,
                queued: run.requests.queued,
                running: run.requests.running,
                dropped: run.requests.dropped,
                timed_out: run.requests.timed_out,
            },
            goodput: Goodput {
                met_slo: m.met_slo,
                requests_per_s: ratio(m.met_slo as f64, duration_s),
                slo_attainment: ratio(m.met_slo as f64, m.arrived as f64),
            },
            slo_classes: m.class_reports(&g.labels),
            tenants: m.tenant_reports(&g.labels),
            fairness: Fairness { jain_index_over_tenants: jain },
            anomalies: Anomalies {
                priority_inversions: g.book.anomalies.priority_inversions,
                hol_blocking_events: g.book.anomalies.hol_blocking_events,
                rejections: m.rejected_total(),
                scale_oscillations: g.fleet.oscillations(),
            },
            load_balance: LoadBalance { requests_per_instance: per_instance, imbalance_max_over_mean: ratio(max, mean) },
            instances,
            counterfactual: g.counterfactuals.as_ref().map(Counterfactuals::report),
            fitness,
            autoscaling: g.fleet.report(end.end, run.tokens.output_total, m.met_slo),
            pools: g.fleet.serving_pools(&stats, &m.collector, end.end),
            pd: g.pd.as_ref().map(|pd| {
                let gpus = g.fleet.gpus_per_slot();
                PdReport::build(pd, (&g.fleet.roles, &gpus), &stats, &m.collector, end.end, ratio(m.met_slo as f64, duration_s))
            }),
        }
    }

    fn gateway(&self) -> &Gateway<'s> {
        self.driver.plane()
    }

    /// The instances, by id (slot): to inspect their caches and counters
    /// after a run.
    pub fn instances(&self) -> &[Instance] {
        self.driver.fleet().instances()
    }
}
