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
//!  background: one SnapshotRefresh per periodic snapshot field (cluster-policy-plan §D.5.2);
//!              with autoscaling, its scrapes, ticks and replica lifecycle steps
//! ```
//!
//! With autoscaling ([`crate::autoscale`]), routing chooses among the
//! routable replicas only. A request routed when none is routable waits at
//! the gateway (held) until one is; a request that reaches a replica no
//! longer accepting work (draining, gone) is routed again, as are requests
//! a drain takes back.
//!
//! The order of simultaneous events is the driver's
//! ([`blis_engine::driver`]): at one instant, arrivals, then admissions,
//! routings and deliveries, then the instances' own events, then snapshot
//! refreshes, which therefore see the state after everything else at their
//! instant.

use std::collections::{BTreeMap, VecDeque};

use blis_engine::driver::{Context, ControlPlane, Fleet, Workload};
use blis_engine::event::EventClass;
use blis_engine::instance::{Instance, Observer, QueueEvent, StepEvent, TokenEvent};
use blis_engine::kv::events::KvEventBatch;
use blis_engine::request::{Labels, Outcome, Request, RequestId, RequestRecord, extend_block_hashes};
use blis_engine::time::Micros;

use crate::anomaly::AnomalyDetector;
use crate::autoscale::scaler::{Actions, Counters, ScaleEvent, Traced};
use crate::autoscale::{ReplicaTrace, ScaleTrace};
use crate::fleet::Role;
use crate::fleet_state::FleetState;
use crate::metrics::ClusterMetrics;
use crate::pd::PdGate;
use crate::policy::{Admission, AdmissionPolicy, PolicyBundle, PriorityPolicy, RejectReason, RoutingPolicy, ScoreSheet};
use crate::prefix::PrefixIndex;
use crate::snapshot::{Dispatched, Field, SnapshotStore};
use crate::trace::{AdmissionTrace, Counterfactuals, DecisionSink, RoutingTrace};
use crate::view::ClusterView;

/// The policies' view of `$req` from the gateway's fields (a macro, not a
/// method, so the policies can be borrowed mutably alongside it).
macro_rules! view {
    ($s:ident, $instances:expr, $now:expr, $req:expr) => {
        view!($s, $instances, $now, $req, &$s.candidates)
    };
    ($s:ident, $instances:expr, $now:expr, $req:expr, $ids:expr) => {
        ClusterView {
            now: $now,
            snapshots: $s.store.view(),
            ids: $ids,
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
    /// A request whose prompt a prefill instance computed reaches its
    /// decode instance (P/D).
    DeliverPrefilled(Request, u32),
    /// Re-read a periodic snapshot field of every instance (background).
    Refresh(Field),
    /// An event of scaling group `.0`'s autoscaler (background).
    Scale(u16, ScaleEvent),
}

/// State that instance callbacks update.
pub(crate) struct Book {
    pub metrics: ClusterMetrics,
    pub anomalies: AnomalyDetector,
    pub dispatched: Dispatched,
    pub tenant_in_flight: Vec<u32>,
    /// Running sums an autoscaler scrapes.
    pub counters: Counters,
    /// How many times a scale-down drain evicted each unfinished request it evicted.
    pub reroutes: BTreeMap<u64, u32>,
}

impl Book {
    /// Ends `req` unserved, rejected for `reason`: the caller and the
    /// workload hear of it as of any other end (a staged workload's stage
    /// drains, a session's failed round ends the session).
    fn turn_away(&mut self, req: &Request, reason: RejectReason, now: Micros, cx: &mut Context<'_, GatewayEvent>) {
        self.metrics.reject(&req.meta, reason);
        cx.finish(&RequestRecord::unserved(req, None, Outcome::Rejected(reason.as_str()), now));
    }

    fn on_finish(&mut self, r: &RequestRecord) {
        let met_before = self.metrics.met_slo;
        self.metrics.on_finish(r);
        self.counters.on_finish(r, self.metrics.met_slo > met_before);
        self.anomalies.on_finish(r);
        if let Some(i) = r.instance {
            self.dispatched.in_flight[i as usize] -= 1;
        }
        if let Some(n) = self.tenant_in_flight.get_mut(r.meta.tenant.0 as usize) {
            *n -= 1;
        }
        if !self.reroutes.is_empty() {
            self.reroutes.remove(&r.id.0);
        }
    }
}

/// Routes an instance's callbacks to the gateway's books, the caller's
/// observer and the workload.
///
/// With P/D, what a prefill instance reports is the gateway's business
/// only: its requests' ends are kept for the gateway and its tokens are
/// not the client's; a disaggregated request's end carries its prefill side.
struct Hook<'a> {
    book: &'a mut Book,
    user: &'a mut dyn Observer,
    user_tokens: bool,
    workload: &'a mut dyn Workload,
    reported: bool,
    pd: Option<&'a mut PdGate>,
    /// Each instance slot's role.
    roles: &'a [Role],
}

impl<'a> Hook<'a> {
    fn new(
        book: &'a mut Book,
        user: &'a mut dyn Observer,
        workload: &'a mut dyn Workload,
        pd: Option<&'a mut PdGate>,
        roles: &'a [Role],
    ) -> Hook<'a> {
        Hook { book, user_tokens: user.observes_tokens(), user, workload, reported: false, pd, roles }
    }

    fn on_prefill_instance(&self, i: Option<u32>) -> bool {
        self.pd.is_some() && i.is_some_and(|i| self.roles[i as usize] == Role::Prefill)
    }
}

