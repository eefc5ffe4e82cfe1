//! One serving instance: wait queue, running batch, KV cache, scheduler step
//! and latency model, driven by its own event queue.
//!
//! The step mirrors vLLM v1's `Scheduler.schedule()` (vLLM 0.9–0.11,
//! `vllm/v1/core/sched/scheduler.py`): "there is no decoding phase nor prefill
//! phase" — each request has `num_computed_tokens` and `num_tokens`, one token
//! budget is spent first on running requests (in order; a decode takes one
//! token, an unfinished prefill continues), then on waiting requests while the
//! budget and `max_num_seqs` allow. When KV allocation fails the victim
//! (the tail of the running list under FCFS) is preempted, freed and returned
//! to the wait queue to recompute; a step that preempted admits nobody. A
//! request whose every token is computed at the end of a step samples one
//! output token. With `async_scheduling` (vLLM's `AsyncScheduler` with
//! `step_with_batch_queue`), the step starting at a boundary was formed when
//! the previous step started, so requests enqueued during a step can join
//! only the step after next.
//!
//! An instance owns its events: the arrival-to-queue hand-off, the step
//! boundary, and client timeouts. A driver (a single-instance run or the
//! cluster) interleaves instances and workload by asking each for
//! [`Instance::next_event`] and calling [`Instance::process_next`].

use std::collections::VecDeque;
use std::sync::Arc;

use crate::event::{EventClass, EventKey, EventQueue};
use crate::kv::events::{self, CacheChange, KvEvent, KvEventBatch};
use crate::kv::offload::{LoadTicket, OffloadStats, OffloadTiers, PrivateRun};
use crate::kv::transfer::{KvTransferStats, Link};
use crate::kv::{BlockTable, KvCache};
use crate::latency::{BatchEntry, InstanceLoad, LatencyModel, QueueingInput, StepBatch};
use crate::request::{DropReason, Outcome, PromptHashMemo, Request, RequestId, RequestMeta, RequestRecord, TokenSeq, extend_block_hashes};
use crate::scheduler::{InstanceConfig, InstanceConfigError, PreemptionVictim, WaitKey, WaitQueue};
use crate::time::Micros;
use crate::warmup::MoeKernelCache;

/// One output token reaching the API.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct TokenEvent {
    /// The request.
    pub id: RequestId,
    /// Its labels (for per-group breakdowns).
    pub meta: RequestMeta,
    /// Instance that produced the token.
    pub instance: u32,
    /// 1-based index of the token within the request's output.
    pub index: u32,
    /// When it reaches the API.
    pub time: Micros,
    /// Time since the request's previous token (None for the first token).
    pub gap: Option<Micros>,
}

/// One completed scheduler step.
#[derive(Copy, Clone, Debug)]
pub struct StepEvent<'a> {
    /// Instance id.
    pub instance: u32,
    /// When the step started.
    pub start: Micros,
    /// Its duration from the latency model.
    pub duration: Micros,
    /// What it contained.
    pub batch: StepBatch<'a>,
    /// The request of each of `batch.entries`, in the same order.
    pub requests: &'a [RequestId],
}

/// How a request's membership of the wait queue changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum QueueChange {
    /// It entered the wait queue: after the arrival-to-queue delay, or after a preemption.
    Enqueued,
    /// It left the wait queue to run: first scheduling, or resumption after a preemption.
    Scheduled,
}

/// A request entering or leaving an instance's wait queue. A request that
/// ends while waiting (client timeout) leaves without a `Scheduled` event;
/// its [`Observer::on_finish`] follows.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct QueueEvent {
    /// The request.
    pub id: RequestId,
    /// Its labels.
    pub meta: RequestMeta,
    /// Instance id.
    pub instance: u32,
    /// When it happened.
    pub time: Micros,
    /// What happened.
    pub change: QueueChange,
}

/// Which requests [`Instance::evict`] takes away from an instance.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Evict {
    /// Every request: running ones lose their progress and recompute wherever they go next.
    All,
    /// Requests that have not started running: arriving, or in the wait
    /// queue (preempted ones included, which restart anyway).
    Unstarted,
}

