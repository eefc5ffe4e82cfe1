//! Cluster metrics: what the control plane did (admissions, rejections by
//! reason), SLO attainment and goodput, per-class, per-tenant and
//! per-instance distributions, fairness, load balance.
//!
//! Definitions (docs/cluster.md has the same list):
//!
//! * a request **meets its SLO** when it completed within every target of
//!   its class (a class without targets is met by every completion);
//! * **SLO attainment** = met ÷ arrived (rejected requests count as missed);
//!   **goodput** = met ÷ simulated duration, requests/s;
//! * **Jain fairness index** over tenants of x_t = completed_t ÷ arrived_t:
//!   (Σx)² ÷ (n·Σx²), 1 = every tenant served in the same proportion;
//! * **load imbalance** = max ÷ mean of requests delivered per instance.

use std::collections::BTreeMap;

use blis_engine::instance::{Observer, TokenEvent};
use blis_engine::metrics::{Breakdown, Collector, Distribution, GroupBy, IntCounts, LatencyReport, RunSummary};
use blis_engine::request::{Labels, RequestMeta, RequestRecord, SloClassId, TenantId};
use blis_engine::time::Micros;
use serde::Serialize;

use crate::fitness::FitnessReport;
use crate::policy::RejectReason;
use crate::slo::{SloClasses, SloTargets};
use crate::snapshot::Observability;
use crate::trace::CounterfactualReport;

#[derive(Copy, Clone, Debug, Default)]
struct Counts {
    arrived: u64,
    rejected: u64,
    met_slo: u64,
}

fn bump(v: &mut Vec<Counts>, i: usize) -> &mut Counts {
    if i >= v.len() {
        v.resize(i + 1, Counts::default());
    }
    &mut v[i]
}

/// Streaming cluster measurements, fed by the control plane and the instances.
pub(crate) struct ClusterMetrics {
    pub collector: Collector,
    by_class: Option<Breakdown>,
    by_tenant: Option<Breakdown>,
    // Indexed by instance id (a Breakdown's map lookup per token is measurable here).
    by_instance: Vec<Collector>,
    classes: Vec<Counts>,
    tenants: Vec<Counts>,
    slo: SloClasses,
    pub arrived: u64,
    pub admitted: u64,
    /// How long each delayed admission was held, µs (only the delayed ones).
    pub admission_delays_us: IntCounts,
    pub rejected: [u64; RejectReason::ALL.len()],
    pub met_slo: u64,
}

impl ClusterMetrics {
    /// Breakdowns are kept only for dimensions with more than one group
    /// (otherwise the cluster-wide collector is that group's).
    pub fn new(slo: SloClasses, labels: &Labels, instances: usize) -> ClusterMetrics {
        let keep = |n: usize, by| (n > 1).then(|| Breakdown::new(by));
        ClusterMetrics {
            collector: Collector::default(),
            by_class: keep(labels.slo_classes.len(), GroupBy::SloClass),
            by_tenant: keep(labels.tenants.len(), GroupBy::Tenant),
            by_instance: if instances > 1 { vec![Collector::default(); instances] } else { Vec::new() },
            classes: vec![Counts::default(); labels.slo_classes.len()],
            tenants: vec![Counts::default(); labels.tenants.len()],
            slo,
            arrived: 0,
            admitted: 0,
            admission_delays_us: IntCounts::default(),
            rejected: [0; RejectReason::ALL.len()],
            met_slo: 0,
        }
    }

    /// Brings the cluster-wide token gaps up to date: the union of the
    /// instances' (exact, so the distribution is the one every gap pushed
    /// to one collector gives). Call before reading `collector` after a run.
    pub fn gather_token_gaps(&mut self) {
        if !self.by_instance.is_empty() {
            self.collector.itl_us = IntCounts::union(self.by_instance.iter().map(|c| &c.itl_us));
        }
    }

    /// Makes room for instance slots up to `instances` (replicas added by autoscaling).
    pub fn ensure_instances(&mut self, instances: usize) {
        if instances > self.by_instance.len() {
            self.by_instance.resize(instances, Collector::default());
        }
    }

    pub fn arrive(&mut self, meta: &RequestMeta) {
        self.arrived += 1;
        bump(&mut self.classes, usize::from(meta.slo_class.0)).arrived += 1;
        bump(&mut self.tenants, meta.tenant.0 as usize).arrived += 1;
    }

    /// An admission, held `delay` before routing.
    pub fn admit(&mut self, delay: Micros) {
        self.admitted += 1;
        if delay > Micros::ZERO {
            self.admission_delays_us.push(delay.as_us());
        }
    }

