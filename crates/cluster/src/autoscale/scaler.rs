//! The autoscaler as the gateway runs it: replicas by instance slot, nodes
//! by pool, the scrape → decide loop, and the accounts of capacity and
//! cost. It acts on the fleet directly and tells the gateway, through
//! [`Actions`], what to schedule and which requests to route again.

use std::collections::VecDeque;
use std::marker::PhantomData;

use blis_engine::driver::Fleet;
use blis_engine::instance::{Evict, Instance, InstanceStats};
use blis_engine::metrics::Samples;
use blis_engine::request::{Outcome, Request, RequestRecord};
use blis_engine::rng::{SimRng, subsystem_rng};
use blis_engine::time::{Micros, US_PER_MS};

use super::policy::{AutoscalePolicy, ScaleContext, ScaleMetrics, Traffic};
use super::report::{AutoscalingReport, Constraint, Phase, PoolReport, ScaleAction, ScaleDecision, TimelinePoint};
use super::{AutoscaleConfig, DrainPolicy, PoolConfig};
use crate::estimate::TtftEstimator;

/// The autoscaler's events (background: they never keep a run alive).
/// A `generation` tells a stale event (for a node or replica since gone) from a live one.
#[derive(Copy, Clone, Debug)]
#[allow(missing_docs)]
pub enum ScaleEvent {
    /// Read the aggregate metrics.
    Scrape,
    /// Decide from the scrape taken `scrape_delay` ago.
    Tick,
    /// A node finished provisioning.
    NodeUp { pool: u16, node: u32, generation: u32 },
    /// A replica's weights are loaded.
    Loaded { slot: u32, generation: u32 },
    /// A replica's warm-up is over.
    Warmed { slot: u32, generation: u32 },
}

/// An autoscaling event to hand to the decision sink.
pub(crate) enum Traced {
    Decision(ScaleDecision),
    Replica { time: Micros, slot: u32, pool: u16, phase: Phase },
}

/// What the gateway must do after the autoscaler acted.
#[derive(Default)]
pub(crate) struct Actions {
    /// Autoscaler events to schedule.
    pub schedule: Vec<(Micros, ScaleEvent)>,
    /// Requests taken back from a draining replica (its slot), to route again.
    pub evicted: Vec<(u32, Request)>,
    /// Slots that got a new instance: the gateway resets what it keeps per instance.
    pub started: Vec<u32>,
    /// Whether the set of routable replicas changed.
    pub routable_changed: bool,
    /// Events for the decision trace (only when traced).
    pub traces: Vec<Traced>,
}

/// Running sums the gateway keeps, read at each scrape.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Counters {
    pub arrived: u64,
    pub prompt_tokens: u64,
    pub ended: u64,
    pub met_slo: u64,
    pub first_tokens: u64,
    pub ttft_sum_us: u64,
    /// Requests completed, and their output tokens.
    pub completed: u64,
    pub output_tokens: u64,
    /// Completed requests of two tokens or more, and Σ their time per output token after the first.
    pub tpot_count: u64,
    pub tpot_sum_us: u64,
}

impl Counters {
    /// A request ended (`met`: it met its SLO).
    pub fn on_finish(&mut self, r: &RequestRecord, met: bool) {
        self.ended += 1;
        self.met_slo += u64::from(met);
        if let Some(t) = r.first_token {
            self.first_tokens += 1;
            self.ttft_sum_us += (t - r.arrival).as_us();
        }
        if r.outcome == Outcome::Completed {
            self.completed += 1;
            self.output_tokens += u64::from(r.output_tokens);
            if let (Some(first), Some(last), 2..) = (r.first_token, r.last_token, r.output_tokens) {
                self.tpot_count += 1;
                self.tpot_sum_us += (last - first).as_us() / u64::from(r.output_tokens - 1);
            }
        }
    }
}

/// A decision before it is applied.
struct Decision {
    current: u32,
    ready: u32,
    recommended: u32,
    desired: u32,
    constraint: Constraint,
}

/// Where a new replica goes.
enum Seat {
    /// Pool and node with room.
    Existing(usize, u32),
    /// A new node of this pool.
    NewNode(usize),
}

struct Replica {
    pool: u16,
    node: u32,
    phase: Phase,
    generation: u32,
    decided: Micros,
    routable_since: Option<Micros>,
}

#[derive(Default)]
struct Node {
    live: bool,
    up: bool,
    replicas: u32,
    requested: Micros,
    generation: u32,
}

#[derive(Default)]
struct PoolAccount {
    replicas_started: u32,
    nodes_requested: u32,
    live_nodes: u32,
    replica_us: u64,
    ready_us: u64,
    gpu_us: u64,
}