/// Receives what happens inside instances. Implementations must not assume
/// anything about wall-clock time; they are called in simulated-time order.
pub trait Observer {
    /// A request ended (completed, dropped or timed out): called exactly once per request.
    fn on_finish(&mut self, record: &RequestRecord);
    /// An output token reached the API.
    fn on_token(&mut self, _token: &TokenEvent) {}
    /// Whether [`Observer::on_token`] does anything (default `true`). An
    /// instance makes no token calls to an observer answering `false`, and an
    /// observer that forwards events to others may skip the token calls of
    /// those answering `false` — one call per token is most of what an
    /// observer costs. The answer must not change while the observer is in use.
    fn observes_tokens(&self) -> bool {
        true
    }
    /// A step completed.
    fn on_step(&mut self, _step: &StepEvent<'_>) {}
    /// A request entered or left the wait queue. The requests a step takes
    /// from the queue are reported together, after the step is formed, so an
    /// observer sees the queue as the step left it (what anomaly detection
    /// needs to tell a priority inversion from requests admitted together).
    fn on_queue(&mut self, _event: &QueueEvent) {}
    /// KV-cache events of one instance, once per step, when the instance
    /// records them ([`InstanceConfig::kv_events`]).
    fn on_kv_events(&mut self, _batch: &KvEventBatch<'_>) {}
    /// A request whose prompt a prefill instance computed finished pulling
    /// its KV onto `instance` (P/D): the prefill side may let go of it.
    fn on_kv_pulled(&mut self, _id: RequestId, _instance: u32) {}
}

/// Fans callbacks out to several observers; tokens only to those that
/// observe them.
pub struct Fanout<'a> {
    observers: Vec<&'a mut dyn Observer>,
    observes_tokens: Vec<bool>,
}

impl<'a> Fanout<'a> {
    /// Fans out to `observers`, in order.
    pub fn new(observers: Vec<&'a mut dyn Observer>) -> Fanout<'a> {
        let observes_tokens = observers.iter().map(|o| o.observes_tokens()).collect();
        Fanout { observers, observes_tokens }
    }
}

impl Observer for Fanout<'_> {
    fn on_finish(&mut self, record: &RequestRecord) {
        for o in &mut self.observers {
            o.on_finish(record);
        }
    }
    fn on_token(&mut self, token: &TokenEvent) {
        for (o, _) in self.observers.iter_mut().zip(&self.observes_tokens).filter(|(_, t)| **t) {
            o.on_token(token);
        }
    }
    fn observes_tokens(&self) -> bool {
        self.observes_tokens.contains(&true)
    }
    fn on_step(&mut self, step: &StepEvent<'_>) {
        for o in &mut self.observers {
            o.on_step(step);
        }
    }
    fn on_queue(&mut self, event: &QueueEvent) {
        for o in &mut self.observers {
            o.on_queue(event);
        }
    }
    fn on_kv_events(&mut self, batch: &KvEventBatch<'_>) {
        for o in &mut self.observers {
            o.on_kv_events(batch);
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Status {
    /// Between reaching the instance and entering the wait queue.
    Arriving,
    /// Enqueued while a step ran under async scheduling: not yet visible to
    /// the scheduler, which already formed the next step.
    Incoming,
    Waiting,
    Running,
    /// Out of the wait queue while its prefix loads from the CPU tier
    /// (vLLM's `WAITING_FOR_REMOTE_KVS`).
    Loading,
    /// Its prefix landed: it waits, holding the blocks for all its tokens,
    /// ahead of the wait queue.
    Landed,
    /// Taken away by [`Instance::evict`] while its step, arrival or load was
    /// in flight: released silently when that completes.
    Moved,
    /// A slot no request holds.
    Free,
}

/// A request on the instance, laid out for the step loop, which visits every
/// running request at every step: what a decode step reads or writes lies in
/// the first cache line (the progress fields, with copies of the request's
/// length, output budget and id, and the room its blocks leave); the block
/// table, in the second, is read when the request needs a block, and the
/// rest, the request itself among it, about once per request. With
/// many running requests, or many instances, they do not stay in the L1
/// cache between two steps of one instance, so the lines a step touches per
/// request are what it pays.
#[repr(C, align(64))]
struct Live {
    num_computed: u32,
    num_output: u32,
    /// `req.prompt_tokens()`, `req.max_output_tokens` and `req.id` (below),
    /// copied beside the progress fields: `req` does not change while the
    /// slot holds it.
    prompt_tokens: u32,
    max_output_tokens: u32,
    /// Tokens past this are the request's own: see `cacheable_tokens`.
    cacheable_upto: u32,
    /// Tokens its last allocation (or landed load) covered: vLLM enters
    /// their full blocks in the prefix index then, computed or not, so a
    /// preemption in the same step leaves them findable.
    allocated_tokens: u32,
    /// Offloading only: the computed tokens at which what it may store
    /// next changes (the next block boundary or the prompt's end); 0 after
    /// a store was put off or the request was preempted.
    store_due_tokens: u32,
    /// Tokens the block table holds slots for with nothing to allocate or
    /// register ([`KvCache::room_tokens`]), so that most decode steps
    /// allocate without reading the table; set when an allocation succeeds,
    /// 0 when the table is freed or `cacheable_upto` grows, so never more
    /// than the table's room.
    room_tokens: u32,
    status: Status,
    aborted: bool,
    in_step: bool,
    /// Its prompt was computed by a prefill instance and is still to be
    /// pulled (P/D): cleared when the pull starts.
    remote_prompt: bool,
    /// It is a P/D prefill: when it completes, its blocks are held for the
    /// decode instance's pull ([`Instance::release_kv`]).
    hold_kv: bool,
    id: RequestId,
    last_token: Option<Micros>,
    table: BlockTable,
    req: Request,
    // Read when blocks fill up, at scheduling and at the end.
    hashes: Vec<u64>,
    key: WaitKey,
    first_token: Option<Micros>,
    enqueued: Option<Micros>,
    queued: Option<Micros>,
    first_scheduled: Option<Micros>,
    cached_prompt_tokens: u32,
    preemptions: u32,
    // Offloading only: leading full blocks offered to the tiers; the first
    // block that is private (only this request can contain it: stored
    // unindexed, `u32::MAX` for none) and the tiers' clock before the first
    // private store since admission; the blocks a load in flight pins, and
    // what the request loaded.
    stored_blocks: u32,
    private_from_block: u32,
    private_since: Option<u64>,
    load: Option<LoadTicket>,
    loaded_tokens: u32,
    load_wait: Micros,
}

// The step loop's cache line, and the block table's, as the layout above promises.
const _: () = assert!(std::mem::offset_of!(Live, table) == 64 && std::mem::size_of::<BlockTable>() <= 64);

impl Live {
    fn num_tokens(&self) -> u32 {
        self.prompt_tokens + self.num_output
    }

    /// How many of the first `need` tokens to enter in the prefix index when
    /// their slots are allocated. vLLM enters every full block; BLIS enters
    /// a request's own tokens (generated ones outside multi-turn sessions,
    /// whose next round contains them, and the prompt's own tokens,
    /// [`RequestMeta::own_prompt_from`]) only on preemption, for the
    /// recomputation: no other request can contain them, so skipping them
    /// changes no hit and saves an index update per block.
    fn cacheable_tokens(&self, need: u32) -> u32 {
        need.min(self.cacheable_upto)
    }

    /// How many tokens' full blocks the prefix index holds for the request
    /// when it is preempted: its computed tokens, and the tokens its last
    /// allocation covered, which it would have entered then but for
    /// holding back its own tokens ([`Live::cacheable_tokens`]; vLLM enters
    /// a block when it allocates it, so a request preempted in the step
    /// that scheduled it leaves those blocks findable), so that holding
    /// them back changes no later hit.
    fn indexed_on_preemption(&self) -> u32 {
        self.num_computed.max(self.allocated_tokens)
    }
}

/// What [`Instance::start_load`] did.
enum LoadStart {
    /// The CPU tier holds nothing past the GPU hit: schedule as usual.
    NoHit,
    /// Too few GPU blocks for the request: admit nobody else this step.
    NoRoom,
    /// Loading; the request left the wait queue (reported as scheduled; it
    /// is reported enqueued again when the load lands).
    Started,
}

enum InstEvent {
    Enqueue(u32),
    /// A load from the CPU tier landed.
    Loaded(u32),
    Step,
}

/// Counters accumulated over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceStats {
    /// Requests that reached the instance.
    pub injected: u64,
    /// Scheduler steps executed.
    pub steps: u64,
    /// Σ requests per step (for the mean batch size).
    pub batch_requests: u64,
    /// Σ tokens per step.
    pub batch_tokens: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prompt tokens looked up in the prefix cache (at each admission from the wait queue).
    pub prefix_query_tokens: u64,
    /// Of which found in the cache.
    pub prefix_hit_tokens: u64,
    /// Highest KV usage seen after scheduling a step.
    pub kv_usage_peak: f64,
    /// The offload tiers' counters, when offloading is on.
    pub offload: Option<OffloadStats>,
    /// The P/D transfers' counters, on a decode instance of a disaggregated deployment.
    pub kv_transfer: Option<KvTransferStats>,
    /// ∫ KV usage dt over steps, in usage·µs.
    pub kv_usage_integral: f64,
    /// Σ step durations: time the GPU was busy.
    pub busy: Micros,
    /// Steps the latency model timed at [`crate::latency::MIN_STEP`] or
    /// [`crate::latency::MAX_STEP`] (a prediction ≤ 1 µs, e.g. from negative
    /// coefficients, or ≥ 1 h).
    pub steps_clamped: u64,
    /// Latency-model overheads that hit the one-hour ceiling
    /// ([`crate::latency::MAX_STEP`]): a request's queueing delay or
    /// completion overhead, or a step's token emission or per-token delay.
    pub overheads_clamped: u64,
    /// Steps that first compiled a fused-MoE kernel specialization, each
    /// stalled by the compile time of [`InstanceConfig::moe_kernel_warmup`].
    pub moe_kernel_compiles: u64,
    /// Σ of those stalls (included in `busy`).
    pub moe_compile_stall: Micros,
}

impl InstanceStats {
    /// Adds `other`'s counters to these (the peak is the larger one): the
    /// totals of replicas that took turns in one slot.
    pub fn absorb(&mut self, other: &InstanceStats) {
        self.injected += other.injected;
        self.steps += other.steps;
        self.batch_requests += other.batch_requests;
        self.batch_tokens += other.batch_tokens;
        self.preemptions += other.preemptions;
        self.prefix_query_tokens += other.prefix_query_tokens;
        self.prefix_hit_tokens += other.prefix_hit_tokens;
        self.kv_usage_peak = self.kv_usage_peak.max(other.kv_usage_peak);
        if let Some(t) = &other.offload {
            self.offload.get_or_insert_default().absorb(t);
        }
        if let Some(t) = &other.kv_transfer {
            self.kv_transfer.get_or_insert_default().absorb(t);
        }
        self.kv_usage_integral += other.kv_usage_integral;
        self.busy += other.busy;
        self.steps_clamped += other.steps_clamped;
        self.overheads_clamped += other.overheads_clamped;
        self.moe_kernel_compiles += other.moe_kernel_compiles;
        self.moe_compile_stall += other.moe_compile_stall;
    }
}

/// A single vLLM-like serving instance.
pub struct Instance {
    id: u32,
    cfg: InstanceConfig,
    latency: Arc<dyn LatencyModel>,
    kv: KvCache,
    /// The tiers below `kv`, when offloading is on.
    tiers: Option<OffloadTiers>,
    /// The inbound link of a P/D decode instance.
    transfer_link: Option<Link>,
    /// P/D prefills that completed, with the blocks held for their pull.
    held: Vec<(RequestId, BlockTable)>,
    /// Emptied block tables of `held`, reused.
    spare_tables: Vec<BlockTable>,
    /// KV events since the last step, when recording them; and the cache's
    /// index changes while they become events.
    kv_events: Vec<KvEvent>,
    kv_changes: Vec<CacheChange>,
    events: EventQueue<InstEvent>,
    /// Client deadlines `(slot, id)`, apart from `events`: one per request
    /// with a timeout, they would make every step's event cost a pop from a
    /// queue as long as the requests of the last timeout. They are all of
    /// class `RequestCompletion`, which no other event has, so the two
    /// queues interleave as one would.
    timeouts: EventQueue<(u32, RequestId)>,
    slots: Vec<Live>,
    free_slots: Vec<u32>,
    waiting: WaitQueue,
    running: Vec<u32>,
    /// Async scheduling: requests enqueued during the step in flight, in order.
    incoming: Vec<u32>,
    live_count: u32,
    arriving: u32,
    /// Requests loading their prefix from the CPU tier.
    loading: u32,
    /// Requests whose prefix landed, with when, in landing order; admitted
    /// before the wait queue once the scheduler can see them.
    landed: VecDeque<(u32, Micros)>,
    // The step in flight: (slot, new tokens) and the entries handed to the latency model.
    scheduled: Vec<(u32, u32)>,
    entries: Vec<BatchEntry>,
    /// The request of each of `entries`, for [`StepEvent::requests`].
    entry_ids: Vec<RequestId>,
    step_start: Micros,
    /// When the step in flight ends (meaningful while `scheduled` is not empty).
    step_end: Micros,
    step_load: InstanceLoad,
    step_preempted: u32,
    step_pending: bool,
    hit_scratch: Vec<u32>,
    /// Block hashes of recent prompts and their shared heads.
    prompt_memo: PromptHashMemo,
    /// For a CPU-tier load: whether the GPU held each loaded block's content.
    on_gpu_scratch: Vec<bool>,
    // Wait-queue changes made while forming the step in flight, reported by `on_step_boundary`.
    queue_log: Vec<(u32, QueueChange)>,
    preemption_ema: f64,
    /// Multiplier of every step time (warm-up); 1 when warm.
    step_slowdown: f64,
    /// The fused-MoE kernel specializations compiled so far; `None` when
    /// compiling costs nothing (a dense model or a warm cache).
    moe_kernels: Option<MoeKernelCache>,
    now: Micros,
    stats: InstanceStats,
}

/// γ of the preemption EMA over `preempted / max(1, running)` (physics-normalized model, iteration 3).
const PREEMPTION_EMA_GAMMA: f64 = 0.3;

impl Instance {
    /// An idle instance with an empty cache.
    pub fn new(id: u32, cfg: InstanceConfig, latency: Arc<dyn LatencyModel>) -> Result<Instance, InstanceConfigError> {
        cfg.validate()?;
        let kv = KvCache::grouped(cfg.num_gpu_blocks, cfg.block_size, cfg.enable_prefix_caching, cfg.kv_groups())?;
        let mut kv = kv;
        let mut tiers = cfg.offload.as_ref().map(|o| OffloadTiers::new(o, cfg.block_size)).transpose()?;
        if cfg.kv_events {
            kv.record_changes();
            if let Some(t) = &mut tiers {
                t.record_events();
            }
        }
        let offload_stats = cfg.offload.as_ref().map(OffloadStats::new);
        let transfer_link = cfg.kv_transfer.map(|t| Link::new(t.link));
        let kv_transfer = cfg.kv_transfer.map(|_| KvTransferStats::default());
        let waiting = WaitQueue::new(cfg.scheduler.queue_policy);
        let prompt_memo = PromptHashMemo::new(cfg.block_size);
        let moe_kernels = cfg
            .moe_kernel_warmup
            .map(|w| MoeKernelCache::after_startup(w, cfg.scheduler.max_num_seqs, cfg.scheduler.max_num_batched_tokens));
        Ok(Instance {
            id,
            cfg,
            latency,
            kv,
            tiers,
            transfer_link,
            held: Vec::new(),
            spare_tables: Vec::new(),
            kv_events: Vec::new(),
            kv_changes: Vec::new(),
            events: EventQueue::new(),
            timeouts: EventQueue::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            waiting,
            running: Vec::new(),
            incoming: Vec::new(),
            live_count: 0,
            arriving: 0,
            loading: 0,
            landed: VecDeque::new(),
            scheduled: Vec::new(),
            entries: Vec::new(),
            entry_ids: Vec::new(),
            step_start: Micros::ZERO,
            step_end: Micros::ZERO,
            step_load: InstanceLoad::default(),
            step_preempted: 0,
            step_pending: false,
            hit_scratch: Vec::new(),
            prompt_memo,
            on_gpu_scratch: Vec::new(),
            queue_log: Vec::new(),
            preemption_ema: 0.0,
            step_slowdown: 1.0,
            moe_kernels,
            now: Micros::ZERO,
            stats: InstanceStats { offload: offload_stats, kv_transfer, ..InstanceStats::default() },
        })
    }

    /// Instance id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Its configuration.
    pub fn config(&self) -> &InstanceConfig {
        &self.cfg
    }

    /// The latency model it uses.
    pub fn latency_model(&self) -> &Arc<dyn LatencyModel> {
        &self.latency
    }

    /// Key of its next event, if it has one.
    pub fn next_event(&self) -> Option<EventKey> {
        match (self.events.peek_key(), self.timeouts.peek_key()) {
            (Some(e), Some(t)) => Some(e.min(t)),
            (e, t) => e.or(t),
        }
    }

    /// Requests in the wait queue (including those still being handed over).
    pub fn queue_depth(&self) -> u32 {
        self.waiting.len() as u32 + self.incoming.len() as u32 + self.arriving + self.loading + self.landed.len() as u32
    }

    /// Requests in the running batch.
    pub fn batch_size(&self) -> u32 {
        self.running.len() as u32
    }

    /// Requests on the instance in any state.
    pub fn in_flight(&self) -> u32 {
        self.live_count
    }

    /// The KV cache (read-only).
    pub fn kv(&self) -> &KvCache {
        &self.kv
    }

    /// Counters so far.
    pub fn stats(&self) -> &InstanceStats {
        &self.stats
    }

    /// Current observables.
    pub fn load(&self) -> InstanceLoad {
        InstanceLoad {
            running: self.batch_size(),
            waiting: self.queue_depth(),
            kv_usage: self.kv.usage(),
            kv_free_blocks: self.kv.num_free_blocks(),
            preemption_ema: self.preemption_ema,
        }
    }

    /// Prompt tokens of `req` the prefix cache could serve right now (what a
    /// precise prefix-aware router would see). `scratch` avoids allocation.
    pub fn cached_prefix_tokens(&self, req: &Request, scratch: &mut Vec<u64>) -> u32 {
        if !self.kv.prefix_caching() {
            return 0;
        }
        scratch.clear();
        extend_block_hashes(&req.prompt, req.output_seed, 0, self.kv.block_size(), scratch);
        self.kv.cached_prefix_tokens(scratch, req.prompt_tokens())
    }

    /// vLLM's `reset_prefix_cache` on the GPU cache
    /// ([`KvCache::reset_prefix_cache`]): refused (`false`) while any
    /// request holds blocks. When recording KV events, publishes
    /// `AllBlocksCleared` to `obs` at once.
    pub fn reset_prefix_cache(&mut self, obs: &mut dyn Observer) -> bool {
        if !self.kv.reset_prefix_cache() {
            return false;
        }
        if self.cfg.kv_events {
            self.kv_events.push(KvEvent::AllBlocksCleared);
            self.publish_kv_events(obs);
        }
        true
    }

    /// Tokens of a prompt (its block hashes and length) that would not be
    /// recomputed here now, by where they are: the GPU prefix cache's hit,
    /// then the run of full blocks after it that the offload tiers hold,
    /// per [`crate::kv::offload::Medium`] (what a precise prefix-aware
    /// router that also indexes the tiers' KV events sees). Changes nothing.
    pub fn cached_prefix_by_tier(&self, prompt_blocks: &[u64], prompt_tokens: u32) -> (u32, [u32; 3]) {
        let gpu = self.kv.cached_prefix_tokens(prompt_blocks, prompt_tokens);
        let Some(tiers) = &self.tiers else { return (gpu, [0; 3]) };
        let block_size = self.kv.block_size();
        let (from, to) = ((gpu / block_size) as usize, ((prompt_tokens / block_size) as usize).min(prompt_blocks.len()));
        let blocks = if from < to { tiers.peek(&prompt_blocks[from..to], self.now) } else { [0; 3] };
        (gpu, blocks.map(|b| b * block_size))
    }

    /// Why `req` can never run here, if it cannot.
    pub fn rejection(&self, req: &Request) -> Option<DropReason> {
        let total = u64::from(req.prompt_tokens()) + u64::from(req.max_output_tokens);
        let s = &self.cfg.scheduler;
        if total > u64::from(s.max_model_len) {
            Some(DropReason::ExceedsMaxModelLen)
        } else if self.kv.groups().peak_blocks(total, s.max_num_batched_tokens, self.cfg.block_size) > u64::from(self.kv.usable_blocks()) {
            Some(DropReason::ExceedsKvCapacity)
        } else {
            None
        }
    }

    /// A request reaches the instance at `now`. It is dropped (and reported)
    /// if it can never run; otherwise it enters the wait queue after the
    /// latency model's queueing delay.
    pub fn inject(&mut self, req: Request, now: Micros, obs: &mut dyn Observer) {
        self.inject_with_hashes(req, now, None, obs);
    }

    /// [`Instance::inject`] for a request whose prompt the caller hashed
    /// already (a prefix-aware router): `prompt_hashes` must be what
    /// [`extend_block_hashes`] gives for the prompt (no output tokens) at
    /// this instance's block size. The instance takes them instead of hashing
    /// again, leaving an empty buffer of its own in exchange.
    pub fn inject_hashed(&mut self, req: Request, now: Micros, prompt_hashes: &mut Vec<u64>, obs: &mut dyn Observer) {
        self.inject_with_hashes(req, now, Some(prompt_hashes), obs);
    }

    /// [`Instance::inject`] for a request whose prompt a prefill instance
    /// computed (P/D, [`crate::kv::transfer`]): when admitted it pulls the
    /// prompt's KV over the instance's inbound link instead of computing it.
    /// The instance must have been configured with
    /// [`crate::scheduler::InstanceConfig::kv_transfer`].
    pub fn inject_prefilled(&mut self, req: Request, now: Micros, obs: &mut dyn Observer) {
        debug_assert!(self.transfer_link.is_some(), "a prefilled request reached an instance with no inbound KV link");
        if let Some(slot) = self.inject_with_hashes(req, now, None, obs) {
            self.slots[slot as usize].remote_prompt = true;
        }
    }

    /// [`Instance::inject`] (with `prompt_hashes` as in
    /// [`Instance::inject_hashed`]) for the prefill of a disaggregated
    /// request (P/D): when it completes, its blocks stay held, as vLLM's
    /// connector delays freeing them, until [`Instance::release_kv`].
    pub fn inject_prefill(&mut self, req: Request, now: Micros, prompt_hashes: Option<&mut Vec<u64>>, obs: &mut dyn Observer) {
        if let Some(slot) = self.inject_with_hashes(req, now, prompt_hashes, obs) {
            self.slots[slot as usize].hold_kv = true;
        }
    }

    /// Lets go of the blocks a completed prefill `id` holds
    /// ([`Instance::inject_prefill`]) at `now`: they stay in the prefix
    /// cache when `keep_cached` (vLLM frees them into its cache), or are
    /// forgotten (reused first, a `BlockRemoved` each); requests that wait
    /// for blocks are scheduled now. Nothing happens if it holds none (it
    /// did not complete, or was released already).
    pub fn release_kv(&mut self, id: RequestId, keep_cached: bool, now: Micros, obs: &mut dyn Observer) {
        self.advance_clock(now);
        let Some(i) = self.held.iter().position(|(h, _)| *h == id) else { return };
        let (_, mut table) = self.held.swap_remove(i);
        if keep_cached {
            self.kv.free(&mut table);
        } else {
            self.kv.free_uncached(&mut table);
            if self.cfg.kv_events {
                self.kv.take_changes(&mut self.kv_changes);
                for change in self.kv_changes.drain(..) {
                    if let CacheChange::Removed { hash } = change {
                        self.kv_events.push(KvEvent::BlockRemoved { block_hashes: vec![hash], medium: events::GPU });
                    }
                }
                self.publish_kv_events(obs);
            }
        }
        self.spare_tables.push(table);
        self.resume();
    }

    /// Completed prefills whose blocks are held for a pull.
    pub fn held_kv(&self) -> usize {
        self.held.len()
    }

    /// Injects `req`; returns its slot unless it was dropped at once.
    fn inject_with_hashes(
        &mut self,
        req: Request,
        now: Micros,
        prompt_hashes: Option<&mut Vec<u64>>,
        obs: &mut dyn Observer,
    ) -> Option<u32> {
        self.advance_clock(now);
        self.stats.injected += 1;
        if let Some(reason) = self.rejection(&req) {
            obs.on_finish(&RequestRecord::unserved(&req, Some(self.id), Outcome::Dropped(reason), now));
            return None;
        }
        let slot = self.alloc_slot(req);
        let live = &mut self.slots[slot as usize];
        let mut prefix_hit_tokens = 0;
        if self.kv.prefix_caching() {
            match prompt_hashes {
                Some(given) => {
                    std::mem::swap(&mut live.hashes, given);
                    given.clear();
                    debug_assert_eq!(live.hashes.len() as u32, live.req.prompt_tokens() / self.kv.block_size(), "hashes of another prompt");
                }
                None => self.prompt_memo.prompt_hashes(&live.req.prompt, &mut live.hashes),
            }
            prefix_hit_tokens = self.kv.find_cached_prefix(&live.hashes, live.req.prompt_tokens(), &mut self.hit_scratch);
        }
        let delay = self.latency.queueing_delay(&QueueingInput {
            prompt_tokens: live.req.prompt_tokens(),
            prefix_hit_tokens,
            load: InstanceLoad {
                running: self.running.len() as u32,
                waiting: self.waiting.len() as u32 + self.incoming.len() as u32 + self.arriving,
                kv_usage: self.kv.usage(),
                kv_free_blocks: self.kv.num_free_blocks(),
                preemption_ema: self.preemption_ema,
            },
        });
        self.stats.overheads_clamped += u64::from(delay >= crate::latency::MAX_STEP);
        let (id, give_up) = (live.req.id, give_up_time(self.cfg.client_timeout, &live.req));
        self.arriving += 1;
        self.live_count += 1;
        self.events.push(now + delay, EventClass::InstanceArrival, InstEvent::Enqueue(slot));
        if let Some(give_up) = give_up {
            // A request held up on its way (a shaping delay, a re-route) may
            // arrive after its client gave up: it times out at once.
            self.timeouts.push(give_up.max(now), EventClass::RequestCompletion, (slot, id));
        }
        Some(slot)
    }

    /// Processes the next event; returns its time, or `None` if there is none.
    pub fn process_next(&mut self, obs: &mut dyn Observer) -> Option<Micros> {
        let next = self.next_event()?;
        self.advance_clock(next.time);
        if self.timeouts.peek_key() == Some(next) {
            if let Some((_, (slot, id))) = self.timeouts.pop() {
                self.on_timeout(slot, id, obs);
            }
        } else if let Some((_, ev)) = self.events.pop() {
            match ev {
                InstEvent::Enqueue(slot) => self.on_enqueue(slot, obs),
                InstEvent::Loaded(slot) => self.on_loaded(slot, obs),
                InstEvent::Step => self.on_step_boundary(obs),
            }
        }
        self.discard_stale_timeouts();
        Some(next.time)
    }

    /// Drops the client deadlines at the head of `timeouts` whose request
    /// already ended (or was already aborted), which
    /// [`Instance::on_timeout`] would ignore: the next event is always one
    /// that does something, so an idle instance has no event, and a finished
    /// request's deadline cannot move the clock (or the end of a run) past
    /// the last thing that happened. Amortised O(log n) per request.
    fn discard_stale_timeouts(&mut self) {
        while let Some((_, &(slot, id))) = self.timeouts.peek() {
            let live = self.slots.get(slot as usize).is_some_and(|l| l.id == id && !l.aborted);
            if live {
                break;
            }
            self.timeouts.pop();
        }
    }

    fn advance_clock(&mut self, t: Micros) {
        debug_assert!(t >= self.now, "clock went backwards: {} -> {}", self.now, t);
        self.now = t;
    }

    fn alloc_slot(&mut self, req: Request) -> u32 {
        let key = WaitKey::new(
            self.cfg.scheduler.queue_policy,
            req.meta.priority,
            req.prompt_tokens().saturating_add(req.max_output_tokens),
            req.arrival,
            req.id.0,
        );
        // The request's own tokens, which no other request can hit (see
        // `Live::cacheable_tokens`): its generated ones outside sessions,
        // and its prompt's own (`RequestMeta::own_prompt_from`).
        let prompt = req.prompt_tokens();
        let own_from = if req.meta.session.is_some() { u32::MAX } else { req.meta.own_prompt_from.map_or(prompt, |p| p.min(prompt)) };
        // KV events name the prompt's blocks in the GPU cache and every
        // block stored in the tiers, so when recording them those are
        // indexed.
        let cacheable_upto = if self.cfg.kv_events { own_from.max(prompt) } else { own_from };
        let private_from_block = if self.cfg.kv_events { u32::MAX } else { own_from / self.kv.block_size() };
        let fresh = |req: Request, table, hashes| Live {
            prompt_tokens: req.prompt_tokens(),
            max_output_tokens: req.max_output_tokens,
            id: req.id,
            req,
            status: Status::Arriving,
            key,
            num_computed: 0,
            num_output: 0,
            table,
            hashes,
            enqueued: None,
            queued: None,
            first_scheduled: None,
            first_token: None,
            last_token: None,
            cached_prompt_tokens: 0,
            preemptions: 0,
            aborted: false,
            in_step: false,
            store_due_tokens: 0,
            cacheable_upto,
            allocated_tokens: 0,
            room_tokens: 0,
            stored_blocks: 0,
            private_from_block,
            private_since: None,
            load: None,
            loaded_tokens: 0,
            load_wait: Micros::ZERO,
            remote_prompt: false,
            hold_kv: false,
        };
        match self.free_slots.pop() {
            Some(slot) => {
                let old = &mut self.slots[slot as usize];
                // Reuse the old slot's buffers.
                let mut table = std::mem::take(&mut old.table);
                let mut hashes = std::mem::take(&mut old.hashes);
                table.clear();
                hashes.clear();
                *old = fresh(req, table, hashes);
                slot
            }
            None => {
                self.slots.push(fresh(req, BlockTable::default(), Vec::new()));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// A hand-off of `slot` (its arrival, or a CPU-tier load) completed:
    /// a request moved away meanwhile is released, one whose client gave up
    /// ends as timed out. Returns whether the request is gone.
    fn gone_meanwhile(&mut self, slot: u32, obs: &mut dyn Observer) -> bool {
        let live = &self.slots[slot as usize];
        if live.status == Status::Moved {
            self.live_count -= 1;
            self.release(slot);
        } else if live.aborted {
            self.finish(slot, Outcome::TimedOut, obs);
        } else {
            return false;
        }
        true
    }

    fn on_enqueue(&mut self, slot: u32, obs: &mut dyn Observer) {
        self.arriving -= 1;
        let now = self.now;
        if self.gone_meanwhile(slot, obs) {
            return;
        }
        let live = &mut self.slots[slot as usize];
        live.enqueued = Some(now);
        if self.cfg.scheduler.async_scheduling && !self.scheduled.is_empty() {
            // vLLM's async engine loop formed the next step when this one
            // started; the request waits in the engine's input queue.
            live.status = Status::Incoming;
            self.incoming.push(slot);
            return;
        }
        live.status = Status::Waiting;
        // A synchronous engine busy with a step adds it to the scheduler
        // (vLLM's `QUEUED`) when its loop comes round, at the step's end.
        live.queued = Some(if self.scheduled.is_empty() { now } else { self.step_end });
        let key = live.key;
        obs.on_queue(&QueueEvent { id: live.req.id, meta: live.req.meta, instance: self.id, time: now, change: QueueChange::Enqueued });
        self.waiting.push_new(key, slot);
        self.wake();
    }

    /// Moves incoming requests enqueued no later than `cutoff` into the wait queue.
    fn admit_incoming(&mut self, cutoff: Micros) {
        let mut kept = 0;
        for i in 0..self.incoming.len() {
            let slot = self.incoming[i];
            let live = &mut self.slots[slot as usize];
            if live.enqueued.is_some_and(|e| e <= cutoff) {
                live.status = Status::Waiting;
                live.queued = Some(self.now);
                let key = live.key;
                self.waiting.push_new(key, slot);
                self.queue_log.push((slot, QueueChange::Enqueued));
            } else {
                self.incoming[kept] = slot;
                kept += 1;
            }
        }
        self.incoming.truncate(kept);
    }

    /// Ensures a step boundary is pending at `now` if the instance is idle.
    fn wake(&mut self) {
        if !self.step_pending {
            self.step_pending = true;
            self.events.push(self.now, EventClass::StepCompletion, InstEvent::Step);
        }
    }

    /// The client gave up on request `id` at `now` (for example it closed the
    /// connection): the server aborts it as it would at a client timeout. A
    /// request inside the step in flight is released when the step ends.
    /// Unknown or already finished ids are ignored. O(requests on the instance).
    pub fn abandon(&mut self, id: RequestId, now: Micros, obs: &mut dyn Observer) {
        self.advance_clock(now);
        if let Some(slot) = self.slots.iter().position(|l| l.id == id && !l.aborted) {
            self.on_timeout(slot as u32, id, obs);
        }
        self.discard_stale_timeouts();
    }

    fn on_timeout(&mut self, slot: u32, id: RequestId, obs: &mut dyn Observer) {
        let Some(live) = self.slots.get_mut(slot as usize) else { return };
        // A finished request's slot is marked aborted until reused; a reused slot has another id.
        if live.id != id || live.aborted {
            return;
        }
        match live.status {
            Status::Arriving | Status::Loading => live.aborted = true,
            Status::Incoming => {
                self.incoming.retain(|&s| s != slot);
                self.finish(slot, Outcome::TimedOut, obs);
            }
            Status::Landed => {
                self.landed.retain(|&(s, _)| s != slot);
                self.finish(slot, Outcome::TimedOut, obs);
                self.resume();
            }
            Status::Waiting => {
                let key = live.key;
                let removed = self.waiting.remove(key, slot);
                debug_assert!(removed, "waiting request missing from the queue");
                self.finish(slot, Outcome::TimedOut, obs);
                self.resume();
            }
            Status::Running if live.in_step => live.aborted = true,
            Status::Running => {
                self.running.retain(|&s| s != slot);
                self.finish(slot, Outcome::TimedOut, obs);
                self.resume();
            }
            // Gone already (an aborted slot returned above).
            Status::Moved | Status::Free => {}
        }
    }

    /// Blocks came free, or a request left the wait queue, between steps: a
    /// request the scheduler could not admit may fit now. vLLM's engine
    /// loop, which runs while anything waits, would schedule it at its next
    /// iteration; an instance with no step in flight starts one now, where
    /// it would otherwise wait for the next arrival.
    fn resume(&mut self) {
        if self.waiting.len() > 0 || !self.landed.is_empty() {
            self.wake();
        }
    }

    fn on_step_boundary(&mut self, obs: &mut dyn Observer) {
        self.step_pending = false;
        // Under async scheduling the step starting now was formed when the
        // completed one started: it sees requests enqueued, and loads landed,
        // before that.
        let cutoff = if self.cfg.scheduler.async_scheduling && !self.scheduled.is_empty() { self.step_start } else { self.now };
        if !self.scheduled.is_empty() {
            self.complete_step(obs);
        }
        self.admit_incoming(cutoff);
        self.start_step(cutoff);
        self.publish_kv_events(obs);
        for &(slot, change) in &self.queue_log {
            let live = &self.slots[slot as usize];
            obs.on_queue(&QueueEvent { id: live.req.id, meta: live.req.meta, instance: self.id, time: self.now, change });
        }
        self.queue_log.clear();
    }

    /// Applies the results of the step in flight: sample tokens, finish requests.
    fn complete_step(&mut self, obs: &mut dyn Observer) {
        let now = self.now;
        let duration = now - self.step_start;
        let preempted = self.step_preempted;
        obs.on_step(&StepEvent {
            instance: self.id,
            start: self.step_start,
            duration,
            batch: StepBatch { entries: &self.entries, load: self.step_load, preempted },
            requests: &self.entry_ids,
        });
        let per_token = self.latency.output_token_overhead();
        let emission = self.latency.token_emission_delay();
        self.stats.overheads_clamped += u64::from(per_token.max(emission) >= crate::latency::MAX_STEP);
        let emitted = now + emission;
        let tokens_observed = obs.observes_tokens();
        let mut any_finished = false;
        for i in 0..self.scheduled.len() {
            let (slot, _) = self.scheduled[i];
            let live = &mut self.slots[slot as usize];
            live.in_step = false;
            if live.aborted {
                any_finished = true;
                continue;
            }
            if live.num_computed < live.num_tokens() {
                continue; // a prefill chunk: no token sampled yet
            }
            live.num_output += 1;
            let time = emitted + Micros(per_token.0.saturating_mul(u64::from(live.num_output)));
            let gap = live.last_token.map(|prev| time - prev);
            if live.num_output == 1 {
                live.first_token = Some(time);
            }
            live.last_token = Some(time);
            if tokens_observed {
                obs.on_token(&TokenEvent { id: live.id, meta: live.req.meta, instance: self.id, index: live.num_output, time, gap });
            }
            if live.num_output >= live.max_output_tokens {
                any_finished = true;
            }
        }
        self.store_computed_blocks();
        if any_finished {
            // Retire finished and aborted requests, keeping the running order.
            let mut k = 0;
            while k < self.running.len() {
                let slot = self.running[k];
                let live = &self.slots[slot as usize];
                if live.status == Status::Moved {
                    self.running.remove(k);
                    self.live_count -= 1;
                    self.release(slot);
                    continue;
                }
                let outcome = if live.aborted {
                    Some(Outcome::TimedOut)
                } else if live.num_output >= live.max_output_tokens {
                    Some(Outcome::Completed)
                } else {
                    None
                };
                match outcome {
                    Some(o) => {
                        self.running.remove(k);
                        self.finish(slot, o, obs);
                    }
                    None => k += 1,
                }
            }
        }
        self.scheduled.clear();
        self.entries.clear();
        self.entry_ids.clear();
    }

    /// Frees a request's resources and reports it.
    fn finish(&mut self, slot: u32, outcome: Outcome, obs: &mut dyn Observer) {
        let now = self.now;
        let completion = self.latency.completion_overhead();
        self.stats.overheads_clamped += u64::from(outcome == Outcome::Completed && completion >= crate::latency::MAX_STEP);
        let live = &self.slots[slot as usize];
        let finished = match outcome {
            Outcome::Completed => live.last_token.unwrap_or(now) + completion,
            Outcome::TimedOut => give_up_time(self.cfg.client_timeout, &live.req).unwrap_or(now),
            Outcome::Dropped(_) | Outcome::Rejected(_) => now,
        };
        let record = RequestRecord {
            id: live.req.id,
            meta: live.req.meta,
            instance: Some(self.id),
            outcome,
            arrival: live.req.arrival,
            enqueued: live.enqueued,
            queued: live.queued,
            first_scheduled: live.first_scheduled,
            first_token: live.first_token,
            last_token: live.last_token,
            finished,
            input_tokens: live.req.prompt_tokens(),
            output_tokens: live.num_output,
            cached_prompt_tokens: live.cached_prompt_tokens,
            preemptions: live.preemptions,
            loaded_prompt_tokens: live.loaded_tokens,
            kv_load_wait: live.load_wait,
            pd: None,
        };
        self.live_count -= 1;
        let live = &mut self.slots[slot as usize];
        if live.hold_kv && outcome == Outcome::Completed {
            let table = std::mem::replace(&mut live.table, self.spare_tables.pop().unwrap_or_default());
            self.held.push((record.id, table));
        }
        self.release(slot);
        obs.on_finish(&record);
    }

    /// Marks `slot` free (its blocks were freed) for the next request.
    fn release(&mut self, slot: u32) {
        let live = &mut self.slots[slot as usize];
        self.kv.free(&mut live.table);
        live.room_tokens = 0;
        live.aborted = true; // the slot is dead until reused
        live.status = Status::Free;
        live.in_step = false;
        // The prompt is not needed any more (it may hold a long list of real
        // token ids). The block table and hashes are kept for the slot's next
        // request unless so many slots are free already that this one will
        // not be reused soon, as when a burst drains: a run's memory is then
        // bounded by the requests it holds, not by the most it ever held.
        live.req.prompt = TokenSeq::new();
        if self.free_slots.len() >= self.cfg.scheduler.max_num_seqs as usize {
            live.table.shrink();
            live.hashes = Vec::new();
        }
        self.free_slots.push(slot);
    }

    /// Takes requests away from the instance (a replica that is being
    /// removed): they are appended to `out` as they arrived, keep no
    /// progress, leave no record here, and free their KV blocks now (a
    /// request in the step in flight frees them when the step ends). A
    /// request whose client already gave up stays, to time out here.
    pub fn evict(&mut self, which: Evict, now: Micros, out: &mut Vec<Request>) {
        self.advance_clock(now);
        for slot in 0..self.slots.len() as u32 {
            let live = &mut self.slots[slot as usize];
            if live.aborted {
                continue;
            }
            let take = match live.status {
                Status::Arriving | Status::Incoming | Status::Waiting | Status::Loading | Status::Landed => true,
                Status::Running => which == Evict::All,
                Status::Moved | Status::Free => false,
            };
            if !take {
                continue;
            }
            out.push(live.req.clone());
            match live.status {
                // Released when its hand-off, its load or its step completes.
                Status::Arriving | Status::Loading => {
                    live.status = Status::Moved;
                    live.aborted = true;
                }
                Status::Running if live.in_step => {
                    live.status = Status::Moved;
                    live.aborted = true;
                }
                Status::Incoming => {
                    self.incoming.retain(|&s| s != slot);
                    self.live_count -= 1;
                    self.release(slot);
                }
                Status::Landed => {
                    self.landed.retain(|&(s, _)| s != slot);
                    self.live_count -= 1;
                    self.release(slot);
                }
                Status::Waiting => {
                    let key = live.key;
                    let removed = self.waiting.remove(key, slot);
                    debug_assert!(removed, "waiting request missing from the queue");
                    self.live_count -= 1;
                    self.release(slot);
                }
                _ => {
                    self.running.retain(|&s| s != slot);
                    self.live_count -= 1;
                    self.release(slot);
                }
            }
        }
        self.discard_stale_timeouts();
    }

    /// Multiplies every later step time by `factor` (≥ 1: a replica warming
    /// up, slower until its kernels are compiled and its CUDA graphs captured).
    pub fn set_step_slowdown(&mut self, factor: f64) {
        self.step_slowdown = factor;
    }

    /// Forms the next batch and starts it, or goes idle when there is no work.
    /// Loads that landed after `visible_until` wait for a later step, unless
    /// nothing else can run.
    fn start_step(&mut self, mut visible_until: Micros) {
        loop {
            let preempted = self.schedule(visible_until);
            let preempted_share = f64::from(preempted) / self.running.len().max(1) as f64;
            self.preemption_ema = PREEMPTION_EMA_GAMMA * preempted_share + (1.0 - PREEMPTION_EMA_GAMMA) * self.preemption_ema;
            if !self.scheduled.is_empty() {
                self.step_preempted = preempted;
                break;
            }
            // Nothing ran. Requests and loads held back by async scheduling
            // are scheduled at once when there is nothing else to run (vLLM's
            // engine runs an empty step, which reports finished loads too).
            if !self.incoming.is_empty() || self.landed.back().is_some_and(|&(_, at)| at > visible_until) {
                visible_until = self.now;
                self.admit_incoming(self.now);
                continue;
            }
            // If everything was preempted, the next pass admits from the wait
            // queue (vLLM's next busy-loop iteration); otherwise idle.
            if preempted == 0 || self.waiting.len() == 0 {
                return;
            }
        }
        self.step_load = self.load();
        let batch = StepBatch { entries: &self.entries, load: self.step_load, preempted: self.step_preempted };
        let mut duration = self.latency.step_time(&batch);
        if self.step_slowdown != 1.0 {
            duration = Micros::from_us_f64(duration.0 as f64 * self.step_slowdown)
                .unwrap_or(crate::latency::MAX_STEP)
                .min(crate::latency::MAX_STEP);
        }
        let tokens: u64 = self.entries.iter().map(|e| u64::from(e.new_tokens)).sum();
        if let Some(kernels) = &mut self.moe_kernels {
            let stall = kernels.launch(tokens);
            if stall > Micros::ZERO {
                duration += stall;
                self.stats.moe_kernel_compiles += 1;
                self.stats.moe_compile_stall += stall;
            }
        }
        let usage = self.kv.usage();
        let s = &mut self.stats;
        s.steps += 1;
        s.batch_requests += self.entries.len() as u64;
        s.batch_tokens += tokens;
        s.kv_usage_peak = s.kv_usage_peak.max(usage);
        s.kv_usage_integral += usage * duration.as_us() as f64;
        s.busy += duration;
        s.steps_clamped += u64::from(duration <= crate::latency::MIN_STEP || duration >= crate::latency::MAX_STEP);
        self.step_start = self.now;
        self.step_end = self.now + duration;
        self.step_pending = true;
        self.events.push(self.step_end, EventClass::StepCompletion, InstEvent::Step);
    }

    /// One vLLM v1 scheduling pass. Fills `scheduled`/`entries`; returns the
    /// number of requests preempted. A landed load joins only if it landed
    /// by `visible_until`: vLLM learns of a finished load from the output of
    /// the step that ran while it finished, which the async scheduler reads
    /// only after forming the next step.
    fn schedule(&mut self, visible_until: Micros) -> u32 {
        let now = self.now;
        let s = self.cfg.scheduler.clone();
        let mut budget = s.max_num_batched_tokens;
        let mut preempted = 0u32;
        self.scheduled.clear();
        self.entries.clear();
        self.entry_ids.clear();

        // 1. Running requests, in order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let slot = self.running[i];
            let live = &self.slots[slot as usize];
            let mut n = live.num_tokens() - live.num_computed;
            if s.long_prefill_token_threshold > 0 {
                n = n.min(s.long_prefill_token_threshold);
            }
            n = n.min(budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let mut scheduled_self = true;
            while !self.allocate(slot, n, false) {
                let (victim_idx, victim) = self.pick_victim();
                self.running.remove(victim_idx);
                // A victim already scheduled in this step gives its budget back.
                if let Some(pos) = self.scheduled.iter().position(|&(v, _)| v == victim) {
                    let (_, tokens) = self.scheduled.remove(pos);
                    self.entries.remove(pos);
                    self.entry_ids.remove(pos);
                    budget += tokens;
                    let v = &mut self.slots[victim as usize];
                    v.num_computed -= tokens;
                    v.in_step = false;
                }
                if victim_idx < i {
                    i -= 1;
                }
                self.preempt(victim);
                preempted += 1;
                if victim == slot {
                    scheduled_self = false;
                    break;
                }
            }
            if !scheduled_self {
                break;
            }
            self.push_scheduled(slot, n);
            budget -= n;
            i += 1;
        }

        // 2. Waiting requests, unless this step preempted: first those whose
        //    prefix landed from the CPU tier (they hold their blocks, so the
        //    queue's head never waits on them), then the wait queue.
        if preempted == 0 {
            while budget > 0 && self.running.len() < s.max_num_seqs as usize {
                let (slot, landed) = match self.landed.front() {
                    Some(&(slot, at)) if at <= visible_until => (slot, true),
                    _ => match self.waiting.peek() {
                        Some(slot) => (slot, false),
                        None => break,
                    },
                };
                let live = &self.slots[slot as usize];
                let num_tokens = live.num_tokens();
                let hit_tokens = if landed {
                    self.hit_scratch.clear();
                    live.num_computed
                } else if self.kv.prefix_caching() && live.num_computed == 0 {
                    self.kv.find_cached_prefix(&live.hashes, num_tokens, &mut self.hit_scratch)
                } else {
                    self.hit_scratch.clear();
                    0
                };
                if !landed && live.remote_prompt {
                    match self.start_transfer(slot, hit_tokens) {
                        LoadStart::Started => continue,
                        LoadStart::NoRoom => break,
                        LoadStart::NoHit => {}
                    }
                } else if !landed && self.tiers.is_some() {
                    match self.start_load(slot, hit_tokens) {
                        LoadStart::Started => continue,
                        LoadStart::NoRoom => break,
                        LoadStart::NoHit => {}
                    }
                }
                let mut n = num_tokens - hit_tokens;
                if s.long_prefill_token_threshold > 0 {
                    n = n.min(s.long_prefill_token_threshold);
                }
                if !s.enable_chunked_prefill && n > budget {
                    break;
                }
                n = n.min(budget);
                self.slots[slot as usize].num_computed = hit_tokens;
                if !self.allocate(slot, n, !landed) {
                    if !landed {
                        self.slots[slot as usize].num_computed = 0;
                    }
                    break;
                }
                if landed {
                    self.landed.pop_front();
                } else {
                    self.waiting.pop();
                    self.stats.prefix_query_tokens += u64::from(num_tokens);
                    self.stats.prefix_hit_tokens += u64::from(hit_tokens);
                }
                self.queue_log.push((slot, QueueChange::Scheduled));
                self.running.push(slot);
                let live = &mut self.slots[slot as usize];
                live.status = Status::Running;
                if live.first_scheduled.is_none() {
                    live.first_scheduled = Some(now);
                    live.cached_prompt_tokens = hit_tokens.min(live.req.prompt_tokens());
                }
                self.push_scheduled(slot, n);
                budget -= n;
            }
        }
        self.stats.preemptions += u64::from(preempted);
        preempted
    }

    /// vLLM's connector lookup for the request at the head of the wait queue,
    /// which has nothing computed and `gpu_hit_tokens` GPU prefix hits (in
    /// `hit_scratch`): when the offload tiers hold the prompt's full blocks
    /// right after the hit, they start loading and the request leaves the
    /// queue until [`InstEvent::Loaded`].
    ///
    /// The request takes GPU blocks for all its tokens now, not only for the
    /// loaded ones as vLLM does (the rest when it is scheduled): blocks held
    /// by requests that wait could otherwise leave nothing for the request
    /// at the head of the queue while nothing runs, and vLLM would stall
    /// there. The loaded blocks enter the prefix index only when they land
    /// (vLLM's `delay_cache_blocks`).
    fn start_load(&mut self, slot: u32, gpu_hit_tokens: u32) -> LoadStart {
        let now = self.now;
        let tiers = self.tiers.as_mut().expect("called with offload tiers");
        let block_size = self.kv.block_size();
        let live = &mut self.slots[slot as usize];
        let num_tokens = live.num_tokens();
        extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, block_size, &mut live.hashes);
        let gpu_blocks = (gpu_hit_tokens / block_size) as usize;
        let full_blocks = ((num_tokens / block_size) as usize).min(live.hashes.len());
        if full_blocks <= gpu_blocks {
            return LoadStart::NoHit;
        }
        let stats = self.stats.offload.as_mut().expect("set when the tiers are");
        let hits = tiers.lookup(&live.hashes[gpu_blocks..full_blocks], now, stats) as usize;
        if hits == 0 {
            return LoadStart::NoHit;
        }
        let loaded = gpu_blocks..gpu_blocks + hits;
        self.on_gpu_scratch.clear();
        self.on_gpu_scratch.extend(live.hashes[loaded.clone()].iter().map(|&h| self.kv.cached_block(h).is_some()));
        let room = self.kv.allocate_slots(&mut live.table, num_tokens, &self.hit_scratch, &live.hashes, gpu_hit_tokens);
        self.note_kv_changes(slot);
        if !room {
            return LoadStart::NoRoom;
        }
        let live = &mut self.slots[slot as usize];
        let (tiers, stats) =
            (self.tiers.as_mut().expect("called with offload tiers"), self.stats.offload.as_mut().expect("set when the tiers are"));
        let (ticket, done) = tiers.start_load(&live.hashes[loaded.clone()], now, &self.on_gpu_scratch, stats);
        live.load = Some(ticket);
        self.wait_for_remote_kv(slot, done, loaded.end as u32 * block_size, hits as u32 * block_size, gpu_hit_tokens)
    }

    /// The request in `slot`, at the head of the wait queue with its blocks
    /// taken and `gpu_hit_tokens` GPU prefix hits, leaves the queue
    /// (`WAITING_FOR_REMOTE_KVS`) until its KV lands at `done`, with
    /// `computed` tokens then computed of which it loaded `loaded_tokens`.
    fn wait_for_remote_kv(&mut self, slot: u32, done: Micros, computed: u32, loaded_tokens: u32, gpu_hit_tokens: u32) -> LoadStart {
        let live = &mut self.slots[slot as usize];
        live.load_wait += done - self.now;
        live.loaded_tokens += loaded_tokens;
        live.num_computed = computed;
        live.status = Status::Loading;
        let num_tokens = live.num_tokens();
        self.waiting.pop();
        self.queue_log.push((slot, QueueChange::Scheduled));
        self.loading += 1;
        self.stats.prefix_query_tokens += u64::from(num_tokens);
        self.stats.prefix_hit_tokens += u64::from(gpu_hit_tokens);
        self.events.push(done, EventClass::InstanceArrival, InstEvent::Loaded(slot));
        LoadStart::Started
    }

    /// vLLM's `NixlConnector` on a decode instance, for the request at the
    /// head of the wait queue whose prompt a prefill instance computed, with
    /// `gpu_hit_tokens` local prefix hits (in `hit_scratch`): it takes
    /// blocks for the whole prompt and pulls the rest of the prompt's blocks
    /// over the inbound link; the request leaves the queue until
    /// [`InstEvent::Loaded`] ([`crate::kv::transfer`]).
    fn start_transfer(&mut self, slot: u32, gpu_hit_tokens: u32) -> LoadStart {
        let now = self.now;
        let block_size = self.kv.block_size();
        let live = &mut self.slots[slot as usize];
        let prompt = live.req.prompt_tokens();
        let pulled_blocks = prompt.div_ceil(block_size) - gpu_hit_tokens / block_size;
        if pulled_blocks == 0 {
            live.remote_prompt = false;
            return LoadStart::NoHit;
        }
        let num_tokens = live.num_tokens();
        let room = self.kv.allocate_slots(&mut live.table, num_tokens, &self.hit_scratch, &live.hashes, gpu_hit_tokens);
        self.note_kv_changes(slot);
        if !room {
            return LoadStart::NoRoom;
        }
        let block_bytes = self.cfg.kv_transfer.expect("a prefilled request needs an inbound KV link").block_bytes;
        let bytes = u64::from(pulled_blocks) * block_bytes;
        let (done, busy) = self.transfer_link.as_mut().expect("set with kv_transfer").transfer(now, bytes);
        let stats = self.stats.kv_transfer.as_mut().expect("set with kv_transfer");
        stats.transfers += 1;
        stats.blocks += u64::from(pulled_blocks);
        stats.bytes += bytes;
        stats.busy += busy;
        stats.wait += done - now;
        self.slots[slot as usize].remote_prompt = false;
        self.wait_for_remote_kv(slot, done, prompt, prompt - gpu_hit_tokens, gpu_hit_tokens)
    }

    /// A load from the offload tiers, or a P/D transfer, landed: the loaded blocks enter the GPU
    /// prefix index and the request waits again, with them computed (all
    /// but the last token when they cover the whole request, as vLLM
    /// recomputes it), ahead of the wait queue. A request that gave up or
    /// was moved away meanwhile ends or is released now.
    fn on_loaded(&mut self, slot: u32, obs: &mut dyn Observer) {
        self.loading -= 1;
        let live = &mut self.slots[slot as usize];
        match live.load.take() {
            Some(ticket) => self.tiers.as_mut().expect("a load needs offload tiers").finish_load(ticket),
            None => obs.on_kv_pulled(live.req.id, self.id),
        }
        if self.gone_meanwhile(slot, obs) {
            // Its blocks are free now (vLLM frees an aborted load's blocks
            // when the load finishes).
            self.resume();
            return;
        }
        let live = &mut self.slots[slot as usize];
        let computed = live.num_computed;
        let cacheable = live.cacheable_tokens(computed);
        live.allocated_tokens = computed;
        self.kv.cache_full_blocks(&mut live.table, &live.hashes, cacheable);
        self.note_kv_changes(slot);
        let live = &mut self.slots[slot as usize];
        if computed == live.num_tokens() {
            live.num_computed -= 1;
        }
        live.status = Status::Landed;
        obs.on_queue(&QueueEvent {
            id: live.req.id,
            meta: live.req.meta,
            instance: self.id,
            time: self.now,
            change: QueueChange::Enqueued,
        });
        self.landed.push_back((slot, self.now));
        self.wake();
    }

    /// Offers the offload tiers the full blocks each request of the
    /// completed step has computed and not offered yet, as the store policy
    /// says (a request whose store is put off offers them again after its
    /// next step).
    fn store_computed_blocks(&mut self) {
        let Some(tiers) = self.tiers.as_mut() else { return };
        let stats = self.stats.offload.as_mut().expect("set when the tiers are");
        let now = self.now;
        let block_size = self.kv.block_size();
        let policy = tiers.policy();
        for &(slot, _) in &self.scheduled {
            let live = &mut self.slots[slot as usize];
            // What may be stored changes only when a block fills or the
            // prompt completes: most steps stop at this test, which reads
            // only fields every step touches.
            if live.num_computed < live.store_due_tokens {
                continue;
            }
            let (computed, prompt) = (live.num_computed, live.prompt_tokens);
            let next_boundary = (computed / block_size + 1).saturating_mul(block_size);
            live.store_due_tokens = if computed < prompt { next_boundary.min(prompt) } else { next_boundary };
            let storable = policy.storable_blocks(computed, prompt, block_size);
            if live.aborted || storable <= live.stored_blocks {
                continue;
            }
            // Shared blocks are stored by content, then private ones by owner.
            let shared_end = storable.min(live.private_from_block).max(live.stored_blocks);
            let mut shared = live.stored_blocks as usize..live.stored_blocks as usize;
            if shared_end > live.stored_blocks {
                let hashed_output = (shared_end * block_size).saturating_sub(live.req.prompt_tokens()).min(live.num_output);
                extend_block_hashes(&live.req.prompt, live.req.output_seed, hashed_output, block_size, &mut live.hashes);
                // Hashes reach only the tokens output so far: the rest waits for the next step.
                if shared_end as usize > live.hashes.len() {
                    live.store_due_tokens = 0;
                }
                shared.end = (shared_end as usize).min(live.hashes.len()).max(shared.start);
            }
            let first_private = shared.end as u32;
            let private = (storable > first_private && first_private >= live.private_from_block).then(|| PrivateRun {
                owner: live.req.id.0,
                first_block: first_private,
                blocks: storable - first_private,
            });
            // (Past the hashed blocks, the range is empty: private blocks have no hash.)
            let shared_hashes = live.hashes.get(shared).unwrap_or_default();
            let clock = tiers.clock();
            if tiers.store(shared_hashes, private, now, stats) {
                live.stored_blocks = private.map_or(first_private, |p| p.first_block + p.blocks);
                if private.is_some() {
                    live.private_since.get_or_insert(clock);
                }
            } else {
                live.store_due_tokens = 0;
            }
        }
    }

    /// Records `n` tokens of `slot` in this step and advances its computed count
    /// (vLLM `_update_after_schedule`).
    fn push_scheduled(&mut self, slot: u32, n: u32) {
        let live = &mut self.slots[slot as usize];
        self.entries.push(BatchEntry { computed_tokens: live.num_computed, new_tokens: n, prompt_tokens: live.prompt_tokens });
        self.entry_ids.push(live.id);
        self.scheduled.push((slot, n));
        live.num_computed += n;
        live.in_step = true;
    }

    /// KV allocation for `n` more tokens of `slot`; on first admission the
    /// prefix hits in `hit_scratch` are taken too.
    #[inline(always)]
    fn allocate(&mut self, slot: u32, n: u32, with_hits: bool) -> bool {
        let live = &mut self.slots[slot as usize];
        // Blocks that slide out of a sliding-window group are entered in the
        // index as they go (`KvCache::release_skipped`), generated ones too,
        // so their hashes are needed now rather than at a preemption.
        if self.kv.prefix_caching() && self.kv.slides_out_upto(&live.table, live.num_computed) > live.hashes.len() {
            extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, self.kv.block_size(), &mut live.hashes);
        }
        self.kv.release_skipped(&mut live.table, live.num_computed, &live.hashes);
        let need = live.num_computed + n;
        if !with_hits && need <= live.room_tokens {
            live.allocated_tokens = need;
            return true; // most decode steps
        }
        let cache_upto = live.cacheable_tokens(need);
        if !with_hits && self.kv.holds(&live.table, need, cache_upto) {
            live.allocated_tokens = need;
            live.room_tokens = self.kv.room_tokens(&live.table, live.cacheable_upto);
            return true;
        }
        self.take_blocks(slot, need, cache_upto, with_hits)
    }

    /// [`Instance::allocate`] when blocks may be taken or registered: for
    /// `slot` to hold `need` tokens, its first `cache_upto` in the index.
    #[inline(never)]
    fn take_blocks(&mut self, slot: u32, need: u32, cache_upto: u32, with_hits: bool) -> bool {
        let live = &mut self.slots[slot as usize];
        // Hashes must cover every full block entered in the prefix index.
        if self.kv.prefix_caching() && (cache_upto / self.kv.block_size()) as usize > live.hashes.len() {
            extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, self.kv.block_size(), &mut live.hashes);
        }
        let hits: &[u32] = if with_hits { &self.hit_scratch } else { &[] };
        let ok = self.kv.allocate_slots(&mut live.table, need, hits, &live.hashes, cache_upto);
        if ok {
            live.allocated_tokens = need;
            live.room_tokens = self.kv.room_tokens(&live.table, live.cacheable_upto);
        }
        self.note_kv_changes(slot);
        ok
    }

    /// When recording KV events, turns the cache's index changes since the
    /// last call into events; registered blocks belong to `slot`'s request
    /// (every call that registers blocks is for one request, and is
    /// followed by this). Consecutive blocks become one `BlockStored`, each
    /// eviction one `BlockRemoved`, as vLLM reports them.
    fn note_kv_changes(&mut self, slot: u32) {
        if !self.cfg.kv_events {
            return;
        }
        self.kv.take_changes(&mut self.kv_changes);
        let live = &self.slots[slot as usize];
        let block_size = self.kv.block_size();
        for change in self.kv_changes.drain(..) {
            let event = match change {
                CacheChange::Removed { hash } => KvEvent::BlockRemoved { block_hashes: vec![hash], medium: events::GPU },
                CacheChange::Stored { hash, parent, index } => {
                    if let Some(KvEvent::BlockStored { block_hashes, token_ids, medium: events::GPU, .. }) = self.kv_events.last_mut()
                        && parent.is_some()
                        && block_hashes.last() == parent.as_ref()
                    {
                        block_hashes.push(hash);
                        events::push_token_ids(&live.req.prompt, live.req.output_seed, index * block_size, block_size, token_ids);
                        continue;
                    }
                    let mut token_ids = Vec::with_capacity(block_size as usize);
                    events::push_token_ids(&live.req.prompt, live.req.output_seed, index * block_size, block_size, &mut token_ids);
                    KvEvent::BlockStored { block_hashes: vec![hash], parent_block_hash: parent, token_ids, block_size, medium: events::GPU }
                }
            };
            self.kv_events.push(event);
        }
    }

    /// Hands the KV events recorded since the last step to `obs`, with the
    /// offload tiers' after the GPU's.
    fn publish_kv_events(&mut self, obs: &mut dyn Observer) {
        if !self.cfg.kv_events {
            return;
        }
        if let Some(t) = &mut self.tiers {
            t.take_events(&mut self.kv_events);
        }
        if !self.kv_events.is_empty() {
            obs.on_kv_events(&KvEventBatch { instance: self.id, time: self.now, events: &self.kv_events });
            self.kv_events.clear();
        }
    }

    /// The running request to preempt: the tail, or the lowest priority
    /// (latest arrival among equals). Returns (index in running, slot).
    fn pick_victim(&self) -> (usize, u32) {
        match self.cfg.scheduler.preemption {
            PreemptionVictim::Tail => {
                let i = self.running.len() - 1;
                (i, self.running[i])
            }
            PreemptionVictim::LowestPriority => {
                let mut best = 0;
                for (i, &slot) in self.running.iter().enumerate().skip(1) {
                    let (a, b) = (&self.slots[slot as usize].req, &self.slots[self.running[best] as usize].req);
                    let lower = a.meta.priority.total_cmp(&b.meta.priority).then(b.arrival.cmp(&a.arrival)).then(b.id.cmp(&a.id));
                    if lower.is_le() {
                        best = i;
                    }
                }
                (best, self.running[best])
            }
        }
    }

    /// Frees the victim's blocks and returns it to the wait queue to recompute.
    fn preempt(&mut self, slot: u32) {
        let live = &mut self.slots[slot as usize];
        // Its generated tokens are computed: make them findable, as vLLM
        // would have, so the recomputation can hit them.
        let private_since = live.private_since.take();
        if self.kv.prefix_caching() || private_since.is_some() {
            extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, self.kv.block_size(), &mut live.hashes);
        }
        if self.kv.prefix_caching() {
            let indexed = live.indexed_on_preemption();
            self.kv.cache_full_blocks(&mut live.table, &live.hashes, indexed);
        }
        // Its own prompt blocks are in the index now, so the recomputation's
        // copies must enter it when allocated, as vLLM's would: a copy finds
        // the old entry there (the first block registered for a content
        // keeps it) until that block is reused.
        live.cacheable_upto = live.cacheable_upto.max(live.req.prompt_tokens());
        // Likewise the private blocks it stored in the tiers.
        if let (Some(tiers), Some(since)) = (self.tiers.as_mut(), private_since) {
            tiers.adopt(live.req.id.0, since, &live.hashes);
            live.private_from_block = live.private_from_block.max(live.stored_blocks);
        }
        self.note_kv_changes(slot);
        let live = &mut self.slots[slot as usize];
        self.kv.free(&mut live.table);
        live.num_computed = 0;
        live.allocated_tokens = 0;
        live.room_tokens = 0;
        live.stored_blocks = 0;
        live.store_due_tokens = 0;
        live.preemptions += 1;
        live.status = Status::Waiting;
        let key = live.key;
        self.waiting.push_preempted(key, slot);
        self.queue_log.push((slot, QueueChange::Enqueued));
    }

    /// Whether no work is left (nothing queued, running or arriving).
    pub fn is_idle(&self) -> bool {
        self.live_count == 0
    }

    /// Requests still waiting (queued or arriving) and running: for end-of-run accounting.
    pub fn unfinished(&self) -> (u32, u32) {
        (self.queue_depth(), self.batch_size())
    }

    /// Priorities of waiting requests in admission order (for anomaly checks).
    pub fn waiting_priorities(&self) -> impl Iterator<Item = f64> + '_ {
        self.landed.iter().map(|&(slot, _)| slot).chain(self.waiting.iter()).map(|slot| self.slots[slot as usize].req.meta.priority)
    }

