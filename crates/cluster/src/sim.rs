//! A cluster run: N identical instances and a [`Gateway`] on the engine's
//! event driver ([`blis_engine::driver`]), which fixes the total order of
//! simultaneous events; the gateway's module draws a request's way
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
use crate::autoscale::scaler::{Actions, Autoscaler};
use crate::error::{ClusterError, ConfigError};
use crate::estimate::TtftEstimator;
use crate::fitness::{FitnessInputs, FitnessWeights, evaluate};
use crate::gateway::{Book, Gateway};
use crate::metrics::{
    Anomalies, ClusterMetrics, ClusterRequests, ClusterSummary, ControlPlaneReport, Fairness, Goodput, InstanceReport, LoadBalance,
    PoliciesReport, PolicyReport,
};
use crate::pd::{PdConfig, PdGate, PdReport};
use crate::policy::{BuildContext, PolicyBundle, RejectReason};
use crate::prefix::PrefixIndex;
use crate::slo::SloClasses;
use crate::snapshot::{Dispatched, SnapshotStore};
use crate::trace::{Counterfactuals, DecisionSink};

/// Everything that defines a cluster run (besides the workload).
#[derive(Clone)]
pub struct ClusterConfig {
    /// Identical instances to run.
    pub num_instances: u32,
    /// Their configuration; the scheduler's queue policy and preemption
    /// victim are replaced by `policies.scheduler`.
    pub instance: InstanceConfig,
    /// Their step-time model.
    pub latency: Arc<dyn LatencyModel>,
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
    /// Autoscaling: `num_instances` is then the initial replica count and
    /// the replicas run on the config's node pools (`instance` and
    /// `latency` still give the TTFT estimate of the policies).
    pub autoscale: Option<AutoscaleConfig>,
    /// Prefill/decode disaggregation ([`crate::pd`]): the prefill pool
    /// comes first (instances `0..P`), then the `num_instances` instances
    /// above as the decode pool, whose `instance` must receive KV
    /// (`kv_transfer`). `policies.routing` chooses among the decode pool.
    pub pd: Option<PdConfig>,
}

