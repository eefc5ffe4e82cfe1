//! The event driver: one clock and one total order of events for every way
//! BLIS runs a simulation — a single instance, a cluster behind a control
//! plane, the `blis serve` loop that follows the wall clock.
//!
//! ```text
//!  Workload ──peek/next──►┐
//!                         │   (time, class, source, seq): the smallest runs next
//!  ControlPlane events ──►├──► Driver ──► ControlPlane::on_arrival / on_event / on_instance_event
//!  Fleet (instances' ────►┘                      │ Context: now, schedule, inject, process
//!   next events)                                 ▼
//!                                     Instance × N ──► Observer (records, tokens, steps)
//! ```
//!
//! **Total order.** Events are ordered by `(time, class, source, sequence)`:
//! the class order is [`EventClass`]'s; `source` is 0 for the workload and
//! the control plane and `1 + id` for instance `id`; the sequence is each
//! queue's push order. So at one instant a workload arrival comes first,
//! control-plane events precede instance events of the same class, and
//! instances tie-break by lowest id. Nothing depends on hashing, so a seed
//! gives the same run for any number of instances.
//!
//! **Foreground and background.** A control plane schedules its events in
//! the foreground (admission, routing, delivery: work in progress) or in the
//! background (periodic chores such as a snapshot refresh or an autoscaler
//! tick, and what they set in motion, such as a replica coming up).
//! Background events never keep a run alive on their own: a run ends when
//! only they remain, unless the control plane holds requests (waiting for a
//! replica to come up, say), and its end time is that of the last event
//! that did something for a request.
//!
//! **Cost.** Choosing the next event is O(log N) (a lazy heap of the
//! instances' next-event keys, refreshed whenever an instance is touched;
//! one instance needs no heap at all). Nothing allocates per event once the
//! queues have grown.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::event::{EventClass, EventKey, EventQueue};
use crate::instance::{Evict, Instance, Observer, QueueEvent, StepEvent, TokenEvent};
use crate::kv::events::KvEventBatch;
use crate::request::{Request, RequestId, RequestRecord};
use crate::time::Micros;

/// A lazy, arrival-ordered source of requests.
///
/// Guarantees expected of implementations: `peek_arrival` returns the arrival
/// time of the request `next_request` would return; arrivals never decrease;
/// a request released by `on_finish` (a follow-up round) arrives no earlier
/// than the finish that released it.
pub trait Workload {
    /// Arrival time of the next request, or `None` when no request is pending
    /// (more may still be released by `on_finish`).
    fn peek_arrival(&mut self) -> Option<Micros>;
    /// The next request.
    fn next_request(&mut self) -> Option<Request>;
    /// A request ended; session workloads release their next round here.
    fn on_finish(&mut self, _record: &RequestRecord) {}
}

/// A workload backed by an iterator of requests already in arrival order.
pub struct IterWorkload<I: Iterator<Item = Request>> {
    iter: std::iter::Peekable<I>,
}

impl<I: Iterator<Item = Request>> IterWorkload<I> {
    /// Wraps an arrival-ordered iterator.
    pub fn new(iter: I) -> Self {
        IterWorkload { iter: iter.peekable() }
    }
}

impl<I: Iterator<Item = Request>> Workload for IterWorkload<I> {
    fn peek_arrival(&mut self) -> Option<Micros> {
        self.iter.peek().map(|r| r.arrival)
    }
    fn next_request(&mut self) -> Option<Request> {
        self.iter.next()
    }
}

/// A workload that sends nothing: for a driver whose requests arrive from
/// outside ([`Driver::arrive`]), as `blis serve`'s do.
pub struct NoArrivals;

impl Workload for NoArrivals {
    fn peek_arrival(&mut self) -> Option<Micros> {
        None
    }
    fn next_request(&mut self) -> Option<Request> {
        None
    }
}

/// Forwards an instance's callbacks to an observer, and request ends to the
/// workload too (which may release a follow-up round).
pub struct Tee<'a> {
    /// Receives every callback.
    pub obs: &'a mut dyn Observer,
    /// Hears of every request that ends.
    pub workload: &'a mut dyn Workload,
}

