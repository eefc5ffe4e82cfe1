//! Requests, their token content, and the record each one leaves behind.
//!
//! A prompt is not a vector of token ids: it is a short list of [`TokenRun`]s,
//! each either synthetic (token `i` of the run is a pure function of the run's
//! seed and position) or explicit ids. Requests that share a system prompt
//! share its run, so their KV blocks hash identically and the simulated prefix
//! cache hits exactly as vLLM's would, without materialising millions of ids.

use std::sync::Arc;

use crate::rng::mix64;
use crate::time::Micros;

/// Globally unique request identifier, assigned in arrival order by the workload.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// A contiguous run of prompt tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenRun {
    /// Tokens `offset .. offset + len` of the infinite synthetic stream `seed`.
    Synthetic {
        /// Identity of the stream; equal seeds mean equal tokens.
        seed: u64,
        /// Position of the run's first token in the stream.
        offset: u32,
        /// Number of tokens.
        len: u32,
    },
    /// Real token ids (for example from an HTTP request's `prompt_token_ids`).
    Explicit(Arc<[u32]>),
}

impl TokenRun {
    /// A fresh synthetic run of `len` tokens starting at position 0 of stream `seed`.
    pub fn synthetic(seed: u64, len: u32) -> TokenRun {
        TokenRun::Synthetic { seed, offset: 0, len }
    }

    /// Number of tokens in the run.
    pub fn len(&self) -> u32 {
        match self {
            TokenRun::Synthetic { len, .. } => *len,
            TokenRun::Explicit(ids) => ids.len() as u32,
        }
    }

    /// Whether the run has no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A token sequence: the concatenation of its runs.
///
/// Guarantee: runs are canonical (no empty runs; two adjacent synthetic runs
/// that continue the same stream are merged), so equal token content always
/// has equal runs and therefore equal block hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenSeq {
    runs: Vec<TokenRun>,
    len: u32,
}

impl TokenSeq {
    /// An empty sequence.
    pub fn new() -> TokenSeq {
        TokenSeq::default()
    }

    /// A sequence of one synthetic run.
    pub fn synthetic(seed: u64, len: u32) -> TokenSeq {
        let mut s = TokenSeq::new();
        s.push(TokenRun::synthetic(seed, len));
        s
    }

    /// Appends a run, keeping the canonical form.
    pub fn push(&mut self, run: TokenRun) {
        if run.is_empty() {
            return;
        }
        self.len = self.len.saturating_add(run.len());
        if let (Some(TokenRun::Synthetic { seed: s0, offset: o0, len: l0 }), TokenRun::Synthetic { seed, offset, len }) =
            (self.runs.last_mut(), &run)
            && *s0 == *seed
            && o0.checked_add(*l0) == Some(*offset)
        {
            *l0 += *len;
            return;
        }
        if self.runs.len() == self.runs.capacity() {
            // Most prompts are one or two runs: grow 1, 2, 4, … rather than
            // from Vec's minimum of four.
            self.runs.reserve_exact(self.runs.len().max(1));
        }
        self.runs.push(run);
    }

    /// Appends all runs of `other`.
    pub fn extend(&mut self, other: &TokenSeq) {
        for r in &other.runs {
            self.push(r.clone());
        }
    }

    /// Total number of tokens.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the sequence is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The canonical runs.
    pub fn runs(&self) -> &[TokenRun] {
        &self.runs
    }
}

/// Seed of the synthetic stream holding a request's generated tokens.
pub fn output_stream_seed(id: RequestId, salt: u64) -> u64 {
    mix64(id.0 ^ mix64(salt ^ 0x6f75_7470_7574))
}

