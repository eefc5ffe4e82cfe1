//! The cluster event loop: N instances and a control plane on one clock.
//!
//! ```text
//!  workload ──► ClusterArrival(t) ──► Admission(t + admission latency)
//!                                     priority policy, then admission policy ── reject ──► counted
//!                                       │ admit
//!                                       ▼
//!                                     Routing(same instant): routing policy on fresh or stale snapshots
//!                                       │ router's in-flight/pending counts and prefix index updated now
//!                                       ▼
//!                                     Delivery(+ routing latency) ──► Instance::inject
//!  instances: their own events (queue hand-off, steps, timeouts), interleaved by a heap of next-event keys
//! ```
//!
//! **Total order.** Events are ordered by `(time, class, source, sequence)`:
//! the class order is [`EventClass`]'s (cluster arrival < admission < routing
//! < instance arrival (a delivery) < step completion < request completion <
//! snapshot refresh); `source` is 0 for the workload and the control plane
//! and `1 + id` for instance `id`; the sequence is each queue's push order.
//! So control-plane events at an instant precede instance events of the
//! same class, and instances tie-break by lowest id. Nothing depends on hash
//! iteration order, so a seed gives the same run for any N.
//!
//! **Cost.** Choosing the next event is O(log N) (a lazy heap of instance
//! next-event keys: an instance's entry is refreshed whenever it is touched
//! and stale entries are skipped); a decision is O(N) snapshot reads plus the
//! policy's own cost. Nothing allocates per event once buffers have grown.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use blis_engine::event::{EventClass, EventKey, EventQueue};
use blis_engine::instance::{Instance, InstanceStats, Observer, QueueEvent, StepEvent, TokenEvent};
use blis_engine::latency::LatencyModel;
use blis_engine::metrics::RunSummary;
use blis_engine::request::{Labels, Outcome, Request, RequestRecord, extend_block_hashes};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::sim::Workload;
use blis_engine::time::{Micros, US_PER_MS};

use crate::anomaly::AnomalyDetector;
use crate::error::ClusterError;
use crate::estimate::TtftEstimator;
use crate::fitness::{FitnessInputs, FitnessWeights, evaluate};
use crate::metrics::{
    Anomalies, ClusterMetrics, ClusterRequests, ClusterSummary, ControlPlaneReport, Fairness, Goodput, InstanceReport, LoadBalance,
    PoliciesReport, PolicyReport,
};
use crate::policy::{Admission, AdmissionPolicy, BuildContext, PolicyBundle, PriorityPolicy, RejectReason, RoutingPolicy, ScoreSheet};
use crate::prefix::PrefixIndex;
use crate::slo::SloClasses;
use crate::snapshot::{Dispatched, SnapshotStore};
use crate::trace::{AdmissionTrace, Counterfactuals, DecisionSink, RoutingTrace};
use crate::view::ClusterView;

/// The policies' view of `$req` from the cluster's fields (a macro, not a
/// method, so the policies can be borrowed mutably alongside it).
macro_rules! view {
    ($s:ident, $req:expr) => {
        ClusterView {
            now: $s.now,
            snapshots: $s.store.view(),
            instances: &$s.instances,
            store: &$s.store,
            prefix: &$s.prefix,
            prompt_blocks: &$s.hashes,
            prompt_tokens: $req.prompt_tokens(),
            block_size: $s.block_size,
            tenant_in_flight: &$s.book.tenant_in_flight,
        }
    };
}

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
}

enum ControlEvent {
    Admit(Request),
    Route(Request),
    /// A routed request, its instance and, when the router hashed its
    /// prompt, the block hashes (handed to the instance).
    Deliver(Request, u32, Option<Vec<u64>>),
}

/// How a cluster run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterEnd {
    /// Time of the last processed event (the horizon if the run was cut there).
    pub end: Micros,
    /// Requests waiting at instances.
    pub queued: u64,
    /// Requests running at instances.
    pub running: u64,
    /// Requests awaiting admission or delivery (only with a horizon).
    pub in_control_plane: u64,
}