impl Observer for Hook<'_> {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.reported = true;
        if self.on_prefill_instance(r.instance) {
            self.pd.as_mut().expect("checked").ended.push(r.clone());
            return;
        }
        let with_prefill = self.pd.as_mut().and_then(|pd| pd.landed(r));
        let r = with_prefill.as_ref().unwrap_or(r);
        self.book.on_finish(r);
        self.user.on_finish(r);
        self.workload.on_finish(r);
    }
    fn on_token(&mut self, t: &TokenEvent) {
        if self.on_prefill_instance(Some(t.instance)) {
            return;
        }
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
    fn on_kv_events(&mut self, batch: &KvEventBatch<'_>) {
        self.user.on_kv_events(batch);
    }
    fn on_kv_pulled(&mut self, id: RequestId, _instance: u32) {
        if let Some(pd) = self.pd.as_mut() {
            pd.pulled(id);
        }
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
    /// The instances a request may be routed to, by ascending id: the
    /// serve or decode pools' instances that take requests (a fixed pool's,
    /// an autoscaled pool's routable replicas).
    pub(crate) candidates: Vec<u32>,
    /// Requests waiting for a routable replica, with when they started waiting.
    pub(crate) held: VecDeque<(Request, Micros)>,
    /// Each slot's role and owner, and the scaling groups' autoscalers.
    pub(crate) fleet: FleetState,
    pub(crate) actions: Actions,
    /// Prefill/decode disaggregation: the prefill pool's routing and the
    /// requests between the pools.
    pub(crate) pd: Option<PdGate>,
}

/// How many times a request may be evicted by an aborting scale-down drain
/// (`drain: immediate`) and routed again before the gateway gives up on it
/// ([`RejectReason::RerouteLimit`]). A policy that tears replicas down
/// faster than they finish anything would otherwise keep its requests
/// circling, and a run without a horizon would never end. The other drains
/// finish what runs, so a fleet always makes progress and nothing is given up.
pub const MAX_REROUTES: u32 = 8;

impl Gateway<'_> {
    /// Hashes the request's prompt blocks (when `hash`) and assembles the snapshots.
    fn observe(&mut self, req: &Request, hash: bool, instances: &[Instance], now: Micros) {
        self.hashes.clear();
        if hash {
            extend_block_hashes(&req.prompt, req.output_seed, 0, self.block_size, &mut self.hashes);
        }
        self.store.assemble(now, instances, &self.candidates, &self.book.dispatched);
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
                self.in_control_plane -= 1;
                self.book.turn_away(&req, reason, now, cx);
            }
        }
    }

    /// Where the routing policy would send `req` now, from the current
    /// snapshots, without dispatching it (see [`crate::Cluster::route_probe`]):
    /// the chosen candidate's position and instance id; `None` when no
    /// instance is routable.
    pub(crate) fn route_probe(&mut self, req: &Request, instances: &[Instance], now: Micros) -> Option<(usize, u32)> {
        if self.candidates.is_empty() {
            return None;
        }
        self.observe(req, self.hash_at_routing, instances, now);
        self.sheet.clear();
        let view = view!(self, instances, now, req);
        let k = self.routing.route(req, &view, &mut self.sheet) as usize;
        assert!(k < self.candidates.len(), "routing policy chose candidate {k} of {}", self.candidates.len());
        Some((k, self.candidates[k]))
    }

    fn on_route(&mut self, req: Request, cx: &mut Context<'_, GatewayEvent>) {
        let now = cx.now();
        let Some((k, chosen)) = self.route_probe(&req, cx.instances(), now) else {
            self.hold(req, cx);
            return;
        };
        let view = view!(self, cx.instances(), now, req);
        let counterfactual = self.counterfactuals.as_mut().map(|c| c.judge(&req, &view, k));
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
        self.store.on_routed(i);
        // With no prefill replica routable (an autoscaled prefill pool at zero), the decode instance runs the prompt itself.
        let disaggregate =
            self.pd.as_mut().map(|pd| !pd.candidates.is_empty() && pd.decider.disaggregate(uncached_tokens(pd, &req, &cx.instances()[i])));
        let (req, target) = match (disaggregate, self.pd.as_mut()) {
            (Some(true), Some(pd)) => {
                let prefill = pd.depart(req, chosen);
                let p = self.route_prefill(&prefill, cx.instances(), now);
                (prefill, p)
            }
            (_, Some(pd)) => {
                pd.counts.local += 1;
                (req, chosen)
            }
            (_, None) => (req, chosen),
        };
        // The instance needs the prompt's hashes too: hand them over rather than hash twice.
        let hashes = self.hash_at_routing.then(|| std::mem::replace(&mut self.hashes, self.spare_hashes.pop().unwrap_or_default()));
        cx.schedule(now + self.routing_latency, EventClass::InstanceArrival, GatewayEvent::Deliver(req, target, hashes));
    }

    /// Chooses the prefill instance of a disaggregated request (whose prompt
    /// is hashed in `self.hashes` when anything reads hashes) and counts the
    /// dispatch there.
    fn route_prefill(&mut self, req: &Request, instances: &[Instance], now: Micros) -> u32 {
        let pd = self.pd.as_mut().expect("called with P/D");
        self.store.assemble(now, instances, &pd.candidates, &self.book.dispatched);
        pd.sheet.clear();
        let view = view!(self, instances, now, req, &pd.candidates);
        let k = pd.routing.route(req, &view, &mut pd.sheet) as usize;
        assert!(k < pd.candidates.len(), "prefill routing chose candidate {k} of {}", pd.candidates.len());
        let p = pd.candidates[k];
        if let Some(s) = self.sink.as_deref_mut() {
            s.prefill_routing(&RoutingTrace {
                time: now,
                request: req,
                policy: pd.routing_name,
                chosen: p,
                snapshots: view.snapshots(),
                scores: &pd.sheet,
                counterfactual: None,
            });
        }
        if self.keep_prefix_index {
            self.prefix.record(p as usize, &self.hashes);
        }
        self.book.dispatched.in_flight[p as usize] += 1;
        self.book.dispatched.pending[p as usize] += 1;
        self.store.on_routed(p as usize);
        p
    }

    /// Hands the disaggregated requests whose prefill ended during the last
    /// instance event on: to their decode instance when the prefill
    /// completed, to the client as ended otherwise.
    fn settle_prefills(&mut self, cx: &mut Context<'_, GatewayEvent>) {
        let Some(pd) = self.pd.as_mut() else { return };
        if !pd.releases.is_empty() {
            let (fleet, obs, _) = cx.split();
            for (p, id) in pd.releases.drain(..) {
                fleet.release_kv(p as usize, id, pd.keep_cache, obs);
            }
        }
        if pd.ended.is_empty() {
            return;
        }
        let now = cx.now();
        let mut ended = std::mem::replace(&mut pd.ended, std::mem::take(&mut pd.spare_ended));
        for leg in ended.drain(..) {
            let p = leg.instance.expect("a prefill instance's record names it") as usize;
            if leg.outcome == Outcome::Completed {
                self.book.dispatched.in_flight[p] -= 1;
                let (req, d) = pd.prefilled(&leg);
                self.in_control_plane += 1;
                // The prefill's response (after its completion overhead) reaches the sidecar, which forwards the request.
                cx.schedule(
                    leg.finished.max(now) + self.routing_latency,
                    EventClass::InstanceArrival,
                    GatewayEvent::DeliverPrefilled(req, d),
                );
            } else {
                // The request ends where its prefill ended; it never reaches its decode instance.
                let d = pd.failed(&leg) as usize;
                self.book.dispatched.in_flight[d] -= 1;
                self.book.dispatched.pending[d] -= 1;
                self.book.on_finish(&leg);
                cx.finish(&leg);
            }
        }
        pd.spare_ended = ended;
    }

    fn on_deliver_prefilled(&mut self, req: Request, i: usize, cx: &mut Context<'_, GatewayEvent>) {
        self.book.dispatched.pending[i] -= 1;
        if !self.fleet.accepts(i) {
            // Its decode replica stopped taking work while the prompt was computed: the
            // prefill's blocks are let go and the request is routed again, whole.
            self.book.dispatched.in_flight[i] -= 1;
            if let Some(pd) = self.pd.as_mut() {
                pd.evicted_decode(req.id);
            }
            self.settle_prefills(cx);
            cx.schedule(cx.now(), EventClass::Routing, GatewayEvent::Route(req));
            return;
        }
        self.in_control_plane -= 1;
        self.with_hook(i, cx, |fleet, hook| fleet.inject_prefilled(i, req, hook));
    }

    /// No replica is routable: the request waits at the gateway, and a
    /// fleet scaled to zero starts one (each scaling group of a routed pool
    /// that has none).
    fn hold(&mut self, req: Request, cx: &mut Context<'_, GatewayEvent>) {
        let now = cx.now();
        self.held.push_back((req, now));
        for g in 0..self.fleet.scalers.len() {
            if self.fleet.group_role(g).routed() {
                let (fleet, _, _) = cx.split();
                self.fleet.scalers[g].activate(now, fleet, &mut self.actions);
                self.apply_actions(g, cx);
            }
        }
    }

    fn on_deliver(&mut self, req: Request, i: usize, hashes: Option<Vec<u64>>, cx: &mut Context<'_, GatewayEvent>) {
        self.book.dispatched.pending[i] -= 1;
        if !self.fleet.accepts(i) {
            // The replica stopped taking work while the request was on its way. A prefill
            // leg's flight ends: its client's request (counted at its decode instance too) is routed again.
            self.book.dispatched.in_flight[i] -= 1;
            self.spare_hashes.extend(hashes);
            let req = match self.pd.as_mut().filter(|_| self.fleet.roles[i] == Role::Prefill).and_then(|pd| pd.evicted_prefill(req.id)) {
                Some((client, d)) => {
                    self.book.dispatched.in_flight[d as usize] -= 1;
                    self.book.dispatched.pending[d as usize] -= 1;
                    client
                }
                None => req,
            };
            cx.schedule(cx.now(), EventClass::Routing, GatewayEvent::Route(req));
            return;
        }
        self.in_control_plane -= 1;
        let prefill = self.pd.is_some() && self.fleet.roles[i] == Role::Prefill;
        if !prefill {
            self.book.anomalies.on_deliver(i, cx.instances(), &self.candidates);
        }
        // The router hashes with the first routed pool's block size; another pool's instance hashes for itself.
        let hashes = hashes.filter(|_| cx.instances()[i].config().block_size == self.block_size);
        let spare = self.with_hook(i, cx, |fleet, hook| {
            let mut hashes = hashes;
            match prefill {
                true => fleet.inject_prefill(i, req, hashes.as_mut(), hook),
                false => fleet.inject(i, req, hashes.as_mut(), hook),
            }
            hashes
        });
        self.spare_hashes.extend(spare);
    }

    /// Runs `act` on the fleet with the gateway's books hooked in front of
    /// the run's observer and workload, then settles what instance `i`'s
    /// callbacks changed.
    fn with_hook<T>(&mut self, i: usize, cx: &mut Context<'_, GatewayEvent>, act: impl FnOnce(&mut Fleet, &mut Hook<'_>) -> T) -> T {
        let now = cx.now();
        let (fleet, obs, workload) = cx.split();
        let mut hook = Hook::new(&mut self.book, obs, workload, self.pd.as_mut(), &self.fleet.roles);
        let out = act(fleet, &mut hook);
        let reported = hook.reported;
        self.after_instance_event(i, reported, fleet.instances(), now);
        if let Some(g) = self.fleet.group_of(i) {
            self.fleet.scalers[g].settle(i, now, fleet, &mut self.actions);
            self.apply_actions(g, cx);
        }
        self.settle_prefills(cx);
        out
    }

    fn after_instance_event(&mut self, i: usize, reported: bool, instances: &[Instance], now: Micros) {
        self.book.anomalies.settle();
        if reported {
            self.store.on_report(i, &instances[i], now, &self.book.dispatched);
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
        self.store.refresh(field, cx.instances(), now, &self.book.dispatched);
        cx.schedule_background(now + interval, EventClass::SnapshotRefresh, GatewayEvent::Refresh(field));
    }

    fn on_scale(&mut self, g: usize, event: ScaleEvent, cx: &mut Context<'_, GatewayEvent>) {
        let now = cx.now();
        // Requests held at the gateway wait for a routed replica; a prefill group sees none.
        let held = if self.fleet.group_role(g).routed() { self.held.len() as u32 } else { 0 };
        let (fleet, _, _) = cx.split();
        self.fleet.scalers[g].on_event(event, now, fleet, held, &self.book.counters, &mut self.actions);
        self.apply_actions(g, cx);
    }

    /// The routable instances of every pool, by role: the routing
    /// candidates and the prefill pool's.
    pub(crate) fn refresh_candidates(&mut self) {
        let fleet = &self.fleet;
        let routable = |role: fn(Role) -> bool| (0..fleet.roles.len()).filter(move |&i| role(fleet.roles[i]) && fleet.accepts(i));
        self.candidates.clear();
        self.candidates.extend(routable(Role::routed).map(|i| i as u32));
        if let Some(pd) = self.pd.as_mut() {
            pd.candidates.clear();
            pd.candidates.extend(routable(|r| r == Role::Prefill).map(|i| i as u32));
        }
    }

    /// Carries out what group `g`'s autoscaler asked for: its events, the
    /// state of new replicas' slots, requests to route again, the routable
    /// sets and held requests, the trace.
    fn apply_actions(&mut self, g: usize, cx: &mut Context<'_, GatewayEvent>) {
        let now = cx.now();
        for (at, event) in self.actions.schedule.drain(..) {
            cx.schedule_background(at, EventClass::ScalingTick, GatewayEvent::Scale(g as u16, event));
        }
        for slot in self.actions.started.drain(..) {
            let i = slot as usize;
            self.fleet.started(g, i);
            let inst = &cx.instances()[i];
            self.store.reset(i, inst, now);
            self.prefix.reset(i, inst.kv().capacity_blocks());
            let d = &mut self.book.dispatched;
            if i >= d.in_flight.len() {
                d.in_flight.resize(i + 1, 0);
                d.pending.resize(i + 1, 0);
            }
            self.book.metrics.ensure_instances(i + 1);
            self.book.anomalies.ensure(i + 1);
            self.sheet.ensure(i + 1);
            if let Some(pd) = self.pd.as_mut() {
                pd.sheet.ensure(i + 1);
            }
        }
        let rerouted = self.actions.evicted.len();
        let aborting = self.fleet.scalers[g].aborts_running();
        for (slot, req) in self.actions.evicted.drain(..) {
            self.book.dispatched.in_flight[slot as usize] -= 1;
            self.book.anomalies.on_evict(req.id);
            // A disaggregated request's flight ends where the drain took it: from a prefill
            // instance the client's request goes back to routing (its decode instance was
            // counted too), from a decode instance its prefill side lets go of the blocks.
            let req = match self.pd.as_mut() {
                Some(pd) if self.fleet.roles[slot as usize] == Role::Prefill => match pd.evicted_prefill(req.id) {
                    Some((client, d)) => {
                        self.book.dispatched.in_flight[d as usize] -= 1;
                        self.book.dispatched.pending[d as usize] -= 1;
                        client
                    }
                    None => req,
                },
                Some(pd) => {
                    pd.evicted_decode(req.id);
                    req
                }
                None => req,
            };
            let out_of_retries = aborting && {
                let times = self.book.reroutes.entry(req.id.0).or_insert(0);
                *times += 1;
                *times > MAX_REROUTES
            };
            if out_of_retries {
                self.book.reroutes.remove(&req.id.0);
                if let Some(n) = self.book.tenant_in_flight.get_mut(req.meta.tenant.0 as usize) {
                    *n -= 1;
                }
                self.book.turn_away(&req, RejectReason::RerouteLimit, now, cx);
                continue;
            }
            self.in_control_plane += 1;
            cx.schedule(now, EventClass::Routing, GatewayEvent::Route(req));
        }
        if rerouted > 0 {
            self.settle_prefills(cx);
        }
        self.fleet.scalers[g].on_rerouted(rerouted);
        if std::mem::take(&mut self.actions.routable_changed) {
            self.refresh_candidates();
            if !self.candidates.is_empty() {
                let scaler = &mut self.fleet.scalers[g];
                for (req, since) in self.held.drain(..) {
                    scaler.on_released(now - since);
                    cx.schedule(now, EventClass::Routing, GatewayEvent::Route(req));
                }
            }
        }
        {
            let scaler = &self.fleet.scalers[g];
            for t in self.actions.traces.drain(..) {
                if let Some(sink) = self.sink.as_deref_mut() {
                    match &t {
                        Traced::Decision(d) => sink.scale(&ScaleTrace::Decision(d)),
                        &Traced::Replica { time, slot, pool, phase } => {
                            sink.scale(&ScaleTrace::Replica(ReplicaTrace { time, instance: slot, pool: scaler.pool_name(pool), phase }))
                        }
                    }
                }
            }
        }
    }
}