impl Observer for Tee<'_> {
    fn on_finish(&mut self, record: &RequestRecord) {
        self.obs.on_finish(record);
        self.workload.on_finish(record);
    }
    fn on_token(&mut self, token: &TokenEvent) {
        self.obs.on_token(token);
    }
    fn observes_tokens(&self) -> bool {
        self.obs.observes_tokens()
    }
    fn on_step(&mut self, step: &StepEvent<'_>) {
        self.obs.on_step(step);
    }
    fn on_queue(&mut self, event: &QueueEvent) {
        self.obs.on_queue(event);
    }
    fn on_kv_events(&mut self, batch: &KvEventBatch<'_>) {
        self.obs.on_kv_events(batch);
    }
}

/// The instances of a run, and the order of their next events.
///
/// Every method that touches an instance re-registers that instance's next
/// event, so [`Fleet::peek`] is always right.
pub struct Fleet {
    instances: Vec<Instance>,
    heap: BinaryHeap<Reverse<(Micros, EventClass, u32, u64)>>,
    heap_key: Vec<Option<EventKey>>,
    now: Micros,
}

impl Fleet {
    /// A fleet of `instances`; instance `i` must have id `i`.
    pub fn new(instances: Vec<Instance>) -> Fleet {
        debug_assert!(instances.iter().enumerate().all(|(i, inst)| inst.id() as usize == i), "instance ids must be their indices");
        let mut fleet = Fleet { heap_key: vec![None; instances.len()], instances, heap: BinaryHeap::new(), now: Micros::ZERO };
        for i in 0..fleet.instances.len() {
            fleet.reschedule(i);
        }
        fleet
    }

    /// The instances, by id.
    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    /// The current time.
    pub fn now(&self) -> Micros {
        self.now
    }

    /// Adds an idle instance (a replica coming up); its id must be the
    /// fleet's size, which this returns.
    pub fn add(&mut self, instance: Instance) -> u32 {
        let id = self.instances.len() as u32;
        debug_assert_eq!(instance.id(), id, "instance ids must be their indices");
        self.instances.push(instance);
        self.heap_key.push(None);
        if self.instances.len() == 2 {
            // One instance needed no heap; two do.
            self.reschedule(0);
        }
        self.reschedule(id as usize);
        id
    }

    /// Puts `instance` (with id `i`, idle) in slot `i` in place of an idle
    /// instance, which it returns: a new replica taking a retired one's place.
    pub fn replace(&mut self, i: usize, instance: Instance) -> Instance {
        debug_assert_eq!(instance.id() as usize, i, "instance ids must be their indices");
        debug_assert!(self.instances[i].is_idle(), "replacing a busy instance");
        let old = std::mem::replace(&mut self.instances[i], instance);
        self.reschedule(i);
        old
    }

    /// Takes requests away from instance `i` now ([`Instance::evict`]).
    pub fn evict(&mut self, i: usize, which: Evict, out: &mut Vec<Request>) {
        self.instances[i].evict(which, self.now, out);
        self.reschedule(i);
    }

    /// Sets instance `i`'s step-time multiplier ([`Instance::set_step_slowdown`]).
    pub fn set_step_slowdown(&mut self, i: usize, factor: f64) {
        self.instances[i].set_step_slowdown(factor);
    }

    /// Hands `req` to instance `i` now ([`Instance::inject`]); with
    /// `prompt_hashes`, the caller's block hashes of its prompt
    /// ([`Instance::inject_hashed`]).
    pub fn inject(&mut self, i: usize, req: Request, prompt_hashes: Option<&mut Vec<u64>>, obs: &mut dyn Observer) {
        match prompt_hashes {
            Some(hashes) => self.instances[i].inject_hashed(req, self.now, hashes, obs),
            None => self.instances[i].inject(req, self.now, obs),
        }
        self.reschedule(i);
    }

    /// Hands `req`, whose prompt a prefill instance computed, to decode
    /// instance `i` now ([`Instance::inject_prefilled`]).
    pub fn inject_prefilled(&mut self, i: usize, req: Request, obs: &mut dyn Observer) {
        self.instances[i].inject_prefilled(req, self.now, obs);
        self.reschedule(i);
    }

    /// Hands `req`, the prefill of a disaggregated request, to prefill
    /// instance `i` now ([`Instance::inject_prefill`]).
    pub fn inject_prefill(&mut self, i: usize, req: Request, prompt_hashes: Option<&mut Vec<u64>>, obs: &mut dyn Observer) {
        self.instances[i].inject_prefill(req, self.now, prompt_hashes, obs);
        self.reschedule(i);
    }

