//! The gateway: the control plane of a cluster, as the engine's event
//! driver runs it.
//!
//! ```text
//!  workload ──► arrival(t) ──► Admission(t + admission latency)
//!                              priority policy, then admission policy ── reject ──► counted, ends here
//!                                │ admit (or hold for a shaping delay)
//!                                ▼
//!                              Routing: routing policy on fresh or stale snapshots
//!                                │ router's in-flight/pending counts and prefix index updated now
//!                                ▼
//!                              Delivery(+ routing latency) ──► instance
//!  background: one SnapshotRefresh per periodic snapshot field (cluster-policy-plan §D.5.2)
//! ```
//!
//! The order of simultaneous events is the driver's
//! ([`blis_engine::driver`]): at one instant, arrivals, then admissions,
//! routings and deliveries, then the instances' own events, then snapshot
//! refreshes, which therefore see the state after everything else at their
//! instant.

use blis_engine::driver::{Context, ControlPlane, Fleet, Workload};
use blis_engine::event::EventClass;
use blis_engine::instance::{Instance, Observer, QueueEvent, StepEvent, TokenEvent};
use blis_engine::request::{Labels, Outcome, Request, RequestRecord, extend_block_hashes};
use blis_engine::time::Micros;

use crate::anomaly::AnomalyDetector;
use crate::metrics::ClusterMetrics;
use crate::policy::{Admission, AdmissionPolicy, PolicyBundle, PriorityPolicy, RoutingPolicy, ScoreSheet};
use crate::prefix::PrefixIndex;
use crate::snapshot::{Dispatched, Field, SnapshotStore};
use crate::trace::{AdmissionTrace, Counterfactuals, DecisionSink, RoutingTrace};
use crate::view::ClusterView;

/// The policies' view of `$req` from the gateway's fields (a macro, not a
/// method, so the policies can be borrowed mutably alongside it).
macro_rules! view {
    ($s:ident, $instances:expr, $now:expr, $req:expr) => {
        ClusterView {
            now: $now,
            snapshots: $s.store.view(),
            instances: $instances,
            store: &$s.store,
            prefix: &$s.prefix,
            prompt_blocks: &$s.hashes,
            prompt_tokens: $req.prompt_tokens(),
            block_size: $s.block_size,
            tenant_in_flight: &$s.book.tenant_in_flight,
        }
    };
}

/// The gateway's events.
pub enum GatewayEvent {
    /// Admit (or not) an arrived request.
    Admit(Request),
    /// Route an admitted request.
    Route(Request),
    /// A routed request reaches its instance with, when the router hashed
    /// its prompt, the block hashes (handed to the instance).
    Deliver(Request, u32, Option<Vec<u64>>),
    /// Re-read a periodic snapshot field of every instance (background).
    Refresh(Field),
}

/// State that instance callbacks update.
pub(crate) struct Book {
    pub metrics: ClusterMetrics,
    pub anomalies: AnomalyDetector,
    pub dispatched: Dispatched,
    pub tenant_in_flight: Vec<u32>,
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

/// Routes an instance's callbacks to the gateway's books, the caller's
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

/// Admission, priority and routing in front of N instances, deciding
/// online from what a real router could see.
pub struct Gateway<'s> {
    pub(crate) admission: Box<dyn AdmissionPolicy>,
    pub(crate) priority: Box<dyn PriorityPolicy>,
    pub(crate) routing: Box<dyn RoutingPolicy>,
    pub(crate) sheet: ScoreSheet,
    pub(crate) store: SnapshotStore,
    pub(crate) prefix: PrefixIndex,
    // Whether anything reads the prefix index / the prompt's block hashes at
    // admission and at routing; what nothing reads is not maintained.
    pub(crate) keep_prefix_index: bool,
    pub(crate) hash_at_admission: bool,
    pub(crate) hash_at_routing: bool,
    pub(crate) hashes: Vec<u64>,
    // Emptied hash buffers, reused for the hashes that travel with deliveries.
    pub(crate) spare_hashes: Vec<Vec<u64>>,
    pub(crate) book: Book,
    pub(crate) counterfactuals: Option<Counterfactuals>,
    pub(crate) policies: PolicyBundle,
    pub(crate) labels: Labels,
    pub(crate) admission_latency: Micros,
    pub(crate) routing_latency: Micros,
    pub(crate) block_size: u32,
    pub(crate) in_control_plane: u64,
    pub(crate) sink: Option<&'s mut dyn DecisionSink>,
}

