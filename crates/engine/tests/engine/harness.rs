//! A test driver that checks invariants after every event.

use std::collections::BTreeMap;
use std::sync::Arc;

use blis_engine::instance::{Instance, Observer, QueueChange, QueueEvent, StepEvent, TokenEvent};
use blis_engine::kv::events::{GPU, KvEvent, KvEventBatch};
use blis_engine::latency::LatencyModel;
use blis_engine::request::{Outcome, Request, RequestId, RequestRecord};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;

/// Everything observed during a run, with per-event checks.
#[derive(Default)]
pub struct Recorder {
    pub records: BTreeMap<RequestId, RequestRecord>,
    pub tokens: BTreeMap<RequestId, Vec<Micros>>,
    pub steps: Vec<(Micros, Micros, usize, u64)>,
    /// Every wait-queue change, in order.
    pub queue: Vec<(RequestId, Micros, QueueChange)>,
    /// Requests in the wait queue according to the queue events.
    pub waiting: BTreeMap<RequestId, Micros>,
    pub last_time: Micros,
    /// Per medium and content hash, the blocks the KV events say are cached.
    pub kv_blocks: BTreeMap<(&'static str, u64), u32>,
    /// KV event batches seen.
    pub kv_batches: u64,
    max_num_seqs: usize,
    max_tokens: u64,
}

impl Observer for Recorder {
    fn on_finish(&mut self, r: &RequestRecord) {
        assert!(self.records.insert(r.id, r.clone()).is_none(), "request {:?} finished twice", r.id);
        // Its life in order: it reaches the engine, then the scheduler, then
        // a step; a request is queued once it reached the engine.
        let times = [Some(r.arrival), r.enqueued, r.queued, r.first_scheduled];
        let known: Vec<Micros> = times.iter().flatten().copied().collect();
        assert!(known.windows(2).all(|w| w[0] <= w[1]), "{:?}: arrival, enqueued, queued, first scheduled out of order: {times:?}", r.id);
        assert!(r.queued.is_none() || r.enqueued.is_some(), "{:?} queued before reaching the engine", r.id);
        assert!(r.first_scheduled.is_none() || r.queued.is_some(), "{:?} scheduled without being queued", r.id);
        // Only a client timeout ends a request while it waits.
        if self.waiting.remove(&r.id).is_some() {
            assert_eq!(r.outcome, Outcome::TimedOut, "{:?} finished while waiting", r.id);
        }
    }
    fn on_queue(&mut self, e: &QueueEvent) {
        match e.change {
            QueueChange::Enqueued => assert!(self.waiting.insert(e.id, e.time).is_none(), "{:?} enqueued twice", e.id),
            QueueChange::Scheduled => {
                let since = self.waiting.remove(&e.id).unwrap_or_else(|| panic!("{:?} scheduled without waiting", e.id));
                assert!(since <= e.time);
            }
        }
        self.queue.push((e.id, e.time, e.change));
    }
    fn on_token(&mut self, t: &TokenEvent) {
        let v = self.tokens.entry(t.id).or_default();
        assert_eq!(t.index as usize, v.len() + 1, "tokens of {:?} out of order", t.id);
        if let Some(&prev) = v.last() {
            assert!(t.time >= prev);
            assert_eq!(t.gap, Some(t.time - prev));
        }
        v.push(t.time);
    }
    fn on_step(&mut self, s: &StepEvent<'_>) {
        let tokens: u64 = s.batch.entries.iter().map(|e| u64::from(e.new_tokens)).sum();
        assert!(s.batch.entries.len() <= self.max_num_seqs, "seat limit exceeded: {}", s.batch.entries.len());
        assert!(tokens <= self.max_tokens, "token budget exceeded: {tokens} > {}", self.max_tokens);
        assert!(s.batch.entries.iter().all(|e| e.new_tokens >= 1));
        assert_eq!(s.requests.len(), s.batch.entries.len(), "one request per batch entry");
        let mut ids = s.requests.to_vec();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), s.requests.len(), "a request twice in one step");
        assert!(s.requests.iter().all(|id| !self.records.contains_key(id)), "a finished request in a step");
        self.steps.push((s.start, s.duration, s.batch.entries.len(), tokens));
    }
    /// A subscriber's view: stored blocks are added, removed ones must have
    /// been stored; a stored run carries its tokens and chains to its parent.
    fn on_kv_events(&mut self, b: &KvEventBatch<'_>) {
        assert!(b.time <= self.last_time || self.last_time == Micros::ZERO, "KV events from the future");
        self.kv_batches += 1;
        for e in b.events {
            match e {
                KvEvent::BlockStored { block_hashes, parent_block_hash, token_ids, block_size, medium } => {
                    assert!(!block_hashes.is_empty());
                    if *medium == GPU {
                        assert_eq!(token_ids.len(), block_hashes.len() * *block_size as usize, "tokens of a stored run");
                    } else {
                        assert!(token_ids.is_empty() && parent_block_hash.is_none());
                    }
                    for &h in block_hashes {
                        *self.kv_blocks.entry((medium, h)).or_default() += 1;
                    }
                }
                KvEvent::BlockRemoved { block_hashes, medium } => {
                    for &h in block_hashes {
                        let n = self
                            .kv_blocks
                            .get_mut(&(medium, h))
                            .unwrap_or_else(|| panic!("{medium} block {h:x} removed before it was stored"));
                        *n -= 1;
                        if *n == 0 {
                            self.kv_blocks.remove(&(medium, h));
                        }
                    }
                }
                KvEvent::AllBlocksCleared => self.kv_blocks.retain(|(m, _), _| *m != GPU),
            }
        }
    }
}