    /// Instance `i` lets go of the blocks prefill `id` holds now ([`Instance::release_kv`]).
    pub fn release_kv(&mut self, i: usize, id: RequestId, keep_cached: bool, obs: &mut dyn Observer) {
        self.instances[i].release_kv(id, keep_cached, self.now, obs);
        self.reschedule(i);
    }

    /// The client of request `id` on instance `i` gave up now ([`Instance::abandon`]).
    pub fn abandon(&mut self, i: usize, id: RequestId, obs: &mut dyn Observer) {
        self.instances[i].abandon(id, self.now, obs);
        self.reschedule(i);
    }

    /// Resets instance `i`'s GPU prefix cache now ([`Instance::reset_prefix_cache`]).
    pub fn reset_prefix_cache(&mut self, i: usize, obs: &mut dyn Observer) -> bool {
        self.instances[i].reset_prefix_cache(obs)
    }

    /// Processes instance `i`'s next event, which must be due now.
    pub fn process(&mut self, i: usize, obs: &mut dyn Observer) {
        debug_assert_eq!(self.instances[i].next_event().map(|k| k.time), Some(self.now), "instance {i}'s event is not due");
        if self.instances.len() > 1 {
            self.heap.pop();
            self.heap_key[i] = None;
        }
        self.instances[i].process_next(obs);
        self.reschedule(i);
    }

    /// The next instance event and its instance, discarding stale heap entries.
    pub fn peek(&mut self) -> Option<(EventKey, u32)> {
        if let [only] = self.instances.as_slice() {
            return only.next_event().map(|k| (k, 0));
        }
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
        if self.instances.len() == 1 {
            return;
        }
        let next = self.instances[i].next_event();
        if next != self.heap_key[i] {
            self.heap_key[i] = next;
            if let Some(k) = next {
                self.heap.push(Reverse((k.time, k.class, i as u32, k.seq)));
            }
        }
    }

    /// Requests waiting (queued or arriving) and running, over every instance.
    pub fn unfinished(&self) -> (u64, u64) {
        self.instances.iter().fold((0, 0), |(q, r), inst| {
            let (iq, ir) = inst.unfinished();
            (q + u64::from(iq), r + u64::from(ir))
        })
    }
}

/// What a control plane may do while it handles an event: read the clock
/// and the instances, schedule its own events, hand requests to instances.
pub struct Context<'a, E> {
    fleet: &'a mut Fleet,
    events: &'a mut EventQueue<E>,
    background: &'a mut EventQueue<E>,
    obs: &'a mut dyn Observer,
    workload: &'a mut dyn Workload,
}

impl<E> Context<'_, E> {
    /// The current time.
    pub fn now(&self) -> Micros {
        self.fleet.now
    }

    /// The instances, by id.
    pub fn instances(&self) -> &[Instance] {
        &self.fleet.instances
    }

    /// Schedules a foreground event (one that is part of some request's
    /// way through the control plane) at `at` ≥ now.
    pub fn schedule(&mut self, at: Micros, class: EventClass, event: E) {
        debug_assert!(at >= self.now(), "event scheduled in the past");
        self.events.push(at, class, event);
    }

    /// Schedules a background event (a periodic chore, which never keeps a
    /// run alive) at `at` ≥ now.
    pub fn schedule_background(&mut self, at: Micros, class: EventClass, event: E) {
        debug_assert!(at >= self.now(), "event scheduled in the past");
        self.background.push(at, class, event);
    }

    /// When the next foreground event happens (a workload arrival, a
    /// control-plane event or an instance event), if any: what a
    /// background chore needs to know to skip instants at which nothing
    /// could have changed.
    pub fn next_foreground(&mut self) -> Option<Micros> {
        let arrival = self.workload.peek_arrival();
        let control = self.events.peek_key().map(|k| k.time);
        let instance = self.fleet.peek().map(|(k, _)| k.time);
        [arrival, control, instance].into_iter().flatten().min()
    }

    /// Hands `req` to instance `i` now; its callbacks reach the run's
    /// observer and workload.
    pub fn inject(&mut self, i: usize, req: Request) {
        self.fleet.inject(i, req, None, &mut Tee { obs: self.obs, workload: self.workload });
    }

    /// Processes instance `i`'s due event; its callbacks reach the run's
    /// observer and workload.
    pub fn process(&mut self, i: usize) {
        self.fleet.process(i, &mut Tee { obs: self.obs, workload: self.workload });
    }

    /// A request ended in the control plane (rejected): the run's observer
    /// and workload hear of it as of any other end.
    pub fn finish(&mut self, record: &RequestRecord) {
        self.obs.on_finish(record);
        self.workload.on_finish(record);
    }

    /// The fleet, the run's observer and its workload, for a control plane
    /// that observes the instances' callbacks itself before passing them on.
    pub fn split(&mut self) -> (&mut Fleet, &mut dyn Observer, &mut dyn Workload) {
        (self.fleet, self.obs, self.workload)
    }
}