/// Computes chained hashes of the full `block_size`-token blocks of
/// `prompt ++ output` (the first `output_len` tokens of stream `output_seed`),
/// appending hashes for blocks `hashes.len() ..` up to the last full block.
///
/// The hash of block `k` covers its content and the hash of block `k-1`, as
/// vLLM's `hash_block_tokens` does, so equal hashes mean equal prefixes.
pub fn extend_block_hashes(prompt: &TokenSeq, output_seed: u64, output_len: u32, block_size: u32, hashes: &mut Vec<u64>) {
    let total = prompt.len() + output_len;
    let full_blocks = (total / block_size) as usize;
    if hashes.len() >= full_blocks {
        return;
    }
    hashes.reserve(full_blocks - hashes.len());
    let output_run = TokenRun::Synthetic { seed: output_seed, offset: 0, len: output_len };
    let runs = prompt.runs().iter().chain(std::iter::once(&output_run));
    // Walk runs, skipping tokens of blocks already hashed.
    let mut block = hashes.len();
    let mut pos_in_block = 0u32;
    let mut skip = block as u64 * u64::from(block_size);
    let mut h = hashes.last().copied().unwrap_or(0x0b11_5b10_c4a5_4000);
    let mut acc = start_block(h);
    // The output run may continue a synthetic stream identical to the last
    // prompt run only by coincidence of seeds; treat it as a separate piece,
    // which is what canonical form would give for distinct streams.
    for run in runs {
        let mut run_pos = 0u32;
        let run_len = run.len();
        if skip >= u64::from(run_len) {
            skip -= u64::from(run_len);
            continue;
        }
        run_pos += skip as u32;
        skip = 0;
        while run_pos < run_len {
            let take = (block_size - pos_in_block).min(run_len - run_pos);
            acc = absorb_piece(acc, run, run_pos, take);
            run_pos += take;
            pos_in_block += take;
            if pos_in_block == block_size {
                h = mix64(acc);
                hashes.push(h);
                block += 1;
                if block == full_blocks {
                    return;
                }
                pos_in_block = 0;
                acc = start_block(h);
            }
        }
    }
}

/// Slots of [`PromptHashMemo`]: how many recurring prompts and shared
/// prompt heads it remembers at once.
const PROMPT_MEMO_SLOTS: u64 = 256;

/// The longest prompt (or first run) [`PromptHashMemo`] keeps, in blocks:
/// with its slots, at most 1 MiB of hashes per instance however long the
/// prompts. Longer ones are hashed each time, at a cost that is small
/// beside their prefill.
const PROMPT_MEMO_MAX_BLOCKS: usize = 512;

/// The block hashes of recently seen synthetic prompts and of their leading
/// runs, so that a prompt seen before (a dataset cycled through, a
/// benchmark's fixed prompt set) is not hashed again, and one that starts
/// with a run seen before (a shared system prompt) hashes only what follows
/// it: a prompt's block `k` covers its first `(k + 1) · block_size` tokens,
/// so every full block inside a run sequence hashes the same in every prompt
/// that starts with it. Direct-mapped by the runs (`PROMPT_MEMO_SLOTS`
/// slots, the latest of a slot wins, entries compared run by run, none
/// longer than `PROMPT_MEMO_MAX_BLOCKS`), so its memory is bounded and it
/// allocates only while its slots fill and grow.
/// Guarantees: [`PromptHashMemo::prompt_hashes`] gives exactly what
/// [`extend_block_hashes`] gives for the prompt.
#[derive(Debug)]
pub struct PromptHashMemo {
    block_size: u32,
    max_blocks: usize,
    slots: Vec<MemoEntry>,
}

/// A synthetic run's identity: `(seed, offset, len)`.
type RunId = (u64, u32, u32);

fn run_id(run: &TokenRun) -> Option<RunId> {
    match *run {
        TokenRun::Synthetic { seed, offset, len } => Some((seed, offset, len)),
        TokenRun::Explicit(_) => None,
    }
}

#[derive(Debug, Default)]
struct MemoEntry {
    /// The leading runs of a prompt (empty: a slot no prompt has taken).
    runs: Vec<RunId>,
    /// The hashes of the full blocks inside them.
    hashes: Vec<u64>,
}

impl PromptHashMemo {
    /// An empty memo for prompts cut into `block_size`-token blocks.
    pub fn new(block_size: u32) -> PromptHashMemo {
        PromptHashMemo::with_slots(block_size, PROMPT_MEMO_SLOTS, PROMPT_MEMO_MAX_BLOCKS)
    }

    fn with_slots(block_size: u32, slots: u64, max_blocks: usize) -> PromptHashMemo {
        PromptHashMemo { block_size, max_blocks, slots: (0..slots).map(|_| MemoEntry::default()).collect() }
    }