/// State that instance callbacks update.
struct Book {
    metrics: ClusterMetrics,
    anomalies: AnomalyDetector,
    dispatched: Dispatched,
    tenant_in_flight: Vec<u32>,
}

impl Book {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.metrics.on_finish(r);
        self.anomalies.on_finish(r);
        if let Some(i) = r.instance {
            self.dispatched.in_flight[i as usize] -= 1;
        }
        if let Some(n) = self.tenant_in_flight.get_mut(r.meta.tenant.0 as usize) {
            *n -= 1;
        }
    }
}

/// Routes an instance's callbacks to the cluster's books, the caller's
/// observer and the workload.
struct Hook<'a> {
    book: &'a mut Book,
    user: &'a mut dyn Observer,
    user_tokens: bool,
    workload: &'a mut dyn Workload,
    reported: bool,
}

impl<'a> Hook<'a> {
    fn new(book: &'a mut Book, user: &'a mut dyn Observer, workload: &'a mut dyn Workload) -> Hook<'a> {
        Hook { book, user_tokens: user.observes_tokens(), user, workload, reported: false }
    }
}

impl Observer for Hook<'_> {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.book.on_finish(r);
        self.user.on_finish(r);
        self.workload.on_finish(r);
        self.reported = true;
    }
    fn on_token(&mut self, t: &TokenEvent) {
        self.book.metrics.on_token(t);
        if self.user_tokens {
            self.user.on_token(t);
        }
    }
    fn on_step(&mut self, s: &StepEvent<'_>) {
        self.user.on_step(s);
    }
    fn on_queue(&mut self, e: &QueueEvent) {
        self.book.anomalies.on_queue(e);
        self.user.on_queue(e);
    }
}

/// N instances behind a control plane, on one clock.
pub struct Cluster {
    instances: Vec<Instance>,
    heap: BinaryHeap<Reverse<(Micros, EventClass, u32, u64)>>,
    heap_key: Vec<Option<EventKey>>,
    control: EventQueue<ControlEvent>,
    admission: Box<dyn AdmissionPolicy>,
    priority: Box<dyn PriorityPolicy>,
    routing: Box<dyn RoutingPolicy>,
    sheet: ScoreSheet,
    store: SnapshotStore,
    prefix: PrefixIndex,
    // Whether anything reads the prefix index / the prompt's block hashes at
    // admission and at routing; what nothing reads is not maintained.
    keep_prefix_index: bool,
    hash_at_admission: bool,
    hash_at_routing: bool,
    hashes: Vec<u64>,
    // Emptied hash buffers, reused for the hashes that travel with deliveries.
    spare_hashes: Vec<Vec<u64>>,
    book: Book,
    counterfactuals: Option<Counterfactuals>,
    policies: PolicyBundle,
    labels: Labels,
    admission_latency: Micros,
    routing_latency: Micros,
    block_size: u32,
    in_control_plane: u64,
    now: Micros,
}

/// Largest supported instance count (every routing decision scores every instance).
pub const MAX_INSTANCES: u32 = 1024;