/// What stands between the workload and the instances: admission,
/// routing, and anything else that decides where and when a request runs.
///
/// Add a method only when a second implementation needs it.
pub trait ControlPlane {
    /// Its own events.
    type Event;

    /// Called once, before the first event: schedules what runs from the
    /// start (periodic chores).
    fn start(&mut self, _cx: &mut Context<'_, Self::Event>) {}

    /// A request from the workload reaches the control plane now.
    fn on_arrival(&mut self, req: Request, cx: &mut Context<'_, Self::Event>);

    /// One of its events fires now.
    fn on_event(&mut self, event: Self::Event, cx: &mut Context<'_, Self::Event>);

    /// Instance `i`'s next event is due now; the default processes it with
    /// the callbacks going to the run's observer and workload.
    fn on_instance_event(&mut self, i: usize, cx: &mut Context<'_, Self::Event>) {
        cx.process(i);
    }

    /// Requests it holds: arrived and not yet handed to an instance or rejected.
    fn holding(&self) -> u64 {
        0
    }
}

/// The control plane of a single instance: every request goes to instance
/// 0 the moment it arrives. A one-instance run through it is event for
/// event what the instance would do on its own.
#[derive(Copy, Clone, Debug, Default)]
pub struct PassThrough;

impl ControlPlane for PassThrough {
    type Event = std::convert::Infallible;

    fn on_arrival(&mut self, req: Request, cx: &mut Context<'_, Self::Event>) {
        cx.inject(0, req);
    }

    fn on_event(&mut self, event: Self::Event, _cx: &mut Context<'_, Self::Event>) {
        match event {}
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunEnd {
    /// Time of the last processed event (the horizon if the run was cut there).
    pub end: Micros,
    /// Requests waiting at instances (queued or arriving).
    pub queued: u64,
    /// Requests running at instances.
    pub running: u64,
    /// Requests the control plane holds (only when cut at a horizon).
    pub in_control_plane: u64,
}

/// Instances and a control plane on one clock.
pub struct Driver<P: ControlPlane> {
    fleet: Fleet,
    plane: P,
    events: EventQueue<P::Event>,
    background: EventQueue<P::Event>,
    started: bool,
}

impl<P: ControlPlane> Driver<P> {
    /// A driver at time zero; instance `i` must have id `i`.
    pub fn new(instances: Vec<Instance>, plane: P) -> Driver<P> {
        Driver { fleet: Fleet::new(instances), plane, events: EventQueue::new(), background: EventQueue::new(), started: false }
    }

    /// The current time: that of the last event processed, or of the last
    /// [`Driver::run_until`].
    pub fn now(&self) -> Micros {
        self.fleet.now
    }

    /// The instances.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The instances, to act on them from outside (a client abandoning a request).
    pub fn fleet_mut(&mut self) -> &mut Fleet {
        &mut self.fleet
    }

    /// The control plane.
    pub fn plane(&self) -> &P {
        &self.plane
    }

    /// The control plane and the instances, for a query that needs both.
    pub fn plane_and_fleet(&mut self) -> (&mut P, &Fleet) {
        (&mut self.plane, &self.fleet)
    }

    fn context<'a>(&'a mut self, obs: &'a mut dyn Observer, workload: &'a mut dyn Workload) -> (&'a mut P, Context<'a, P::Event>) {
        let cx = Context { fleet: &mut self.fleet, events: &mut self.events, background: &mut self.background, obs, workload };
        (&mut self.plane, cx)
    }

    fn start(&mut self, workload: &mut dyn Workload, obs: &mut dyn Observer) {
        if !self.started {
            self.started = true;
            let (plane, mut cx) = self.context(obs, workload);
            plane.start(&mut cx);
        }
    }

    /// Runs `workload` until it, the control plane and every instance are
    /// exhausted, or the next event is past `horizon`. Every request record
    /// reaches `obs` and the workload's `on_finish`. A run cut at a horizon
    /// can be continued by calling `run` again.
    pub fn run(&mut self, workload: &mut dyn Workload, horizon: Option<Micros>, obs: &mut dyn Observer) -> RunEnd {
        self.start(workload, obs);
        let limit = horizon.unwrap_or(Micros::MAX);
        let mut end = Micros::ZERO;
        loop {
            let arrival = workload.peek_arrival().map(|t| (t, EventClass::ClusterArrival, 0, 0));
            let control = self.events.peek_key().map(|k| (k.time, k.class, 0, k.seq));
            let instance = self.fleet.peek().map(|(k, i)| (k.time, k.class, i + 1, k.seq));
            let foreground = [arrival, control, instance].into_iter().flatten().min();
            let background = self.background.peek_key().map(|k| (k.time, k.class, 0, k.seq));
            let next = match (foreground, background) {
                (Some(f), Some(b)) if b < f => b,
                (Some(f), _) => f,
                // Only chores are left: they matter only to requests the plane holds.
                (None, Some(b)) if self.plane.holding() > 0 => b,
                (None, _) => break,
            };
            let background = (Some(next) == background).then_some(next);
            let t = next.0;
            if t > limit {
                end = limit;
                break;
            }
            debug_assert!(t >= self.fleet.now, "the clock went backwards: {} -> {}", self.fleet.now, t);
            self.fleet.now = t;
            end = t;
            if background.is_some() {
                let Some((_, event)) = self.background.pop() else { break };
                let (plane, mut cx) = self.context(obs, workload);
                plane.on_event(event, &mut cx);
            } else if Some(next) == arrival {
                let Some(req) = workload.next_request() else { break };
                let (plane, mut cx) = self.context(obs, workload);
                plane.on_arrival(req, &mut cx);
            } else if Some(next) == control {
                let Some((_, event)) = self.events.pop() else { break };
                let (plane, mut cx) = self.context(obs, workload);
                plane.on_event(event, &mut cx);
            } else {
                let (plane, mut cx) = self.context(obs, workload);
                plane.on_instance_event((next.2 - 1) as usize, &mut cx);
            }
        }
        let (queued, running) = self.fleet.unfinished();
        RunEnd { end, queued, running, in_control_plane: self.plane.holding() }
    }

    /// Processes every event at or before `t` (there is no workload: requests
    /// come through [`Driver::arrive`]), then moves the clock to `t`.
    pub fn run_until(&mut self, t: Micros, obs: &mut dyn Observer) {
        if t >= self.fleet.now {
            self.run(&mut NoArrivals, Some(t), obs);
            self.fleet.now = t;
        }
    }

    /// A request arrives now from outside the driver (a client of `blis serve`).
    pub fn arrive(&mut self, req: Request, obs: &mut dyn Observer) {
        self.start(&mut NoArrivals, obs);
        let mut none = NoArrivals;
        let (plane, mut cx) = self.context(obs, &mut none);
        plane.on_arrival(req, &mut cx);
    }

    /// When the next foreground event happens, if any (arrivals from a
    /// workload aside).
    pub fn next_event(&mut self) -> Option<Micros> {
        let control = self.events.peek_key().map(|k| k.time);
        let instance = self.fleet.peek().map(|(k, _)| k.time);
        [control, instance].into_iter().flatten().min()
    }
}

/// Runs one instance on `workload` until both are exhausted or the next event
/// is past `horizon`: a [`Driver`] with the [`PassThrough`] control plane.
/// Returns how the run ended and the instance.
pub fn run_single(instance: Instance, workload: &mut dyn Workload, horizon: Option<Micros>, obs: &mut dyn Observer) -> (RunEnd, Instance) {
    let mut driver = Driver::new(vec![instance], PassThrough);
    let end = driver.run(workload, horizon, obs);
    let instance = driver.fleet.instances.pop().unwrap_or_else(|| unreachable!("a one-instance driver keeps its instance"));
    (end, instance)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::latency::Blackbox;
    use crate::metrics::Collector;
    use crate::request::{RequestMeta, TokenSeq};
    use crate::scheduler::InstanceConfig;

    fn instance(id: u32) -> Instance {
        Instance::new(id, InstanceConfig::basic(8, 512, 4096, 1000), Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 1.0, 10.0] }))
            .unwrap()
    }

    fn request(i: u64, arrival_ms: u64) -> Request {
        Request {
            id: RequestId(i),
            arrival: Micros::from_ms(arrival_ms),
            prompt: TokenSeq::synthetic(i, 100),
            max_output_tokens: 5,
            output_seed: i,
            meta: RequestMeta::default(),
        }
    }

    /// A plane that sends request i to instance i mod N after a delay, and
    /// keeps a background tick going.
    struct Spread {
        delay: Micros,
        ticks: Vec<Micros>,
        holding: u64,
    }

    impl ControlPlane for Spread {
        type Event = Option<Request>;
        fn start(&mut self, cx: &mut Context<'_, Self::Event>) {
            cx.schedule_background(Micros::from_ms(1), EventClass::SnapshotRefresh, None);
        }
        fn on_arrival(&mut self, req: Request, cx: &mut Context<'_, Self::Event>) {
            self.holding += 1;
            cx.schedule(cx.now() + self.delay, EventClass::InstanceArrival, Some(req));
        }
        fn on_event(&mut self, event: Self::Event, cx: &mut Context<'_, Self::Event>) {
            match event {
                Some(req) => {
                    self.holding -= 1;
                    let i = (req.id.0 % cx.instances().len() as u64) as usize;
                    cx.inject(i, req);
                }
                None => {
                    self.ticks.push(cx.now());
                    cx.schedule_background(cx.now() + Micros::from_ms(1), EventClass::SnapshotRefresh, None);
                }
            }
        }
        fn holding(&self) -> u64 {
            self.holding
        }
    }

    #[test]
    fn background_events_run_in_order_but_never_keep_a_run_alive() {
        let mut driver = Driver::new((0..3).map(instance).collect(), Spread { delay: Micros(500), ticks: Vec::new(), holding: 0 });
        let mut records = Collector::default();
        let end = driver.run(&mut IterWorkload::new((0..30).map(|i| request(i, i))), None, &mut records);
        assert_eq!(records.completed, 30);
        assert_eq!((end.queued, end.running, end.in_control_plane), (0, 0, 0));
        let ticks = &driver.plane().ticks;
        // One tick per millisecond while work remained, none after it.
        assert_eq!(ticks.first(), Some(&Micros::from_ms(1)));
        assert!(ticks.windows(2).all(|w| w[1] == w[0] + Micros::from_ms(1)));
        assert!(*ticks.last().unwrap() < end.end, "a tick ran after the last foreground event");
        assert!(end.end - *ticks.last().unwrap() <= Micros::from_ms(1));
    }

    #[test]
    fn a_cut_run_continues_where_it_stopped() {
        let requests = || IterWorkload::new((0..40).map(|i| request(i, 2 * i)));
        let mut whole = Collector::default();
        let mut d = Driver::new((0..2).map(instance).collect(), Spread { delay: Micros(300), ticks: Vec::new(), holding: 0 });
        let full = d.run(&mut requests(), None, &mut whole);
        let mut parts = Collector::default();
        let mut d = Driver::new((0..2).map(instance).collect(), Spread { delay: Micros(300), ticks: Vec::new(), holding: 0 });
        let mut w = requests();
        let cut = d.run(&mut w, Some(Micros::from_ms(37)), &mut parts);
        assert_eq!(cut.end, Micros::from_ms(37));
        assert!(cut.queued + cut.running + cut.in_control_plane > 0);
        let rest = d.run(&mut w, None, &mut parts);
        assert_eq!(rest.end, full.end);
        assert_eq!(parts.completed, whole.completed);
        assert_eq!(format!("{:?}", parts.latency_ms()), format!("{:?}", whole.latency_ms()));
    }

    #[test]
    fn external_arrivals_after_run_until_see_the_clock_move_on() {
        let mut d = Driver::new(vec![instance(0)], PassThrough);
        let mut c = Collector::default();
        d.run_until(Micros::from_ms(5), &mut c);
        assert_eq!(d.now(), Micros::from_ms(5));
        d.arrive(Request { arrival: d.now(), ..request(0, 0) }, &mut c);
        assert!(d.next_event().is_some());
        d.run_until(Micros::from_secs(10), &mut c);
        assert_eq!(c.completed, 1);
        assert_eq!(d.next_event(), None);
    }
}