    pub fn reject(&mut self, meta: &RequestMeta, reason: RejectReason) {
        self.rejected[reason.index()] += 1;
        bump(&mut self.classes, usize::from(meta.slo_class.0)).rejected += 1;
        bump(&mut self.tenants, meta.tenant.0 as usize).rejected += 1;
    }

    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

impl Observer for ClusterMetrics {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.collector.record(r);
        for b in [&mut self.by_class, &mut self.by_tenant].into_iter().flatten() {
            b.on_finish(r);
        }
        if let Some(c) = r.instance.and_then(|i| self.by_instance.get_mut(i as usize)) {
            c.record(r);
        }
        if self.slo.targets(r.meta.slo_class).is_met_by(r) {
            self.met_slo += 1;
            bump(&mut self.classes, usize::from(r.meta.slo_class.0)).met_slo += 1;
            bump(&mut self.tenants, r.meta.tenant.0 as usize).met_slo += 1;
        }
    }

    /// With per-instance collectors a token gap goes only to its instance's
    /// (whose runs of equal gaps are a batch long, where the instances'
    /// interleaved tokens would break them up); the cluster-wide gaps are
    /// their union, rebuilt by [`ClusterMetrics::gather_token_gaps`].
    fn on_token(&mut self, t: &TokenEvent) {
        match self.by_instance.get_mut(t.instance as usize) {
            Some(c) => c.token(t),
            None => self.collector.token(t),
        }
        if let Some(b) = &mut self.by_class {
            b.on_token(t);
        }
        if let Some(b) = &mut self.by_tenant {
            b.on_token(t);
        }
    }
}

/// A policy as run: its template name and every parameter.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyReport {
    /// Template name.
    #[serde(rename = "type")]
    pub name: &'static str,
    /// Parameters with defaults filled in.
    pub params: serde_json::Value,
}

/// Every policy of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoliciesReport {
    /// Admission.
    pub admission: PolicyReport,
    /// Priority.
    pub priority: PolicyReport,
    /// Routing.
    pub routing: PolicyReport,
    /// Instance scheduler.
    pub scheduler: PolicyReport,
}

/// Control-plane timing and observability.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ControlPlaneReport {
    /// Arrival → admission decision, µs.
    pub admission_latency_us: u64,
    /// Routing decision → delivery to the instance, µs.
    pub routing_latency_us: u64,
    /// Refresh mode of every configurable snapshot field.
    pub snapshot_refresh: Observability,
}

/// Request counts across the cluster. Conservation: `arrived = rejected +
/// in_control_plane + injected` and `injected = completed + queued + running
/// + dropped + timed_out`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterRequests {
    /// Requests that reached the cluster.
    pub arrived: u64,
    /// Admitted.
    pub admitted: u64,
    /// Rejected by admission.
    pub rejected: u64,
    /// Rejections by reason.
    pub rejected_by_reason: BTreeMap<&'static str, u64>,
    /// Admitted requests a shaping limit held before routing (`on_limit: delay`).
    pub delayed: u64,
    /// The holds admission decided for the delayed requests, ms (a hold may
    /// run past a horizon); absent when none was delayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission_delay_ms: Option<Distribution>,
    /// Still in the control plane when the run ended: awaiting admission, or
    /// admitted and awaiting delivery (only with a horizon).
    pub in_control_plane: u64,
    /// Delivered to an instance.
    pub injected: u64,
    /// Completed.
    pub completed: u64,
    /// Waiting at an instance when the run ended.
    pub queued: u64,
    /// Running at an instance when the run ended.
    pub running: u64,
    /// Refused by an instance (can never run there).
    pub dropped: u64,
    /// Abandoned at the client timeout.
    pub timed_out: u64,
}

/// One SLO class or tenant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupReport {
    /// Requests that arrived.
    pub arrived: u64,
    /// Rejected by admission.
    pub rejected: u64,
    /// Completed.
    pub completed: u64,
    /// Completed within the class's targets.
    pub met_slo: u64,
    /// met_slo ÷ arrived.
    pub slo_attainment: f64,
    /// The class's targets (SLO classes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<SloTargets>,
    /// Latency distributions of completed requests, ms.
    pub latency_ms: LatencyReport,
}

/// Goodput of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Goodput {
    /// Requests that met their SLO.
    pub met_slo: u64,
    /// met ÷ simulated duration.
    pub requests_per_s: f64,
    /// met ÷ arrived.
    pub slo_attainment: f64,
}

/// Fairness across tenants.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fairness {
    /// Jain index of completed ÷ arrived per tenant.
    pub jain_index_over_tenants: f64,
}

/// Anomaly counters (definitions in [`crate::anomaly`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Anomalies {
    /// Requests started while a more urgent one waited on the same instance.
    pub priority_inversions: u64,
    /// Deliveries behind a queue while another instance had no queue and a free seat.
    pub hol_blocking_events: u64,
    /// Requests rejected by admission.
    pub rejections: u64,
    /// Scale changes opposite to the previous one within the oscillation window (with autoscaling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_oscillations: Option<u64>,
}