/// Replicas, nodes, the decision loop and the accounts of one scaling group.
///
/// Replicas, their retired counters and events are indexed by the fleet's
/// instance slot; the group's slots are `owned` (in the order it took
/// them): a new replica takes the first it freed, else a new slot at the
/// fleet's end.
pub(crate) struct Autoscaler {
    cfg: AutoscaleConfig,
    /// The group's pools, in order of preference among equals.
    pools: Vec<PoolConfig>,
    /// The slots the group took, ascending.
    owned: Vec<u32>,
    /// The group's name in decision traces, when the fleet has several groups.
    label: Option<String>,
    policy: Box<dyn AutoscalePolicy>,
    estimators: Vec<TtftEstimator>,
    rng: SimRng,
    replicas: Vec<Option<Replica>>,
    nodes: Vec<Vec<Node>>,
    accounts: Vec<PoolAccount>,
    retired: Vec<InstanceStats>,
    next_generation: u32,
    scrapes: VecDeque<(ScaleMetrics, Traffic)>,
    last_scrape: Option<(Micros, Counters)>,
    latest: ScaleMetrics,
    latest_traffic: Traffic,
    mean_prompt_tokens: f64,
    /// The lowest recommendation of the scale-up window.
    lowest: WindowExtreme<Lowest>,
    /// The highest recommendation of the scale-down window.
    highest: WindowExtreme<Highest>,
    last_change: Option<(Micros, bool)>,
    trace: bool,
    ticks: u64,
    scale_ups: u64,
    scale_downs: u64,
    replicas_added: u64,
    replicas_removed: u64,
    oscillations: u64,
    cold_starts: u64,
    held_waits_us: Samples,
    rerouted: u64,
    peak_replicas: u32,
    timeline: Vec<TimelinePoint>,
}

/// Which extreme a [`WindowExtreme`] keeps.
trait Extreme {
    /// Whether a value `kept` can no longer be the window's extreme once
    /// the `newer` value (which stays in the window longer) is in it.
    fn dominated(kept: u32, newer: u32) -> bool;
}

/// The lowest value (the scale-up window's).
#[derive(Default)]
struct Lowest;

impl Extreme for Lowest {
    fn dominated(kept: u32, newer: u32) -> bool {
        kept >= newer
    }
}

/// The highest value (the scale-down window's).
#[derive(Default)]
struct Highest;

impl Extreme for Highest {
    fn dominated(kept: u32, newer: u32) -> bool {
        kept <= newer
    }
}

/// The extreme of the values of a sliding time window, in O(1) amortised
/// per value: a monotonic queue of the values that may still become the
/// extreme. They are distinct replica counts, so it holds at most
/// `max_replicas + 1` of them however many decisions the window spans.
#[derive(Default)]
struct WindowExtreme<E> {
    kept: VecDeque<(Micros, u32)>,
    extreme: PhantomData<E>,
}

impl<E: Extreme> WindowExtreme<E> {
    /// Adds `value` at `now` (times never decrease) and returns the extreme
    /// of the values added no more than `window` before `now`, it included.
    fn push(&mut self, now: Micros, value: u32, window: Micros) -> u32 {
        while self.kept.back().is_some_and(|&(_, v)| E::dominated(v, value)) {
            self.kept.pop_back();
        }
        self.kept.push_back((now, value));
        while self.kept.front().is_some_and(|&(t, _)| t + window < now) {
            self.kept.pop_front();
        }
        self.kept.front().map_or(value, |&(_, v)| v)
    }
}