impl ControlPlane for Gateway<'_> {
    type Event = GatewayEvent;

    fn start(&mut self, cx: &mut Context<'_, GatewayEvent>) {
        for field in self.store.periodic_fields() {
            cx.schedule_background(self.store.interval(field), EventClass::SnapshotRefresh, GatewayEvent::Refresh(field));
        }
        for g in 0..self.fleet.scalers.len() {
            self.fleet.scalers[g].start(&mut self.actions);
            self.apply_actions(g, cx);
        }
    }

    fn on_arrival(&mut self, req: Request, cx: &mut Context<'_, GatewayEvent>) {
        self.book.metrics.arrive(&req.meta);
        self.book.counters.arrived += 1;
        self.book.counters.prompt_tokens += u64::from(req.prompt_tokens());
        self.in_control_plane += 1;
        cx.schedule(cx.now() + self.admission_latency, EventClass::Admission, GatewayEvent::Admit(req));
    }

    fn on_event(&mut self, event: GatewayEvent, cx: &mut Context<'_, GatewayEvent>) {
        match event {
            GatewayEvent::Admit(req) => self.on_admit(req, cx),
            GatewayEvent::Route(req) => self.on_route(req, cx),
            GatewayEvent::Deliver(req, i, hashes) => self.on_deliver(req, i as usize, hashes, cx),
            GatewayEvent::DeliverPrefilled(req, i) => self.on_deliver_prefilled(req, i as usize, cx),
            GatewayEvent::Refresh(field) => self.on_refresh(field, cx),
            GatewayEvent::Scale(g, event) => self.on_scale(usize::from(g), event, cx),
        }
    }

    fn on_instance_event(&mut self, i: usize, cx: &mut Context<'_, GatewayEvent>) {
        self.with_hook(i, cx, |fleet, hook| fleet.process(i, hook));
    }

    fn holding(&self) -> u64 {
        self.in_control_plane
    }
}

/// Prompt tokens of `req` that `decode`'s prefix cache lacks, when the
/// decider reads them (0 otherwise).
fn uncached_tokens(pd: &mut PdGate, req: &Request, decode: &Instance) -> u32 {
    if !pd.decider.reads_cache() {
        return 0;
    }
    req.prompt_tokens() - decode.cached_prefix_tokens(req, &mut pd.scratch)
}