impl Gateway<'_> {
    /// Hashes the request's prompt blocks (when `hash`) and assembles the snapshots.
    fn observe(&mut self, req: &Request, hash: bool, instances: &[Instance], now: Micros) {
        self.hashes.clear();
        if hash {
            extend_block_hashes(&req.prompt, req.output_seed, 0, self.block_size, &mut self.hashes);
        }
        self.store.assemble(now, instances, &self.book.dispatched);
    }

    fn on_admit(&mut self, mut req: Request, cx: &mut Context<'_, GatewayEvent>) {
        let now = cx.now();
        self.observe(&req, self.hash_at_admission, cx.instances(), now);
        let view = view!(self, cx.instances(), now, req);
        req.meta.priority = self.priority.priority(&req, &view);
        let decision = self.admission.admit(&req, &view);
        let (rejected, delay) = match decision {
            Admission::Admit => (None, Micros::ZERO),
            Admission::Delay(wait) => (None, wait),
            Admission::Reject(r) => (Some(r), Micros::ZERO),
        };
        if let Some(s) = self.sink.as_deref_mut() {
            s.admission(&AdmissionTrace { time: now, request: &req, policy: self.policies.admission.name(), rejected, delay });
        }
        match rejected {
            None => {
                self.book.metrics.admit(delay);
                let t = req.meta.tenant.0 as usize;
                if t >= self.book.tenant_in_flight.len() {
                    self.book.tenant_in_flight.resize(t + 1, 0);
                }
                self.book.tenant_in_flight[t] += 1;
                cx.schedule(now + delay, EventClass::Routing, GatewayEvent::Route(req));
            }
            Some(reason) => {
                self.book.metrics.reject(&req.meta, reason);
                self.in_control_plane -= 1;
                // The request ends here: the caller and the workload hear of
                // it as of any other end (a staged workload's stage drains, a
                // session's failed round ends the session).
                cx.finish(&RequestRecord::unserved(&req, None, Outcome::Rejected(reason.as_str()), now));
            }
        }
    }

    /// Where the routing policy would send `req` now, from the current
    /// snapshots, without dispatching it (see [`crate::Cluster::route_probe`]).
    pub(crate) fn route_probe(&mut self, req: &Request, instances: &[Instance], now: Micros) -> u32 {
        self.observe(req, self.hash_at_routing, instances, now);
        self.sheet.clear();
        let view = view!(self, instances, now, req);
        let chosen = self.routing.route(req, &view, &mut self.sheet);
        assert!((chosen as usize) < instances.len(), "routing policy chose instance {chosen} of {}", instances.len());
        chosen
    }

    fn on_route(&mut self, req: Request, cx: &mut Context<'_, GatewayEvent>) {
        let now = cx.now();
        let chosen = self.route_probe(&req, cx.instances(), now);
        let view = view!(self, cx.instances(), now, req);
        let counterfactual = self.counterfactuals.as_mut().map(|c| c.judge(&req, &view, chosen));
        if let Some(s) = self.sink.as_deref_mut() {
            s.routing(&RoutingTrace {
                time: now,
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
        cx.schedule(now + self.routing_latency, EventClass::InstanceArrival, GatewayEvent::Deliver(req, chosen, hashes));
    }

    fn on_deliver(&mut self, req: Request, i: usize, hashes: Option<Vec<u64>>, cx: &mut Context<'_, GatewayEvent>) {
        self.book.dispatched.pending[i] -= 1;
        self.in_control_plane -= 1;
        self.book.anomalies.on_deliver(i, cx.instances());
        let spare = self.with_hook(i, cx, |fleet, hook| match hashes {
            Some(mut hashes) => {
                fleet.inject(i, req, Some(&mut hashes), hook);
                Some(hashes)
            }
            None => {
                fleet.inject(i, req, None, hook);
                None
            }
        });
        self.spare_hashes.extend(spare);
    }

    /// Runs `act` on the fleet with the gateway's books hooked in front of
    /// the run's observer and workload, then settles what instance `i`'s
    /// callbacks changed.
    fn with_hook<T>(&mut self, i: usize, cx: &mut Context<'_, GatewayEvent>, act: impl FnOnce(&mut Fleet, &mut Hook<'_>) -> T) -> T {
        let now = cx.now();
        let (fleet, obs, workload) = cx.split();
        let mut hook = Hook::new(&mut self.book, obs, workload);
        let out = act(fleet, &mut hook);
        let reported = hook.reported;
        self.after_instance_event(i, reported, fleet.instances(), now);
        out
    }

    fn after_instance_event(&mut self, i: usize, reported: bool, instances: &[Instance], now: Micros) {
        self.book.anomalies.settle();
        if reported {
            self.store.on_report(i, &instances[i], now);
        }
    }

    /// A periodic field's refresh instant `k·interval` came. Only the last
    /// such instant before the next foreground event matters (nothing
    /// changes in between), so the refresh jumps there first; then it reads
    /// every instance, seeing everything that happened at this instant.
    fn on_refresh(&mut self, field: Field, cx: &mut Context<'_, GatewayEvent>) {
        let now = cx.now();
        let interval = self.store.interval(field);
        let next = cx.next_foreground();
        let due = next.map_or(now, |t| Micros((t.0 - 1) / interval.0 * interval.0));
        if due > now {
            cx.schedule_background(due, EventClass::SnapshotRefresh, GatewayEvent::Refresh(field));
            return;
        }
        self.store.refresh(field, cx.instances(), now);
        cx.schedule_background(now + interval, EventClass::SnapshotRefresh, GatewayEvent::Refresh(field));
    }
}

impl ControlPlane for Gateway<'_> {
    type Event = GatewayEvent;

    fn start(&mut self, cx: &mut Context<'_, GatewayEvent>) {
        for field in self.store.periodic_fields() {
            cx.schedule_background(self.store.interval(field), EventClass::SnapshotRefresh, GatewayEvent::Refresh(field));
        }
    }

    fn on_arrival(&mut self, req: Request, cx: &mut Context<'_, GatewayEvent>) {
        self.book.metrics.arrive(&req.meta);
        self.in_control_plane += 1;
        cx.schedule(cx.now() + self.admission_latency, EventClass::Admission, GatewayEvent::Admit(req));
    }

    fn on_event(&mut self, event: GatewayEvent, cx: &mut Context<'_, GatewayEvent>) {
        match event {
            GatewayEvent::Admit(req) => self.on_admit(req, cx),
            GatewayEvent::Route(req) => self.on_route(req, cx),
            GatewayEvent::Deliver(req, i, hashes) => self.on_deliver(req, i as usize, hashes, cx),
            GatewayEvent::Refresh(field) => self.on_refresh(field, cx),
        }
    }

    fn on_instance_event(&mut self, i: usize, cx: &mut Context<'_, GatewayEvent>) {
        self.with_hook(i, cx, |fleet, hook| fleet.process(i, hook));
    }

    fn holding(&self) -> u64 {
        self.in_control_plane
    }
}