impl Autoscaler {
    /// The autoscaler of a group of `pools` and the instances of its initial
    /// replicas (ready at time 0, in pool order, on the initial nodes first),
    /// in slots `first_slot..`. Its delays draw from the seeded stream
    /// `stream`; `label` names it in decision traces. `cfg` must have been
    /// validated against `pools`.
    pub fn new(
        cfg: AutoscaleConfig,
        pools: Vec<PoolConfig>,
        policy: Box<dyn AutoscalePolicy>,
        first_slot: u32,
        (stream, label): (&str, Option<String>),
        trace: bool,
    ) -> (Autoscaler, Vec<Instance>) {
        let estimators = pools.iter().map(|p| TtftEstimator::from_latency_model(p.latency.as_ref())).collect();
        let initial = cfg.initial_replicas;
        let mut s = Autoscaler {
            rng: subsystem_rng(cfg.seed, stream),
            nodes: pools.iter().map(|_| Vec::new()).collect(),
            accounts: pools.iter().map(|_| PoolAccount::default()).collect(),
            cfg,
            pools,
            owned: Vec::new(),
            label,
            policy,
            estimators,
            replicas: (0..first_slot).map(|_| None).collect(),
            retired: vec![InstanceStats::default(); first_slot as usize],
            next_generation: 0,
            scrapes: VecDeque::new(),
            last_scrape: None,
            latest: ScaleMetrics::default(),
            latest_traffic: Traffic::default(),
            mean_prompt_tokens: 0.0,
            lowest: WindowExtreme::default(),
            highest: WindowExtreme::default(),
            last_change: None,
            trace,
            ticks: 0,
            scale_ups: 0,
            scale_downs: 0,
            replicas_added: 0,
            replicas_removed: 0,
            oscillations: 0,
            cold_starts: 0,
            held_waits_us: Samples::default(),
            rerouted: 0,
            peak_replicas: 0,
            timeline: Vec::new(),
        };
        for p in 0..s.pools.len() {
            for _ in 0..s.pools[p].initial_nodes {
                s.request_node(p, Micros::ZERO, true);
            }
        }
        let mut instances = Vec::new();
        for slot in first_slot..first_slot + initial {
            let (pool, node) = match s.seat() {
                Some(Seat::Existing(p, n)) => (p, n),
                Some(Seat::NewNode(p)) => (p, s.request_node(p, Micros::ZERO, true)),
                None => unreachable!("validated: the pools hold max_replicas ≥ initial"),
            };
            s.nodes[pool][node as usize].replicas += 1;
            let generation = s.generation();
            s.replicas.push(Some(Replica {
                pool: pool as u16,
                node,
                phase: Phase::Ready,
                generation,
                decided: Micros::ZERO,
                routable_since: Some(Micros::ZERO),
            }));
            s.retired.push(InstanceStats::default());
            s.accounts[pool].replicas_started += 1;
            s.owned.push(slot);
            instances.push(s.instance(pool, slot));
        }
        s.peak_replicas = initial;
        (s, instances)
    }

    fn generation(&mut self) -> u32 {
        self.next_generation += 1;
        self.next_generation
    }

    fn instance(&self, pool: usize, slot: u32) -> Instance {
        let p = &self.pools[pool];
        Instance::new(slot, p.instance.clone(), p.latency.clone())
            .unwrap_or_else(|e| unreachable!("pool configurations are validated at build: {e}"))
    }