    /// Debug aid for tests: full KV consistency check plus the
    /// request-accounting identity `live = arriving + incoming + waiting + running`.
    pub fn assert_consistent(&self) {
        self.kv.assert_consistent();
        let tables = self.slots.iter().map(|l| &l.table).chain(self.held.iter().map(|(_, t)| t)).chain(&self.spare_tables);
        let held: u64 = tables.map(|t| self.kv.assert_table(t)).sum();
        assert_eq!(held, self.kv.total_refs(), "the tables' entries are not the blocks' reference counts");
        assert_eq!(
            self.live_count,
            self.arriving
                + self.incoming.len() as u32
                + self.waiting.len() as u32
                + self.running.len() as u32
                + self.loading
                + self.landed.len() as u32
        );
        if let Some(tiers) = &self.tiers {
            tiers.assert_consistent();
        }
        assert!(self.running.len() <= self.cfg.scheduler.max_num_seqs as usize);
    }
}

/// When `req`'s client gives up on it: `client_timeout` after the send, or
/// its cancellation ([`RequestMeta::cancel_at`]), whichever is earlier.
fn give_up_time(client_timeout: Option<Micros>, req: &Request) -> Option<Micros> {
    let timeout = client_timeout.map(|t| req.arrival + t);
    match (timeout, req.meta.cancel_at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Blackbox;
    use crate::metrics::Collector;

    /// After a burst drains, finished requests hold no prompt, and at most
    /// `max_num_seqs` free slots keep a block table and hashes for reuse.
    #[test]
    fn a_drained_burst_leaves_no_more_buffers_than_one_full_batch() {
        let cfg = InstanceConfig::basic(4, 4096, 100_000, 1000);
        let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 1.0, 1.0] });
        let mut inst = Instance::new(0, cfg, model).unwrap();
        let mut c = Collector::default();
        for id in 0..100 {
            let req = Request {
                id: RequestId(id),
                arrival: Micros::ZERO,
                prompt: TokenSeq::synthetic(id, 64),
                max_output_tokens: 20,
                output_seed: id,
                meta: RequestMeta::default(),
            };
            inst.inject(req, Micros::ZERO, &mut c);
        }
        while inst.process_next(&mut c).is_some() {}
        assert_eq!(inst.slots.len(), 100, "every request of the burst had its own slot");
        assert!(inst.slots.iter().all(|l| l.req.prompt.runs().is_empty()));
        let holding = inst.slots.iter().filter(|l| l.table.has_capacity() || l.hashes.capacity() > 0).count();
        assert!(holding <= 4, "{holding} free slots hold buffers");
    }
}
