//! The step-time interface of the kernel: what the scheduler hands a
//! latency model ([`StepBatch`]: what each request does in this step, and
//! the instance's state) and what it gets back (the step's duration and the
//! CPU-side overheads around it, the α/β split of `latency-model-research.md`).
//! The α part is three numbers applied by the instance to each request's
//! timeline:
//!
//! ```text
//! arrival ──queueing_delay──► enqueued ─ … ─ step end ─► token k at step_end_k + token_emission_delay + k·output_token_overhead
//!                                                         finished = last token + completion_overhead
//! ```
//!
//! The per-token overhead accumulates (each inter-token gap is the step gap
//! plus the overhead), as in BLIS's alpha model; the emission delay does not
//! (it is the fixed time from a step's end to its tokens reaching the API).
//! Models are immutable after construction and shared freely; anything they
//! need about the model, hardware or server knobs is captured when they are
//! built.
//!
//! The models themselves (roofline, trained-physics, unified-5,
//! physics-normalized), their feature bases, names and coefficient sets live
//! in `blis-physics`, above this crate; the kernel keeps [`Blackbox`], linear
//! in token counts, for its own tests and examples. Adding a model never
//! changes the scheduler.

mod blackbox;

pub use blackbox::Blackbox;

use crate::time::Micros;

/// One request's share of a step.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchEntry {
    /// Tokens already in the KV cache before this step (vLLM `num_computed_tokens`).
    pub computed_tokens: u32,
    /// Tokens processed in this step (`num_scheduled_tokens`).
    pub new_tokens: u32,
    /// The request's prompt length.
    pub prompt_tokens: u32,
}

impl BatchEntry {
    /// A decode entry processes one generated token after the whole prompt
    /// was computed; anything else (including recomputation after a
    /// preemption) is prefill work.
    pub fn is_decode(&self) -> bool {
        self.computed_tokens >= self.prompt_tokens
    }

    /// Tokens attended to by the last new token: `computed + new`.
    pub fn context_tokens(&self) -> u32 {
        self.computed_tokens + self.new_tokens
    }
}

/// What the instance looks like at a decision point: the observables the α
/// and β features of the physics-normalized model use.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct InstanceLoad {
    /// Requests in the running batch.
    pub running: u32,
    /// Requests in the wait queue.
    pub waiting: u32,
    /// Fraction of usable KV blocks in use.
    pub kv_usage: f64,
    /// Free KV blocks (including evictable cached ones).
    pub kv_free_blocks: u32,
    /// Exponential moving average (γ = 0.3) over steps of requests preempted
    /// per running request (`preempted / max(1, running)`, iteration 3).
    pub preemption_ema: f64,
}

/// The composition of one scheduler step.
#[derive(Copy, Clone, Debug)]
pub struct StepBatch<'a> {
    /// Per-request work, in scheduling order.
    pub entries: &'a [BatchEntry],
    /// Instance state after scheduling (running includes this step's requests).
    pub load: InstanceLoad,
    /// Requests preempted while forming this step.
    pub preempted: u32,
}

/// Aggregates of a step used by most models; computed in one pass.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BatchTotals {
    /// Prefill requests.
    pub num_prefill: u32,
    /// Prefill tokens (Σ new tokens of prefill entries).
    pub prefill_tokens: u64,
    /// Decode requests (= decode tokens).
    pub num_decode: u32,
    /// Σ context of decode entries (tokens already cached).
    pub decode_context_tokens: u64,
    /// Σ over prefill entries of new·(computed + new): chunk-aware attention work.
    pub prefill_attention_work: f64,
}

impl StepBatch<'_> {
    /// Counts and sums over the entries.
    pub fn totals(&self) -> BatchTotals {
        let mut t = BatchTotals::default();
        for e in self.entries {
            if e.is_decode() {
                t.num_decode += 1;
                t.decode_context_tokens += u64::from(e.computed_tokens);
            } else {
                t.num_prefill += 1;
                t.prefill_tokens += u64::from(e.new_tokens);
                t.prefill_attention_work += f64::from(e.new_tokens) * f64::from(e.context_tokens());
            }
        }
        t
    }

    /// Total tokens scheduled in the step.
    pub fn scheduled_tokens(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.new_tokens)).sum()
    }
}

/// A request's view when it reaches an instance, for the arrival-to-queue delay.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct QueueingInput {
    /// Prompt length.
    pub prompt_tokens: u32,
    /// Prompt tokens the prefix cache holds right now.
    pub prefix_hit_tokens: u32,
    /// Instance state at arrival.
    pub load: InstanceLoad,
}

/// A step-time and overhead model.
///
/// Guarantees expected of implementations: deterministic (same input, same
/// output), cost O(entries), no allocation, `step_time ≥ 1 µs` for a
/// non-empty batch.
pub trait LatencyModel: Send + Sync {
    /// Short name, as accepted by `--latency-model`.
    fn name(&self) -> &'static str;

    /// GPU time of one scheduler step.
    fn step_time(&self, batch: &StepBatch<'_>) -> Micros;

    /// Delay between a request reaching the instance and entering its wait
    /// queue (API parsing, tokenisation, hand-off to the engine core).
    /// Every client-side overhead is zero unless the model prices it.
    fn queueing_delay(&self, _input: &QueueingInput) -> Micros {
        Micros::ZERO
    }

    /// Extra time each output token takes to reach the API (detokenisation,
    /// streaming); accumulates over a request's tokens.
    fn output_token_overhead(&self) -> Micros {
        Micros::ZERO
    }

    /// Fixed time from the end of a step to its tokens reaching the API;
    /// does not accumulate.
    fn token_emission_delay(&self) -> Micros {
        Micros::ZERO
    }

    /// Fixed time between a request's last token and its completion.
    fn completion_overhead(&self) -> Micros {
        Micros::ZERO
    }
}

/// Rounds a step time in µs to whole microseconds, clamped to
/// [[`MIN_STEP`], [`MAX_STEP`]] (NaN becomes `MIN_STEP`).
pub fn step_micros(us: f64) -> Micros {
    if us >= MAX_STEP.as_us() as f64 {
        MAX_STEP
    } else if us >= 1.0 {
        Micros(us.round() as u64)
    } else {
        MIN_STEP
    }
}

/// The shortest step: what [`step_micros`] makes of a prediction below 1 µs
/// (negative, NaN). No real GPU step is this short, so a step at the floor
/// means the model's coefficients do not describe the batch.
pub const MIN_STEP: Micros = Micros(1);

/// The longest step, one hour: what [`step_micros`] makes of a larger
/// prediction, so absurd coefficients cannot run the clock to its end.
pub const MAX_STEP: Micros = Micros(3_600_000_000);

/// Rounds an overhead in µs: below half a microsecond (negatives, NaN) it
/// is 0, otherwise rounded and clamped as a step time ([`step_micros`]).
pub fn overhead_micros(us: f64) -> Micros {
    if us >= 0.5 { step_micros(us) } else { Micros::ZERO }
}