    /// Appends to the empty `hashes` the hashes of every full block of
    /// `prompt`, as `extend_block_hashes(prompt, _, 0, block_size, hashes)`.
    pub fn prompt_hashes(&mut self, prompt: &TokenSeq, hashes: &mut Vec<u64>) {
        debug_assert!(hashes.is_empty(), "hashes of a prompt start from its first block");
        let runs = prompt.runs();
        if runs.is_empty() || !runs.iter().all(|r| run_id(r).is_some()) {
            return extend_block_hashes(prompt, 0, 0, self.block_size, hashes);
        }
        let whole = self.slot_of(runs);
        if self.slots[whole].holds(runs) {
            return hashes.extend_from_slice(&self.slots[whole].hashes);
        }
        let head = &runs[..1];
        let head_slot = self.slot_of(head);
        let head_blocks = (runs[0].len() / self.block_size) as usize;
        let head_known = runs.len() > 1 && self.slots[head_slot].holds(head);
        if head_known {
            hashes.extend_from_slice(&self.slots[head_slot].hashes);
        }
        extend_block_hashes(prompt, 0, 0, self.block_size, hashes);
        if runs.len() > 1 && !head_known && (1..=self.max_blocks).contains(&head_blocks) {
            self.slots[head_slot].take(head, &hashes[..head_blocks]);
        }
        if hashes.len() <= self.max_blocks {
            self.slots[whole].take(runs, hashes);
        }
    }

    fn slot_of(&self, runs: &[TokenRun]) -> usize {
        let mut h = 0x7072_6f6d_7074;
        for (seed, offset, len) in runs.iter().filter_map(run_id) {
            h = mix64(h ^ seed ^ (u64::from(offset) << 32 | u64::from(len)));
        }
        (h % self.slots.len() as u64) as usize
    }
}

impl MemoEntry {
    fn holds(&self, runs: &[TokenRun]) -> bool {
        self.runs.len() == runs.len() && self.runs.iter().zip(runs).all(|(&id, run)| run_id(run) == Some(id))
    }

    fn take(&mut self, runs: &[TokenRun], hashes: &[u64]) {
        self.runs.clear();
        self.runs.extend(runs.iter().filter_map(run_id));
        self.hashes.clear();
        self.hashes.extend_from_slice(hashes);
    }
}

fn start_block(parent: u64) -> u64 {
    mix64(parent ^ 0x626c_6f63_6b00)
}

fn absorb_piece(mut acc: u64, run: &TokenRun, start: u32, len: u32) -> u64 {
    match run {
        TokenRun::Synthetic { seed, offset, .. } => {
            acc = mix64(acc ^ 0x5359_4e00 ^ seed.rotate_left(17));
            acc = mix64(acc ^ (u64::from(offset + start) << 32 | u64::from(len)));
        }
        TokenRun::Explicit(ids) => {
            for &t in &ids[start as usize..(start + len) as usize] {
                acc = mix64(acc ^ 0x544f_4b00_0000_0000 ^ u64::from(t));
            }
        }
    }
    acc
}

/// Interned name of a tenant; the names live in the run's label table.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantId(pub u32);

/// Interned name of an SLO class; the names live in the run's label table.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SloClassId(pub u16);

/// Names behind the interned ids of [`RequestMeta`], for reports. Index `i`
/// of each list names id `i`; missing entries are rendered as `#i`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    /// Client names, by `RequestMeta::client`.
    pub clients: Vec<String>,
    /// Tenant names, by `TenantId`.
    pub tenants: Vec<String>,
    /// SLO class names, by `SloClassId`.
    pub slo_classes: Vec<String>,
}

impl Labels {
    fn lookup(names: &[String], i: usize) -> String {
        names.get(i).cloned().unwrap_or_else(|| format!("#{i}"))
    }

    /// Name of client `i`.
    pub fn client(&self, i: u32) -> String {
        Self::lookup(&self.clients, i as usize)
    }

    /// Name of a tenant.
    pub fn tenant(&self, t: TenantId) -> String {
        Self::lookup(&self.tenants, t.0 as usize)
    }