impl ClusterConfig {
    /// `num_instances` identical instances under `policies`, with decisions
    /// taking no time, no tenants or classes named, no counterfactuals, no
    /// autoscaling and no disaggregation; set those fields after.
    pub fn fixed(num_instances: u32, instance: InstanceConfig, latency: Arc<dyn LatencyModel>, policies: PolicyBundle) -> ClusterConfig {
        ClusterConfig {
            num_instances,
            instance,
            latency,
            policies,
            admission_latency: Micros::ZERO,
            routing_latency: Micros::ZERO,
            labels: Labels::default(),
            counterfactual_k: 0,
            autoscale: None,
            pd: None,
        }
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

    fn build(cfg: ClusterConfig, sink: Option<&'s mut dyn DecisionSink>) -> Result<Cluster<'s>, ClusterError> {
        // An autoscaled fleet may start empty (scaled to zero).
        let fewest = u32::from(cfg.autoscale.is_none());
        if !(fewest..=MAX_INSTANCES).contains(&cfg.num_instances) {
            return Err(ClusterError::NumInstances(cfg.num_instances));
        }
        let mut inst_cfg = cfg.instance.clone();
        cfg.policies.scheduler.apply(&mut inst_cfg.scheduler);
        let (instances, scaler) = match cfg.autoscale.clone() {
            None if cfg.pd.is_some() => (pd_instances(&cfg, &inst_cfg)?, None),
            None => {
                let instances = (0..cfg.num_instances)
                    .map(|i| Instance::new(i, inst_cfg.clone(), cfg.latency.clone()))
                    .collect::<Result<Vec<_>, _>>()?;
                (instances, None)
            }
            Some(_) if cfg.pd.is_some() => {
                return Err(ConfigError::new(
                    "pd",
                    "prefill/decode pools cannot be autoscaled yet; drop the autoscale section or the pools",
                )
                .into());
            }
            Some(mut auto) => {
                auto.validate(cfg.num_instances)?;
                for (i, pool) in auto.pools.iter_mut().enumerate() {
                    cfg.policies.scheduler.apply(&mut pool.instance.scheduler);
                    pool.instance.validate().map_err(|e| ConfigError::new(format!("node_pools[{i}] ({})", pool.name), e.to_string()))?;
                }
                let policy = auto.policy.build("autoscale")?;
                let (scaler, instances) = Autoscaler::new(auto, policy, cfg.num_instances, sink.is_some());
                (instances, Some(Box::new(scaler)))
            }
        };
        let n = instances.len();
        // Tables per instance are sized for the most replicas there may be, and grow past it.
        let slots = cfg.autoscale.as_ref().map_or(n, |a| n.max(a.max_replicas as usize).max(2));
        let classes = SloClasses::new(&cfg.labels, &cfg.policies.slo_targets, "slo_targets")?;
        let estimator = TtftEstimator::from_latency_model(cfg.latency.as_ref());
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
        let gateway = Gateway {
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
            policies: cfg.policies,
            labels: cfg.labels,
            admission_latency: cfg.admission_latency,
            routing_latency: cfg.routing_latency,
            block_size: inst_cfg.block_size,
            in_control_plane: 0,
            sink,
            candidates: (cfg.pd.as_ref().map_or(0, |p| p.prefill_instances)..n as u32).collect(),
            held: Default::default(),
            scaler,
            actions: Actions::default(),
            pd: cfg.pd.as_ref().map(|p| PdGate::new(p, n)).transpose()?,
        };
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
        let scaler = self.gateway().scaler.as_deref();
        self.instances()
            .iter()
            .enumerate()
            .map(|(i, inst)| match scaler.and_then(|s| s.retired(i)) {
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
                scale_oscillations: g.scaler.as_ref().map(|s| s.oscillations()),
            },
            load_balance: LoadBalance { requests_per_instance: per_instance, imbalance_max_over_mean: ratio(max, mean) },
            instances,
            counterfactual: g.counterfactuals.as_ref().map(Counterfactuals::report),
            fitness,
            autoscaling: g.scaler.as_ref().map(|s| s.report(end.end, run.tokens.output_total, m.met_slo)),
            pd: g.pd.as_ref().map(|pd| PdReport::build(pd, &stats, &m.collector, end.end, ratio(m.met_slo as f64, duration_s))),
        }
    }

    fn gateway(&self) -> &Gateway<'s> {
        self.driver.plane()
    }

    /// The instances, by id (with P/D the prefill pool first): to inspect
    /// their caches and counters after a run.
    pub fn instances(&self) -> &[Instance] {
        self.driver.fleet().instances()
    }
}

/// The instances of a disaggregated deployment: the prefill pool, then the
/// decode pool (`inst_cfg`, which must receive KV).
fn pd_instances(cfg: &ClusterConfig, inst_cfg: &InstanceConfig) -> Result<Vec<Instance>, ClusterError> {
    let pd = cfg.pd.as_ref().expect("called with P/D");
    if pd.prefill_instances == 0 || pd.prefill_instances + cfg.num_instances > MAX_INSTANCES {
        return Err(ConfigError::new(
            "pd.prefill_instances",
            format!(
                "{}: the prefill and decode pools ({} decode instances) may have at most {MAX_INSTANCES} instances together",
                pd.prefill_instances, cfg.num_instances
            ),
        )
        .into());
    }
    if inst_cfg.kv_transfer.is_none() {
        return Err(ConfigError::new("pd", "the decode pool's instances need a KV transfer link").into());
    }
    let mut prefill_cfg = pd.prefill_instance.clone();
    cfg.policies.scheduler.apply(&mut prefill_cfg.scheduler);
    let prefill = (0..pd.prefill_instances).map(|i| Instance::new(i, prefill_cfg.clone(), pd.prefill_latency.clone()));
    let decode = (0..cfg.num_instances).map(|i| Instance::new(pd.prefill_instances + i, inst_cfg.clone(), cfg.latency.clone()));
    Ok(prefill.chain(decode).collect::<Result<Vec<_>, _>>()?)
}