    /// The first events: the first scrape and tick.
    pub fn start(&self, actions: &mut Actions) {
        actions.schedule.push((self.cfg.interval, ScaleEvent::Scrape));
        actions.schedule.push((self.cfg.interval + self.cfg.scrape_delay, ScaleEvent::Tick));
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Name of pool `p`.
    pub fn pool_name(&self, p: u16) -> &str {
        &self.pools[usize::from(p)].name
    }

    /// The pools of the group's slots' replicas, as the fleet numbers them
    /// in `index` (the group's pool `p` is the fleet's `index[p]`): for each
    /// slot the group owns, its current replica's pool, if it has one.
    pub fn slot_pools<'a>(&'a self, index: &'a [usize]) -> impl Iterator<Item = (u32, Option<usize>)> + 'a {
        self.owned.iter().map(move |&s| (s, self.replicas[s as usize].as_ref().map(|r| index[usize::from(r.pool)])))
    }

    /// Requests waiting at the group's replicas.
    fn queued(&self, instances: &[Instance]) -> u32 {
        self.owned.iter().map(|&s| instances[s as usize].queue_depth()).sum()
    }

    fn routable(&self, r: &Replica) -> bool {
        r.phase == Phase::Ready || (r.phase == Phase::Warming && self.cfg.warmup.route_while_warming)
    }

    /// Whether slot `i` holds a replica that takes new requests.
    pub fn accepts(&self, i: usize) -> bool {
        self.replicas.get(i).and_then(Option::as_ref).is_some_and(|r| self.routable(r))
    }

    /// Replicas counted toward the target: alive and not draining.
    fn current(&self) -> u32 {
        self.replicas.iter().flatten().filter(|r| r.phase != Phase::Draining).count() as u32
    }

    /// Slots with a replica, for the fleet's size.
    pub fn alive(&self) -> u32 {
        self.replicas.iter().flatten().count() as u32
    }

    fn trace(&self, actions: &mut Actions, time: Micros, slot: usize, phase: Phase) {
        if self.trace {
            let pool = self.replicas[slot].as_ref().map_or(0, |r| r.pool);
            actions.traces.push(Traced::Replica { time, slot: slot as u32, pool, phase });
        }
    }

    /// Handles one of its events.
    pub fn on_event(&mut self, event: ScaleEvent, now: Micros, fleet: &mut Fleet, held: u32, counters: &Counters, actions: &mut Actions) {
        match event {
            ScaleEvent::Scrape => {
                self.scrape(now, fleet.instances(), held, counters);
                actions.schedule.push((now + self.cfg.interval, ScaleEvent::Scrape));
            }
            ScaleEvent::Tick => {
                self.tick(now, fleet, held, actions);
                actions.schedule.push((now + self.cfg.interval, ScaleEvent::Tick));
            }
            ScaleEvent::NodeUp { pool, node, generation } => {
                let (p, n) = (usize::from(pool), node as usize);
                if !(self.nodes[p][n].live && self.nodes[p][n].generation == generation) {
                    return;
                }
                self.nodes[p][n].up = true;
                for slot in 0..self.replicas.len() {
                    if self.replicas[slot]
                        .as_ref()
                        .is_some_and(|r| r.phase == Phase::Provisioning && usize::from(r.pool) == p && r.node == node)
                    {
                        self.start_loading(slot, now, actions);
                    }
                }
            }
            ScaleEvent::Loaded { slot, generation } => {
                let s = slot as usize;
                let Some(r) = self.replicas[s].as_mut().filter(|r| r.generation == generation && r.phase == Phase::Loading) else {
                    return;
                };
                let warmup = self.cfg.warmup;
                if warmup.duration.0 > Micros::ZERO {
                    r.phase = Phase::Warming;
                    fleet.set_step_slowdown(s, warmup.slowdown);
                    actions.schedule.push((now + warmup.duration.0, ScaleEvent::Warmed { slot, generation }));
                } else {
                    r.phase = Phase::Ready;
                }
                let phase = r.phase;
                self.became(s, now, actions);
                self.trace(actions, now, s, phase);
            }
            ScaleEvent::Warmed { slot, generation } => {
                let s = slot as usize;
                let Some(r) = self.replicas[s].as_mut().filter(|r| r.generation == generation && r.phase == Phase::Warming) else {
                    return;
                };
                r.phase = Phase::Ready;
                fleet.set_step_slowdown(s, 1.0);
                self.became(s, now, actions);
                self.trace(actions, now, s, Phase::Ready);
            }
        }
    }

    /// Records when slot `s` became routable, if it just did.
    fn became(&mut self, s: usize, now: Micros, actions: &mut Actions) {
        let routable = self.replicas[s].as_ref().is_some_and(|r| self.routable(r));
        if let Some(r) = self.replicas[s].as_mut()
            && routable
            && r.routable_since.is_none()
        {
            r.routable_since = Some(now);
            actions.routable_changed = true;
        }
    }

    fn start_loading(&mut self, slot: usize, now: Micros, actions: &mut Actions) {
        let Some(r) = self.replicas[slot].as_mut() else {
            return;
        };
        r.phase = Phase::Loading;
        let (pool, generation) = (usize::from(r.pool), r.generation);
        let delay = self.pools[pool].loading_delay.sample(&mut self.rng);
        actions.schedule.push((now + delay, ScaleEvent::Loaded { slot: slot as u32, generation }));
        self.trace(actions, now, slot, Phase::Loading);
    }

    fn scrape(&mut self, now: Micros, instances: &[Instance], held: u32, c: &Counters) {
        let (mut n, mut kv, mut saturation, mut queued, mut running) = (0u32, 0.0, 0.0, 0u32, 0u32);
        let mut predicted: Option<f64> = None;
        let (prev_at, prev) = self.last_scrape.unwrap_or((Micros::ZERO, Counters::default()));
        let arrived = c.arrived - prev.arrived;
        if arrived > 0 {
            self.mean_prompt_tokens = (c.prompt_tokens - prev.prompt_tokens) as f64 / arrived as f64;
        }
        for (i, r) in self.replicas.iter().enumerate() {
            let Some(r) = r.as_ref().filter(|r| self.routable(r)) else {
                continue;
            };
            let inst = &instances[i];
            n += 1;
            let usage = inst.kv().usage();
            kv += usage;
            saturation += usage.max(f64::from(inst.batch_size()) / f64::from(inst.config().scheduler.max_num_seqs.max(1)));
            queued += inst.queue_depth();
            running += inst.batch_size();
            let est = self.estimators[usize::from(r.pool)].estimate_us(inst.queue_depth(), self.mean_prompt_tokens.round() as u32) / 1e3;
            predicted = Some(predicted.map_or(est, |p| p.min(est)));
        }
        let queued_all = self.queued(instances);
        let per = |x: f64| if n > 0 { x / f64::from(n) } else { 0.0 };
        let dt = (now - prev_at).as_secs_f64();
        let ended = c.ended - prev.ended;
        let first = c.first_tokens - prev.first_tokens;
        let metrics = ScaleMetrics {
            at: now,
            saturation: per(saturation),
            kv_utilization: per(kv),
            queue_depth: per(f64::from(queued)),
            running: per(f64::from(running)),
            held,
            waiting: queued_all + held,
            request_rate: if dt > 0.0 { arrived as f64 / dt } else { 0.0 },
            slo_attainment: (ended > 0).then(|| (c.met_slo - prev.met_slo) as f64 / ended as f64),
            ttft_mean_ms: (first > 0).then(|| (c.ttft_sum_us - prev.ttft_sum_us) as f64 / first as f64 / US_PER_MS),
            predicted_ttft_ms: predicted,
        };
        let completed = c.completed - prev.completed;
        let tpots = c.tpot_count - prev.tpot_count;
        let traffic = Traffic {
            interval_s: dt,
            requests: arrived,
            prompt_tokens_mean: self.mean_prompt_tokens,
            output_tokens_mean: (completed > 0).then(|| (c.output_tokens - prev.output_tokens) as f64 / completed as f64),
            ttft_mean_ms: metrics.ttft_mean_ms,
            itl_mean_ms: (tpots > 0).then(|| (c.tpot_sum_us - prev.tpot_sum_us) as f64 / tpots as f64 / US_PER_MS),
        };
        self.last_scrape = Some((now, *c));
        self.scrapes.push_back((metrics, traffic));
    }

    fn tick(&mut self, now: Micros, fleet: &mut Fleet, held: u32, actions: &mut Actions) {
        let visible = now - self.cfg.scrape_delay;
        while self.scrapes.front().is_some_and(|(m, _)| m.at <= visible) {
            (self.latest, self.latest_traffic) = self.scrapes.pop_front().unwrap_or_default();
        }
        let current = self.current();
        let ready = self.replicas.iter().flatten().filter(|r| self.routable(r)).count() as u32;
        let (min, max) = (self.cfg.min_replicas, self.cfg.max_replicas);
        let cx = ScaleContext { current, ready, min, max, metrics: self.latest, traffic: self.latest_traffic, tick: self.ticks };
        self.ticks += 1;
        let recommended = self.policy.evaluate(&cx);
        let mut constraint = Constraint::None;
        let mut bounded = recommended.clamp(min, max);
        if bounded != recommended {
            constraint = Constraint::Bounds;
        }
        if held > 0 && bounded == 0 {
            bounded = 1;
            constraint = Constraint::Activation;
        }
        // Kubernetes HPA's stabilisation: up to the lowest recommendation of
        // the up window, down to the highest of the down window.
        let up = self.lowest.push(now, bounded, self.cfg.scale_up_window);
        let down = self.highest.push(now, bounded, self.cfg.scale_down_window);
        let mut desired = current.max(up).min(down);
        if desired != bounded && constraint == Constraint::None {
            constraint = Constraint::Stabilized;
        }
        if desired != current && self.last_change.is_some_and(|(t, _)| now - t < self.cfg.cooldown) {
            desired = current;
            constraint = Constraint::Cooldown;
        }
        let decision = Decision { current, ready, recommended, desired, constraint };
        self.decide(now, decision, fleet, actions);
        self.record(now, fleet.instances(), desired, held);
    }

    /// Applies a decision and traces it before the transitions it causes.
    fn decide(&mut self, now: Micros, d: Decision, fleet: &mut Fleet, actions: &mut Actions) {
        let mark = actions.traces.len();
        let action = self.apply(d.desired, now, fleet, actions);
        let added = if let ScaleAction::Up(n) = action { n } else { 0 };
        let short = d.desired > d.current && added < d.desired - d.current;
        if self.trace {
            let decision = ScaleDecision {
                time: now,
                group: self.label.clone(),
                policy: self.cfg.policy.name(),
                current: d.current,
                ready: d.ready,
                recommended: d.recommended,
                desired: d.desired,
                action,
                constraint: if short { Constraint::Capacity } else { d.constraint },
                metrics: self.latest,
            };
            actions.traces.insert(mark, Traced::Decision(decision));
        }
    }

    /// A request is waiting at the gateway with no routable replica; with
    /// none coming up either, one is started now (scale from zero).
    pub fn activate(&mut self, now: Micros, fleet: &mut Fleet, actions: &mut Actions) {
        if self.current() > 0 {
            return;
        }
        self.cold_starts += 1;
        let decision = Decision { current: 0, ready: 0, recommended: 1, desired: 1, constraint: Constraint::Activation };
        self.decide(now, decision, fleet, actions);
    }

    /// A held request was routed after waiting `wait`.
    pub fn on_released(&mut self, wait: Micros) {
        self.held_waits_us.push(wait.as_us() as f64);
    }

    /// Whether removing a replica aborts its running requests (`drain:
    /// immediate`), the one drain under which a fleet can lose all progress.
    pub fn aborts_running(&self) -> bool {
        self.cfg.drain == DrainPolicy::Immediate
    }

    /// Requests were taken back from a draining replica.
    pub fn on_rerouted(&mut self, n: usize) {
        self.rerouted += n as u64;
    }

    /// Moves the counted replicas to `desired`; returns what was done.
    fn apply(&mut self, desired: u32, now: Micros, fleet: &mut Fleet, actions: &mut Actions) -> ScaleAction {
        let current = self.current();
        let action = if desired > current {
            let added = (0..desired - current).take_while(|_| self.add_replica(now, fleet, actions)).count() as u32;
            if added == 0 { ScaleAction::None } else { ScaleAction::Up(added) }
        } else if desired < current {
            for _ in 0..current - desired {
                self.remove_replica(now, fleet, actions);
            }
            ScaleAction::Down(current - desired)
        } else {
            ScaleAction::None
        };
        let up = match action {
            ScaleAction::Up(n) => {
                self.scale_ups += 1;
                self.replicas_added += u64::from(n);
                true
            }
            ScaleAction::Down(n) => {
                self.scale_downs += 1;
                self.replicas_removed += u64::from(n);
                false
            }
            ScaleAction::None => return action,
        };
        if let Some((t, was_up)) = self.last_change
            && was_up != up
            && now - t <= self.cfg.oscillation_window
        {
            self.oscillations += 1;
        }
        self.last_change = Some((now, up));
        self.peak_replicas = self.peak_replicas.max(self.alive());
        action
    }

    /// Where one more replica goes: a live node with room (up ones first,
    /// then the cheapest pool), else a new node of the cheapest pool with
    /// room; ties go to the earlier pool. `None` when every pool is full.
    fn seat(&self) -> Option<Seat> {
        let cost = |p: usize| self.pools[p].replica_cost_per_hour();
        let mut best: Option<(bool, f64, usize, u32)> = None;
        for (p, nodes) in self.nodes.iter().enumerate() {
            let per_node = self.pools[p].replicas_per_node();
            if let Some((n, node)) = nodes.iter().enumerate().filter(|(_, n)| n.live && n.replicas < per_node).min_by_key(|(_, n)| !n.up) {
                let key = (!node.up, cost(p), p, n as u32);
                if best.is_none_or(|b| (key.0, key.1) < (b.0, b.1)) {
                    best = Some(key);
                }
            }
        }
        if let Some((_, _, p, n)) = best {
            return Some(Seat::Existing(p, n));
        }
        (0..self.pools.len())
            .filter(|&p| self.accounts[p].live_nodes < self.pools[p].max_nodes)
            .min_by(|&a, &b| cost(a).total_cmp(&cost(b)).then(a.cmp(&b)))
            .map(Seat::NewNode)
    }

    /// Requests a node in pool `p`; returns its index.
    fn request_node(&mut self, p: usize, now: Micros, up: bool) -> u32 {
        let generation = self.generation();
        let nodes = &mut self.nodes[p];
        let n = nodes.iter().position(|n| !n.live).unwrap_or_else(|| {
            nodes.push(Node::default());
            nodes.len() - 1
        });
        nodes[n] = Node { live: true, up, replicas: 0, requested: now, generation };
        let a = &mut self.accounts[p];
        a.live_nodes += 1;
        a.nodes_requested += 1;
        n as u32
    }

    fn release_node(&mut self, p: usize, n: usize, now: Micros) {
        let node = &mut self.nodes[p][n];
        node.live = false;
        let a = &mut self.accounts[p];
        a.live_nodes -= 1;
        a.gpu_us += (now - node.requested).as_us() * u64::from(self.pools[p].gpus_per_node);
    }

    fn add_replica(&mut self, now: Micros, fleet: &mut Fleet, actions: &mut Actions) -> bool {
        let (pool, node) = match self.seat() {
            Some(Seat::Existing(p, n)) => (p, n),
            Some(Seat::NewNode(p)) => {
                let n = self.request_node(p, now, false);
                let generation = self.nodes[p][n as usize].generation;
                let delay = self.pools[p].provisioning_delay.sample(&mut self.rng);
                actions.schedule.push((now + delay, ScaleEvent::NodeUp { pool: p as u16, node: n, generation }));
                (p, n)
            }
            None => return false,
        };
        // A slot the group freed, whose instance ran out of work (a request delivered as it retired runs on).
        let freed = self.owned.iter().map(|&s| s as usize).find(|&s| self.replicas[s].is_none() && fleet.instances()[s].is_idle());
        let slot = freed.unwrap_or(fleet.instances().len());
        let instance = self.instance(pool, slot as u32);
        if freed.is_none() {
            self.replicas.resize_with(slot + 1, || None);
            self.retired.resize_with(slot + 1, InstanceStats::default);
            self.owned.push(slot as u32);
            fleet.add(instance);
        } else {
            let old = fleet.replace(slot, instance);
            self.retired[slot].absorb(old.stats());
        }
        actions.started.push(slot as u32);
        self.nodes[pool][node as usize].replicas += 1;
        self.accounts[pool].replicas_started += 1;
        let generation = self.generation();
        let up = self.nodes[pool][node as usize].up;
        self.replicas[slot] =
            Some(Replica { pool: pool as u16, node, phase: Phase::Provisioning, generation, decided: now, routable_since: None });
        if up {
            self.start_loading(slot, now, actions);
        } else {
            self.trace(actions, now, slot, Phase::Provisioning);
        }
        true
    }

    /// Removes one counted replica: the newest of those not ready yet, else
    /// a ready one from the most expensive pool with the least in flight.
    fn remove_replica(&mut self, now: Micros, fleet: &mut Fleet, actions: &mut Actions) {
        let instances = fleet.instances();
        let victim = self
            .replicas
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().filter(|r| r.phase != Phase::Draining).map(|r| (i, r)))
            .max_by(|(i, a), (j, b)| {
                let coming = |r: &Replica| {
                    matches!(r.phase, Phase::Provisioning | Phase::Loading) || (r.phase == Phase::Warming && r.routable_since.is_none())
                };
                coming(a)
                    .cmp(&coming(b))
                    .then_with(|| if coming(a) { a.generation.cmp(&b.generation) } else { std::cmp::Ordering::Equal })
                    .then_with(|| {
                        self.pools[usize::from(a.pool)]
                            .replica_cost_per_hour()
                            .total_cmp(&self.pools[usize::from(b.pool)].replica_cost_per_hour())
                    })
                    .then_with(|| instances[*j].in_flight().cmp(&instances[*i].in_flight()))
                    .then_with(|| i.cmp(j))
            })
            .map(|(i, _)| i);
        let Some(slot) = victim else { return };
        let Some(r) = self.replicas[slot].as_mut() else {
            return;
        };
        let was_routable = r.routable_since.is_some();
        if !was_routable {
            // Not serving yet: cancelled outright.
            self.retire(slot, now, fleet, actions);
            return;
        }
        r.phase = Phase::Draining;
        actions.routable_changed = true;
        self.trace(actions, now, slot, Phase::Draining);
        let evict = match self.cfg.drain {
            DrainPolicy::Wait => None,
            DrainPolicy::Immediate => Some(Evict::All),
            DrainPolicy::Redirect => Some(Evict::Unstarted),
        };
        if let Some(which) = evict {
            let mut taken = Vec::new();
            fleet.evict(slot, which, &mut taken);
            actions.evicted.extend(taken.into_iter().map(|req| (slot as u32, req)));
        }
        self.settle(slot, now, fleet, actions);
    }

