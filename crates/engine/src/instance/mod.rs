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
//!
//! The state lives here, in one struct laid out for the step loop (the
//! layout of `Live` is a speed decision); what is done with it is split
//! by concern, each file one more `impl Instance`:
//!
//! * `arrival`: a request reaching the instance and entering the wait queue;
//! * `step`: forming, timing and completing a step, preemption;
//! * `kv_loading`: prefixes loaded from the tiers below the GPU, blocks stored to them;
//! * `pd`: the prefill side's held blocks and the decode side's pull;
//! * `kv_events`: vLLM's KV events of each step;
//! * `timeouts`: clients that give up;
//! * `drain`: what an autoscaler does to a replica (evict, slow down).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::event::{EventKey, EventQueue};
use crate::kv::events::{CacheChange, KvEvent, KvEventBatch};
use crate::kv::offload::{LoadTicket, OffloadStats, OffloadTiers};
use crate::kv::transfer::{KvTransferStats, Link};
use crate::kv::{BlockTable, KvCache};
use crate::latency::{BatchEntry, InstanceLoad, LatencyModel, StepBatch};
use crate::request::{PromptHashMemo, Request, RequestId, RequestMeta, RequestRecord, extend_block_hashes};
use crate::scheduler::{InstanceConfig, InstanceConfigError, WaitKey, WaitQueue};
use crate::time::Micros;
use crate::warmup::MoeKernelCache;

mod arrival;
mod drain;
mod kv_events;
mod kv_loading;
mod pd;
mod step;
mod timeouts;

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

    fn advance_clock(&mut self, t: Micros) {
        debug_assert!(t >= self.now, "clock went backwards: {} -> {}", self.now, t);
        self.now = t;
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
    use crate::request::TokenSeq;

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