/// How evenly requests were spread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadBalance {
    /// Requests delivered to each instance.
    pub requests_per_instance: Vec<u64>,
    /// max ÷ mean of `requests_per_instance` (1 = perfectly even).
    pub imbalance_max_over_mean: f64,
}

/// One instance's own summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstanceReport {
    /// Instance id.
    pub id: u32,
    /// Its measurements (same fields as the cluster-wide summary).
    #[serde(flatten)]
    pub summary: RunSummary,
}

/// Everything the cluster adds to a run's report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterSummary {
    /// Instances.
    pub num_instances: u32,
    /// Policies as run.
    pub policies: PoliciesReport,
    /// Latencies and staleness.
    pub control_plane: ControlPlaneReport,
    /// Request counts.
    pub requests: ClusterRequests,
    /// Goodput.
    pub goodput: Goodput,
    /// Per SLO class, by name.
    pub slo_classes: BTreeMap<String, GroupReport>,
    /// Per tenant, by name.
    pub tenants: BTreeMap<String, GroupReport>,
    /// Fairness.
    pub fairness: Fairness,
    /// Anomalies.
    pub anomalies: Anomalies,
    /// Load balance.
    pub load_balance: LoadBalance,
    /// Per instance, by id.
    pub instances: Vec<InstanceReport>,
    /// Counterfactual analysis (with `counterfactual_k > 0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterfactual: Option<CounterfactualReport>,
    /// Fitness (when weights are given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fitness: Option<FitnessReport>,
    /// Scaling, capacity and cost (with autoscaling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<crate::autoscale::AutoscalingReport>,
    /// Prefill/decode pools and the transfers between them (with P/D).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pd: Option<crate::pd::PdReport>,
    /// Each pool of a fleet of several serving pools (two GPU types serving
    /// one model), in fleet order; empty otherwise (P/D pools are `pd`'s,
    /// one scaling group's node pools `autoscaling`'s).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<ServingPoolReport>,
}

/// One serving pool's figures over a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServingPoolReport {
    /// The pool's name.
    pub name: String,
    /// Its GPU.
    pub hardware: String,
    /// KV blocks of each of its instances.
    pub num_gpu_blocks: u64,
    /// Its instance slots, GPUs each, and their steps and KV figures.
    #[serde(flatten)]
    pub pool: crate::pd::PoolReport,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

impl ClusterMetrics {
    /// Per-group reports for every named group and every id seen.
    fn groups(
        &self,
        counts: &[Counts],
        breakdown: &Option<Breakdown>,
        name: impl Fn(u32) -> String,
        targets: impl Fn(u32) -> Option<SloTargets>,
    ) -> BTreeMap<String, GroupReport> {
        (0..counts.len() as u32)
            .map(|id| {
                let c = counts[id as usize];
                let collector = match breakdown {
                    Some(b) => b.groups().get(&id),
                    None => Some(&self.collector),
                };
                let report = GroupReport {
                    arrived: c.arrived,
                    rejected: c.rejected,
                    completed: collector.map_or(0, |c| c.completed),
                    met_slo: c.met_slo,
                    slo_attainment: ratio(c.met_slo as f64, c.arrived as f64),
                    targets: targets(id),
                    latency_ms: collector.map_or_else(|| Collector::default().latency_ms(), Collector::latency_ms),
                };
                (name(id), report)
            })
            .collect()
    }

    /// Per-class reports.
    pub fn class_reports(&self, labels: &Labels) -> BTreeMap<String, GroupReport> {
        self.groups(
            &self.classes,
            &self.by_class,
            |id| labels.slo_class(SloClassId(id as u16)),
            |id| {
                let t = self.slo.targets(SloClassId(id as u16));
                (t != SloTargets::default()).then_some(t)
            },
        )
    }

    /// Per-tenant reports.
    pub fn tenant_reports(&self, labels: &Labels) -> BTreeMap<String, GroupReport> {
        self.groups(&self.tenants, &self.by_tenant, |id| labels.tenant(TenantId(id)), |_| None)
    }

    /// Jain index of completed ÷ arrived over tenants that had arrivals.
    pub fn jain_over_tenants(&self, labels: &Labels) -> f64 {
        let served: Vec<f64> =
            self.tenant_reports(labels).values().filter(|g| g.arrived > 0).map(|g| g.completed as f64 / g.arrived as f64).collect();
        let sum: f64 = served.iter().sum();
        let sum_sq: f64 = served.iter().map(|x| x * x).sum();
        if sum_sq > 0.0 { sum * sum / (served.len() as f64 * sum_sq) } else { 1.0 }
    }

    /// The collector of instance `i` (the cluster-wide one for a single instance).
    pub fn instance_collector(&self, i: u32) -> &Collector {
        self.by_instance.get(i as usize).unwrap_or(&self.collector)
    }
}