    /// Slot `i` just did something: a draining replica with nothing left is gone.
    pub fn settle(&mut self, i: usize, now: Micros, fleet: &mut Fleet, actions: &mut Actions) {
        if self.replicas.get(i).and_then(Option::as_ref).is_some_and(|r| r.phase == Phase::Draining) && fleet.instances()[i].is_idle() {
            self.retire(i, now, fleet, actions);
        }
    }

    fn retire(&mut self, slot: usize, now: Micros, fleet: &mut Fleet, actions: &mut Actions) {
        self.trace(actions, now, slot, Phase::Gone);
        let Some(r) = self.replicas[slot].take() else {
            return;
        };
        fleet.set_step_slowdown(slot, 1.0);
        let p = usize::from(r.pool);
        let a = &mut self.accounts[p];
        a.replica_us += (now - r.decided).as_us();
        if let Some(since) = r.routable_since {
            a.ready_us += (now - since).as_us();
        }
        let node = &mut self.nodes[p][r.node as usize];
        node.replicas -= 1;
        if node.replicas == 0 && self.accounts[p].live_nodes > self.pools[p].min_nodes {
            self.release_node(p, r.node as usize, now);
        }
    }

    fn record(&mut self, now: Micros, instances: &[Instance], desired: u32, held: u32) {
        let (mut starting, mut ready, mut draining) = (0, 0, 0);
        for r in self.replicas.iter().flatten() {
            match r.phase {
                Phase::Draining => draining += 1,
                _ if self.routable(r) => ready += 1,
                _ => starting += 1,
            }
        }
        let m = &self.latest;
        self.timeline.push(TimelinePoint {
            t_s: now.as_secs_f64(),
            starting,
            ready,
            draining,
            desired,
            nodes: self.accounts.iter().map(|a| a.live_nodes).sum(),
            request_rate: m.request_rate,
            saturation: m.saturation,
            kv_utilization: m.kv_utilization,
            waiting: self.queued(instances) + held,
            ttft_mean_ms: m.ttft_mean_ms,
        });
    }