    /// Name of an SLO class.
    pub fn slo_class(&self, c: SloClassId) -> String {
        Self::lookup(&self.slo_classes, c.0 as usize)
    }
}

/// Who sent a request and what it is owed: used by metrics breakdowns and by
/// cluster policies, never by the instance's physics (`session` and
/// `own_prompt_from` tell the KV caches which blocks no other request can
/// hit, which changes no result).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct RequestMeta {
    /// Index of the workload client that generated the request.
    pub client: u32,
    /// Tenant the request is billed to.
    pub tenant: TenantId,
    /// SLO class of the request.
    pub slo_class: SloClassId,
    /// Load stage (inference-perf stage index; 0 for single-stage workloads).
    pub stage: u32,
    /// Scheduling priority; higher is more urgent (set by a priority policy).
    pub priority: f64,
    /// Absolute deadline, when the workload gives one.
    pub deadline: Option<Micros>,
    /// When the client abandons the request if it has not finished by
    /// then, besides its own timeout (a load generator cancelling what is
    /// left of a stage, as inference-perf's sweep probe does): it ends
    /// [`Outcome::TimedOut`] at the earlier of the two.
    pub cancel_at: Option<Micros>,
    /// Multi-turn session id and 0-based round, for session workloads.
    pub session: Option<(u64, u32)>,
    /// The workload's guarantee that the prompt's tokens from this position
    /// on are the request's own: no other request's prompt holds them after
    /// the same tokens, so a KV block that includes one can be hit only by
    /// this request (its recomputation after a preemption). The offload
    /// tiers then store such blocks unindexed, as they store generated
    /// blocks outside sessions: no hit changes, and each block saves a
    /// probe and an index update. `None`: no guarantee. A workload sets it
    /// only where it draws each request fresh content (never for a session
    /// round, whose prompt the next round contains).
    pub own_prompt_from: Option<u32>,
}

/// One inference request as the workload issues it.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Unique id, increasing in arrival order.
    pub id: RequestId,
    /// When the client sends it.
    pub arrival: Micros,
    /// Prompt token content.
    pub prompt: TokenSeq,
    /// Output tokens to generate (`max_tokens` with `ignore_eos`); at least 1.
    pub max_output_tokens: u32,
    /// Seed of the synthetic stream of generated tokens.
    pub output_seed: u64,
    /// Labels for breakdowns and policies.
    pub meta: RequestMeta,
}

impl Request {
    /// Prompt length in tokens.
    pub fn prompt_tokens(&self) -> u32 {
        self.prompt.len()
    }
}

/// Why a request was refused without running.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// prompt + max output tokens exceed `max_model_len` (vLLM answers HTTP 400).
    ExceedsMaxModelLen,
    /// The request needs more KV blocks than the whole cache has.
    ExceedsKvCapacity,
}

impl DropReason {
    /// Stable snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::ExceedsMaxModelLen => "exceeds_max_model_len",
            DropReason::ExceedsKvCapacity => "exceeds_kv_capacity",
        }
    }

    /// Every reason, in report order.
    pub const ALL: [DropReason; 2] = [DropReason::ExceedsMaxModelLen, DropReason::ExceedsKvCapacity];
}

/// How a request's life ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// All output tokens were generated.
    Completed,
    /// Refused on arrival.
    Dropped(DropReason),
    /// The client gave up (its timeout expired or it disconnected); the
    /// server aborted the request.
    TimedOut,
    /// Refused by a cluster's admission policy before reaching any instance,
    /// for the reason the policy names (`token_bucket_empty`, ...).
    Rejected(&'static str),
}

impl Outcome {
    /// Its name in reports: `completed`, `timed_out`, or the drop or
    /// rejection reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::TimedOut => "timed_out",
            Outcome::Dropped(reason) => reason.as_str(),
            Outcome::Rejected(reason) => reason,
        }
    }
}