/// Outcome of a checked run.
pub struct Checked {
    pub rec: Recorder,
    pub injected: u64,
    pub queued: u32,
    pub running: u32,
    pub instance: Instance,
}

/// Runs `requests` (arrival-ordered) on a fresh instance, checking the KV
/// cache and request accounting after every event and clock monotonicity
/// throughout. Stops at `horizon` if given.
pub fn run_checked(cfg: InstanceConfig, model: Arc<dyn LatencyModel>, requests: Vec<Request>, horizon: Option<Micros>) -> Checked {
    run_checked_with(cfg, model, requests, horizon, |inst, req, t, rec| inst.inject(req, t, rec))
}

/// [`run_checked`] handing each request to the instance with `inject`.
pub fn run_checked_with(
    cfg: InstanceConfig,
    model: Arc<dyn LatencyModel>,
    requests: Vec<Request>,
    horizon: Option<Micros>,
    mut inject: impl FnMut(&mut Instance, Request, Micros, &mut Recorder),
) -> Checked {
    let mut inst = Instance::new(0, cfg.clone(), model).expect("valid config");
    let mut rec = Recorder {
        max_num_seqs: cfg.scheduler.max_num_seqs as usize,
        max_tokens: u64::from(cfg.scheduler.max_num_batched_tokens),
        ..Default::default()
    };
    let limit = horizon.unwrap_or(Micros::MAX);
    let mut pending = requests.into_iter().peekable();
    let mut injected = 0;
    // A run of these sizes ends within this many events; more means a livelock.
    let mut events_left = 1_000_000u32;
    loop {
        events_left = events_left.checked_sub(1).expect("the run does not end: a livelock");
        let next_inst = inst.next_event().map(|k| k.time);
        let next_arr = pending.peek().map(|r| r.arrival);
        let t = match (next_arr, next_inst) {
            (None, None) => break,
            (Some(a), Some(i)) => a.min(i),
            (Some(a), None) => a,
            (None, Some(i)) => i,
        };
        if t > limit {
            break;
        }
        assert!(t >= rec.last_time, "clock went backwards: {:?} -> {:?}", rec.last_time, t);
        rec.last_time = t;
        if next_arr == Some(t) {
            injected += 1;
            inject(&mut inst, pending.next().unwrap(), t, &mut rec);
        } else {
            inst.process_next(&mut rec);
        }
        inst.assert_consistent();
        // An instance holding no request has nothing left to do: no step, and
        // no deadline of a request that already ended (it would move the
        // clock, and the end of the run, past the last thing that happened).
        assert!(!inst.is_idle() || inst.next_event().is_none(), "idle instance with a pending event at {:?}", inst.next_event());
        // The queue events account for exactly the requests in the wait queue
        // (queue_depth also counts requests still in their arrival delay).
        assert!(rec.waiting.len() as u32 <= inst.queue_depth());
        assert_eq!(rec.waiting.len(), inst.waiting_priorities().count(), "queue events disagree with the wait queue");
    }
    if cfg.kv_events && horizon.is_none() {
        // Every change was published: the events describe the GPU cache exactly.
        let gpu: Vec<(u64, u32)> = rec.kv_blocks.iter().filter(|((m, _), _)| *m == GPU).map(|((_, h), &n)| (*h, n)).collect();
        assert_eq!(gpu.iter().map(|&(_, n)| u64::from(n)).sum::<u64>(), inst.kv().hashed_blocks(), "KV events disagree with the cache");
        assert!(gpu.iter().all(|&(h, _)| inst.kv().cached_block(h).is_some()), "an evented block is not in the cache");
    }
    let (queued, running) = inst.unfinished();
    Checked { rec, injected, queued, running, instance: inst }
}

impl Checked {
    /// injected = completed + queued + running + dropped + timed out.
    pub fn assert_conservation(&self) {
        let finished = self.rec.records.len() as u64;
        assert_eq!(self.injected, finished + u64::from(self.queued) + u64::from(self.running), "request conservation");
    }

    pub fn completed(&self) -> impl Iterator<Item = &RequestRecord> {
        self.rec.records.values().filter(|r| r.outcome == Outcome::Completed)
    }
}