impl Cluster {
    /// Builds instances and policies; validates every policy parameter
    /// against the run's labels.
    pub fn new(cfg: ClusterConfig) -> Result<Cluster, ClusterError> {
        if !(1..=MAX_INSTANCES).contains(&cfg.num_instances) {
            return Err(ClusterError::NumInstances(cfg.num_instances));
        }
        let n = cfg.num_instances as usize;
        let mut inst_cfg = cfg.instance.clone();
        cfg.policies.scheduler.apply(&mut inst_cfg.scheduler);
        let instances = (0..cfg.num_instances)
            .map(|i| Instance::new(i, inst_cfg.clone(), cfg.latency.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let classes = SloClasses::new(&cfg.labels, &cfg.policies.slo_targets, "slo_targets")?;
        let estimator = TtftEstimator::from_latency_model(cfg.latency.as_ref());
        let ctx = BuildContext { labels: &cfg.labels, classes: &classes, estimator };
        let admission = cfg.policies.admission.build(&ctx, "admission")?;
        let priority = cfg.policies.priority.build(&ctx, "priority")?;
        let (routing, sheet) = cfg.policies.routing.build(n, "routing")?;
        let store = SnapshotStore::new(cfg.policies.snapshots, &instances);
        let prefix = PrefixIndex::new(n, instances[0].kv().usable_blocks());
        let p = &cfg.policies;
        let keep_prefix_index = p.routing.uses_prefix_index() || p.admission.uses_prefix_index() || cfg.counterfactual_k > 0;
        let book = Book {
            metrics: ClusterMetrics::new(classes.clone(), &cfg.labels, n),
            anomalies: AnomalyDetector::new(classes, n),
            dispatched: Dispatched { in_flight: vec![0; n], pending: vec![0; n] },
            tenant_in_flight: vec![0; cfg.labels.tenants.len()],
        };
        Ok(Cluster {
            instances,
            heap: BinaryHeap::new(),
            heap_key: vec![None; n],
            control: EventQueue::new(),
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
            counterfactuals: (cfg.counterfactual_k > 0).then(|| Counterfactuals::new(cfg.counterfactual_k, estimator, n)),
            policies: cfg.policies,
            labels: cfg.labels,
            admission_latency: cfg.admission_latency,
            routing_latency: cfg.routing_latency,
            block_size: inst_cfg.block_size,
            in_control_plane: 0,
            now: Micros::ZERO,
        })
    }

    /// Runs `workload` until it, the control plane and every instance are
    /// exhausted, or the next event is past `horizon`. Every request record
    /// reaches `obs` (and the workload's `on_finish`); decisions reach `sink`.
    /// A run cut at a horizon can be continued by calling `run` again.
    pub fn run(&mut self, workload: &mut dyn Workload, horizon: Option<Micros>, obs: &mut dyn Observer, mut sink: Option<&mut dyn DecisionSink>) -> ClusterEnd {
        let limit = horizon.unwrap_or(Micros::MAX);
        let mut end = Micros::ZERO;
        loop {
            let arrival = workload.peek_arrival().map(|t| (t, EventClass::ClusterArrival, 0, 0));
            let control = self.control.peek_key().map(|k| (k.time, k.class, 0, k.seq));
            let instance = self.peek_instance().map(|(k, i)| (k.time, k.class, i + 1, k.seq));
            let Some(next) = [arrival, control, instance].into_iter().flatten().min() else { break };
            let t = next.0;
            if t > limit {
                end = limit;
                break;
            }
            debug_assert!(t >= self.now, "cluster clock went backwards: {} -> {}", self.now, t);
            self.store.refresh_due(t, &self.instances);
            self.now = t;
            end = t;
            if Some(next) == arrival {
                let Some(req) = workload.next_request() else { break };
                self.book.metrics.arrive(&req.meta);
                self.in_control_plane += 1;
                self.control.push(t + self.admission_latency, EventClass::Admission, ControlEvent::Admit(req));
            } else if Some(next) == control {
                let Some((_, ev)) = self.control.pop() else { break };
                match ev {
                    ControlEvent::Admit(req) => self.on_admit(req, sink.as_deref_mut(), obs, workload),
                    ControlEvent::Route(req) => self.on_route(req, sink.as_deref_mut()),
                    ControlEvent::Deliver(req, i, hashes) => self.on_deliver(req, i as usize, hashes, obs, workload),
                }
            } else {
                let i = (next.2 - 1) as usize;
                self.heap.pop();
                self.heap_key[i] = None;
                let mut hook = Hook::new(&mut self.book, obs, workload);
                self.instances[i].process_next(&mut hook);
                let reported = hook.reported;
                self.after_instance_event(i, reported);
            }
        }
        let (queued, running) = self.instances.iter().fold((0, 0), |(q, r), inst| {
            let (iq, ir) = inst.unfinished();
            (q + u64::from(iq), r + u64::from(ir))
        });
        ClusterEnd { end, queued, running, in_control_plane: self.in_control_plane }
    }

    /// The next valid instance event, discarding stale heap entries.
    fn peek_instance(&mut self) -> Option<(EventKey, u32)> {
        while let Some(&Reverse((time, class, i, seq))) = self.heap.peek() {
            let key = EventKey { time, class, seq };
            if self.heap_key[i as usize] == Some(key) {
                return Some((key, i));
            }
            self.heap.pop();
        }
        None
    }

    /// Re-registers instance `i`'s next event after it was touched.
    fn reschedule(&mut self, i: usize) {
        let next = self.instances[i].next_event();
        if next != self.heap_key[i] {
            self.heap_key[i] = next;
            if let Some(k) = next {
                self.heap.push(Reverse((k.time, k.class, i as u32, k.seq)));
            }
        }
    }

    fn after_instance_event(&mut self, i: usize, reported: bool) {
        self.book.anomalies.settle();
        if reported {
            self.store.on_report(i, &self.instances[i], self.now);
        }
        self.reschedule(i);
    }

    /// Hashes the request's prompt blocks (when `hash`) and assembles the snapshots.
    fn observe(&mut self, req: &Request, hash: bool) {
        self.hashes.clear();
        if hash {
            extend_block_hashes(&req.prompt, req.output_seed, 0, self.block_size, &mut self.hashes);
        }
        self.store.assemble(self.now, &self.instances, &self.book.dispatched);
    }

    fn on_admit(&mut self, mut req: Request, sink: Option<&mut (dyn DecisionSink + '_)>, obs: &mut dyn Observer, workload: &mut dyn Workload) {
        self.observe(&req, self.hash_at_admission);
        let view = view!(self, req);
        req.meta.priority = self.priority.priority(&req, &view);
        let decision = self.admission.admit(&req, &view);
        let (rejected, delay) = match decision {
            Admission::Admit => (None, Micros::ZERO),
            Admission::Delay(wait) => (None, wait),
            Admission::Reject(r) => (Some(r), Micros::ZERO),
        };
        if let Some(s) = sink {
            s.admission(&AdmissionTrace { time: self.now, request: &req, policy: self.policies.admission.name(), rejected, delay });
        }
        match rejected {
            None => {
                self.book.metrics.admit(delay);
                let t = req.meta.tenant.0 as usize;
                if t >= self.book.tenant_in_flight.len() {
                    self.book.tenant_in_flight.resize(t + 1, 0);
                }
                self.book.tenant_in_flight[t] += 1;
                self.control.push(self.now + delay, EventClass::Routing, ControlEvent::Route(req));
            }
            Some(reason) => {
                self.book.metrics.reject(&req.meta, reason);
                self.in_control_plane -= 1;
                // The request ends here: the caller and the workload hear of
                // it as of any other end (a staged workload's stage drains, a
                // session's failed round ends the session).
                let record = RequestRecord::unserved(&req, None, Outcome::Rejected(reason.as_str()), self.now);
                obs.on_finish(&record);
                workload.on_finish(&record);
            }
        }
    }

    /// Asks the routing policy where `req` would go now, from the current
    /// snapshots, without dispatching it: the router's counts and prefix
    /// index are not touched (a stateful policy such as round-robin still
    /// advances). For what-if tools, and to measure the cost of a decision.
    pub fn route_probe(&mut self, req: &Request) -> u32 {
        self.observe(req, self.hash_at_routing);
        self.sheet.clear();
        let view = view!(self, req);
        let chosen = self.routing.route(req, &view, &mut self.sheet);
        assert!((chosen as usize) < self.instances.len(), "routing policy chose instance {chosen} of {}", self.instances.len());
        chosen
    }

    fn on_route(&mut self, req: Request, sink: Option<&mut (dyn DecisionSink + '_)>) {
        let chosen = self.route_probe(&req);
        let view = view!(self, req);
        let counterfactual = self.counterfactuals.as_mut().map(|c| c.judge(&req, &view, chosen));
        if let Some(s) = sink {
            s.routing(&RoutingTrace {
                time: self.now,
                request: &req,
                policy: self.policies.routing.name(),
                chosen,
                snapshots: view.snapshots(),
                scores: &self.sheet,
                counterfactual,
            });
        }
        let i = chosen as usize;
        if self.keep_prefix_index {
            self.prefix.record(i, &self.hashes);
        }
        self.book.dispatched.in_flight[i] += 1;
        self.book.dispatched.pending[i] += 1;
        // The instance needs the prompt's hashes too: hand them over rather than hash twice.
        let hashes = self.hash_at_routing.then(|| std::mem::replace(&mut self.hashes, self.spare_hashes.pop().unwrap_or_default()));
        self.control.push(self.now + self.routing_latency, EventClass::InstanceArrival, ControlEvent::Deliver(req, chosen, hashes));
    }

    fn on_deliver(&mut self, req: Request, i: usize, hashes: Option<Vec<u64>>, obs: &mut dyn Observer, workload: &mut dyn Workload) {
        self.book.dispatched.pending[i] -= 1;
        self.in_control_plane -= 1;
        self.book.anomalies.on_deliver(i, &self.instances);
        let mut hook = Hook::new(&mut self.book, obs, workload);
        match hashes {
            Some(mut hashes) => {
                self.instances[i].inject_hashed(req, self.now, &mut hashes, &mut hook);
                self.spare_hashes.push(hashes);
            }
            None => self.instances[i].inject(req, self.now, &mut hook),
        }
        let reported = hook.reported;
        self.after_instance_event(i, reported);
    }

    /// The cluster-wide summary (same schema as a single instance's).
    pub fn summary(&self, end: &ClusterEnd) -> RunSummary {
        let stats: Vec<&InstanceStats> = self.instances.iter().map(Instance::stats).collect();
        RunSummary::build(&self.book.metrics.collector, &stats, end.end, end.queued, end.running)
    }

    /// Everything the cluster adds: policies, control plane, per-class,
    /// per-tenant and per-instance results, goodput, fairness, anomalies,
    /// load balance, counterfactuals and (with `weights`) fitness. `run` is
    /// [`Cluster::summary`] of the same end.
    pub fn cluster_summary(&self, end: &ClusterEnd, run: &RunSummary, weights: Option<&FitnessWeights>) -> ClusterSummary {
        let m = &self.book.metrics;
        let policy = |name, params| PolicyReport { name, params };
        let p = &self.policies;
        let instances: Vec<InstanceReport> = self
            .instances
            .iter()
            .map(|inst| {
                let (q, r) = inst.unfinished();
                let collector = m.instance_collector(inst.id());
                InstanceReport { id: inst.id(), summary: RunSummary::build(collector, &[inst.stats()], end.end, u64::from(q), u64::from(r)) }
            })
            .collect();
        let per_instance: Vec<u64> = self.instances.iter().map(|i| i.stats().injected).collect();
        let mean = per_instance.iter().sum::<u64>() as f64 / per_instance.len() as f64;
        let max = per_instance.iter().copied().max().unwrap_or(0) as f64;
        let jain = m.jain_over_tenants(&self.labels);
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
            num_instances: self.instances.len() as u32,
            policies: PoliciesReport {
                admission: policy(p.admission.name(), p.admission.params_json()),
                priority: policy(p.priority.name(), p.priority.params_json()),
                routing: policy(p.routing.name(), p.routing.params_json()),
                scheduler: policy(p.scheduler.name(), p.scheduler.params_json()),
            },
            control_plane: ControlPlaneReport {
                admission_latency_us: self.admission_latency.as_us(),
                routing_latency_us: self.routing_latency.as_us(),
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
            slo_classes: m.class_reports(&self.labels),
            tenants: m.tenant_reports(&self.labels),
            fairness: Fairness { jain_index_over_tenants: jain },
            anomalies: Anomalies {
                priority_inversions: self.book.anomalies.priority_inversions,
                hol_blocking_events: self.book.anomalies.hol_blocking_events,
                rejections: m.rejected_total(),
            },
            load_balance: LoadBalance { requests_per_instance: per_instance, imbalance_max_over_mean: ratio(max, mean) },
            instances,
            counterfactual: self.counterfactuals.as_ref().map(Counterfactuals::report),
            fitness,
        }
    }
}