/// Everything measured about one request, emitted exactly once when it ends.
///
/// Times are as seen at the serving API (they include the latency model's
/// queueing, per-token and completion overheads).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// The request's id.
    pub id: RequestId,
    /// Its labels.
    pub meta: RequestMeta,
    /// Instance that served it; `None` for a request rejected before routing.
    pub instance: Option<u32>,
    /// How it ended.
    pub outcome: Outcome,
    /// When the client sent it.
    pub arrival: Micros,
    /// When it reached the instance's engine (after the arrival-to-queue
    /// delay): its wait-queue entry, or under async scheduling its input
    /// queue's, when a step was running.
    pub enqueued: Option<Micros>,
    /// When it entered the scheduler's wait queue (vLLM's `QUEUED` event, at
    /// `add_request`): `enqueued`, or under async scheduling, for a request
    /// that reached the engine while a step ran, the step boundary that
    /// took it from the input queue.
    pub queued: Option<Micros>,
    /// When it was first scheduled.
    pub first_scheduled: Option<Micros>,
    /// When its first output token reached the API.
    pub first_token: Option<Micros>,
    /// When its last output token reached the API.
    pub last_token: Option<Micros>,
    /// When it ended (completion with its overhead, drop, or timeout).
    pub finished: Micros,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens generated.
    pub output_tokens: u32,
    /// Prompt tokens served from the prefix cache at first scheduling.
    pub cached_prompt_tokens: u32,
    /// Times it was preempted.
    pub preemptions: u32,
    /// Prompt tokens loaded from the offload tiers (CPU, disk, remote)
    /// instead of being recomputed, over all its admissions.
    pub loaded_prompt_tokens: u32,
    /// Time it waited off the scheduler for those loads
    /// (`WAITING_FOR_REMOTE_KVS`).
    pub kv_load_wait: Micros,
    /// Where its prompt was computed, when a prefill instance computed it
    /// (P/D); the decode side's times are the record's own (`enqueued`,
    /// `kv_load_wait` for the transfer, `first_scheduled`, `first_token`).
    pub pd: Option<PdPhases>,
}

/// The prefill side of a disaggregated request (P/D).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PdPhases {
    /// The prefill instance that computed its prompt.
    pub prefill_instance: u32,
    /// When the prompt entered that instance's wait queue.
    pub prefill_enqueued: Micros,
    /// When that instance first scheduled it.
    pub prefill_scheduled: Micros,
    /// When that instance finished it: its KV was ready to pull.
    pub prefill_finished: Micros,
}

impl RequestRecord {
    /// The record of `req` ending at `now` without being served (dropped on
    /// arrival, rejected by admission): no tokens, no cached prompt, no
    /// step times.
    pub fn unserved(req: &Request, instance: Option<u32>, outcome: Outcome, now: Micros) -> RequestRecord {
        RequestRecord {
            id: req.id,
            meta: req.meta,
            instance,
            outcome,
            arrival: req.arrival,
            enqueued: None,
            queued: None,
            first_scheduled: None,
            first_token: None,
            last_token: None,
            finished: now,
            input_tokens: req.prompt_tokens(),
            output_tokens: 0,
            cached_prompt_tokens: 0,
            preemptions: 0,
            loaded_prompt_tokens: 0,
            kv_load_wait: Micros::ZERO,
            pd: None,
        }
    }

    /// Time to first token, for requests that produced one.
    pub fn ttft(&self) -> Option<Micros> {
        self.first_token.map(|t| t - self.arrival)
    }

    /// End-to-end latency of a completed request.
    pub fn e2e(&self) -> Option<Micros> {
        (self.outcome == Outcome::Completed).then(|| self.finished - self.arrival)
    }

    /// Mean time per output token excluding the first, in µs, for completed
    /// requests with at least two tokens.
    pub fn tpot_us(&self) -> Option<f64> {
        match (self.outcome, self.first_token, self.last_token) {
            (Outcome::Completed, Some(first), Some(last)) if self.output_tokens >= 2 => {
                Some((last - first).as_us() as f64 / f64::from(self.output_tokens - 1))
            }
            _ => None,
        }
    }