    /// Scale oscillations so far.
    pub fn oscillations(&self) -> u64 {
        self.oscillations
    }

    /// Stats of the replicas that held slot `i` before its current one.
    pub fn retired(&self, i: usize) -> Option<&InstanceStats> {
        self.retired.get(i)
    }

    /// The run's report, counting live replicas and nodes up to `end`.
    pub fn report(&self, end: Micros, output_tokens: u64, met_slo: u64) -> AutoscalingReport {
        let mut pools = Vec::new();
        for (p, pool) in self.pools.iter().enumerate() {
            let a = &self.accounts[p];
            let (mut replica_us, mut ready_us, mut gpu_us) = (a.replica_us, a.ready_us, a.gpu_us);
            for r in self.replicas.iter().flatten().filter(|r| usize::from(r.pool) == p) {
                replica_us += (end - r.decided).as_us();
                ready_us += r.routable_since.map_or(0, |s| (end - s).as_us());
            }
            for n in self.nodes[p].iter().filter(|n| n.live) {
                gpu_us += (end - n.requested).as_us() * u64::from(pool.gpus_per_node);
            }
            let gpu_hours = gpu_us as f64 / 3.6e9;
            pools.push(PoolReport {
                name: pool.name.clone(),
                hardware: pool.hardware.clone(),
                gpus_per_replica: pool.gpus_per_replica,
                num_gpu_blocks: pool.instance.num_gpu_blocks,
                replicas_started: a.replicas_started,
                nodes_requested: a.nodes_requested,
                replica_seconds: replica_us as f64 / 1e6,
                ready_replica_seconds: ready_us as f64 / 1e6,
                gpu_hours,
                cost: pool.cost_per_gpu_hour.map(|c| c * gpu_hours),
            });
        }
        let priced = pools.iter().any(|p| p.cost.is_some());
        let cost = priced.then(|| pools.iter().filter_map(|p| p.cost).sum::<f64>());
        let per = |x: f64| cost.filter(|&c| c > 0.0).map(|c| x / c);
        AutoscalingReport {
            policy: self.cfg.policy.name(),
            params: self.cfg.policy.params_json(),
            min_replicas: self.cfg.min_replicas,
            max_replicas: self.cfg.max_replicas,
            decisions: self.ticks,
            scale_ups: self.scale_ups,
            scale_downs: self.scale_downs,
            replicas_added: self.replicas_added,
            replicas_removed: self.replicas_removed,
            oscillations: self.oscillations,
            cold_starts: self.cold_starts,
            held_requests: self.held_waits_us.len() as u64,
            held_wait_ms: (!self.held_waits_us.is_empty()).then(|| self.held_waits_us.summary(US_PER_MS)),
            rerouted_requests: self.rerouted,
            peak_replicas: self.peak_replicas,
            replica_seconds: pools.iter().map(|p| p.replica_seconds).sum(),
            gpu_hours: pools.iter().map(|p| p.gpu_hours).sum(),
            cost,
            cost_per_million_output_tokens: cost.filter(|_| output_tokens > 0).map(|c| c / (output_tokens as f64 / 1e6)),
            goodput_per_dollar: per(met_slo as f64),
            pools,
            timeline: self.timeline.clone(),
            groups: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The stabilisation windows' extremes equal the brute-force min and
        /// max over every recommendation of the window, and the queues stay
        /// within the distinct values.
        #[test]
        fn window_extremes_match_a_scan(steps in prop::collection::vec((0u64..5_000, 0u32..12), 1..300), window_us in 0u64..20_000) {
            let window = Micros(window_us);
            let (mut lowest, mut highest) = (WindowExtreme::<Lowest>::default(), WindowExtreme::<Highest>::default());
            let mut all: Vec<(Micros, u32)> = Vec::new();
            let mut now = Micros::ZERO;
            for (dt, value) in steps {
                now += Micros(dt);
                all.push((now, value));
                let within = all.iter().filter(|&&(t, _)| t + window >= now).map(|&(_, v)| v);
                prop_assert_eq!(lowest.push(now, value, window), within.clone().min().unwrap());
                prop_assert_eq!(highest.push(now, value, window), within.max().unwrap());
                prop_assert!(lowest.kept.len() <= 12 && highest.kept.len() <= 12);
            }
        }
    }
}