    /// Queue time: from entering the scheduler's wait queue to first being
    /// scheduled (vLLM's `request_queue_time`).
    pub fn scheduling_delay(&self) -> Option<Micros> {
        match (self.queued, self.first_scheduled) {
            (Some(q), Some(s)) => Some(s - q),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(seq: &TokenSeq, out_seed: u64, out_len: u32, bs: u32) -> Vec<u64> {
        let mut h = Vec::new();
        extend_block_hashes(seq, out_seed, out_len, bs, &mut h);
        h
    }

    #[test]
    fn canonical_form_merges_contiguous_synthetic_runs() {
        let mut a = TokenSeq::new();
        a.push(TokenRun::Synthetic { seed: 1, offset: 0, len: 10 });
        a.push(TokenRun::Synthetic { seed: 1, offset: 10, len: 22 });
        assert_eq!(a, TokenSeq::synthetic(1, 32));
        assert_eq!(hashes(&a, 9, 0, 16), hashes(&TokenSeq::synthetic(1, 32), 9, 0, 16));
    }

    #[test]
    fn shared_prefix_shares_leading_block_hashes() {
        let mut a = TokenSeq::synthetic(1, 40);
        a.push(TokenRun::synthetic(2, 40));
        let mut b = TokenSeq::synthetic(1, 40);
        b.push(TokenRun::synthetic(3, 40));
        let (ha, hb) = (hashes(&a, 0, 0, 16), hashes(&b, 0, 0, 16));
        assert_eq!(ha.len(), 5);
        assert_eq!(ha[..2], hb[..2]); // blocks 0..32 are pure prefix
        assert_ne!(ha[2], hb[2]); // block 32..48 mixes prefix and the private part
    }

    #[test]
    fn incremental_hashing_equals_one_shot() {
        let seq = TokenSeq::synthetic(5, 37);
        let full = hashes(&seq, 77, 60, 16);
        let mut inc = Vec::new();
        for out in 0..=60 {
            extend_block_hashes(&seq, 77, out, 16, &mut inc);
        }
        assert_eq!(full, inc);
        assert_eq!(full.len(), 97 / 16);
    }

    #[test]
    fn accumulated_context_reuses_previous_round_hashes() {
        // Round 2 prompt = round 1 prompt + round 1 output + new question.
        let round1 = TokenSeq::synthetic(1, 50);
        let r1 = hashes(&round1, 42, 30, 16);
        let mut round2 = round1.clone();
        round2.push(TokenRun::synthetic(42, 30));
        round2.push(TokenRun::synthetic(3, 20));
        let r2 = hashes(&round2, 43, 0, 16);
        assert_eq!(r2[..r1.len()], r1[..]);
    }

    proptest::proptest! {
        /// Whatever prompts came before (recurring ones, shared heads,
        /// explicit ids, slots taken by other prompts, prompts too long to
        /// keep), the memo hashes a prompt exactly as hashing it from
        /// scratch does.
        #[test]
        fn the_prompt_memo_hashes_as_hashing_from_scratch(
            prompts in proptest::collection::vec(proptest::collection::vec((0u64..3, 0u32..2, proptest::sample::select(vec![0u32, 5, 16, 33]), proptest::bool::weighted(0.1)), 1..4), 1..40),
            block_size in proptest::sample::select(vec![1u32, 4, 16]),
            slots in 1u64..5,
            max_blocks in 0usize..40,
        ) {
            let mut memo = PromptHashMemo::with_slots(block_size, slots, max_blocks);
            for runs in prompts {
                let mut seq = TokenSeq::new();
                for (seed, offset, len, explicit) in runs {
                    seq.push(if explicit { TokenRun::Explicit((0..len).map(|t| t ^ seed as u32).collect::<Vec<u32>>().into()) } else { TokenRun::Synthetic { seed, offset, len } });
                }
                let mut got = Vec::new();
                memo.prompt_hashes(&seq, &mut got);
                proptest::prop_assert_eq!(got, hashes(&seq, 0, 0, block_size));
            }
        }
    }

    #[test]
    fn explicit_tokens_hash_by_value() {
        let ids: Arc<[u32]> = (0..32).collect::<Vec<u32>>().into();
        let mut a = TokenSeq::new();
        a.push(TokenRun::Explicit(ids.clone()));
        let mut b = TokenSeq::new();
        b.push(TokenRun::Explicit(ids[..16].into()));
        b.push(TokenRun::Explicit(ids[16..].into()));
        assert_eq!(hashes(&a, 0, 0, 16), hashes(&b, 0, 0, 16));
    }
}
