//! Scheduler configuration and the wait-queue orderings.
//!
//! The step itself lives in [`crate::instance`], next to the state it
//! mutates; this module holds the knobs (named as vLLM's flags) and the
//! queue disciplines the cluster's instance-scheduler policies select.

use std::collections::{BTreeSet, VecDeque};

use thiserror::Error;

use crate::time::Micros;

/// Order in which waiting requests are admitted.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum QueuePolicy {
    /// First come, first served (vLLM `--scheduling-policy fcfs`); preempted
    /// requests return to the front.
    #[default]
    Fcfs,
    /// Highest priority first, then arrival (vLLM `--scheduling-policy priority`).
    Priority,
    /// Smallest `prompt + max_tokens` first, then arrival.
    ShortestJobFirst,
    /// Lowest priority first: a deliberately pathological order.
    ReversePriority,
}

/// Which running request is preempted when KV blocks run out.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum PreemptionVictim {
    /// The most recently admitted running request (vLLM FCFS behaviour).
    #[default]
    Tail,
    /// The lowest-priority running request, latest arrival first among equals
    /// (vLLM priority behaviour).
    LowestPriority,
}

/// The vLLM scheduler knobs of one instance.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// `--max-num-seqs`: requests in the running batch.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`: tokens per step.
    pub max_num_batched_tokens: u32,
    /// `--max-model-len`: prompt + output tokens per request.
    pub max_model_len: u32,
    /// `--enable-chunked-prefill`: split prompts across steps.
    pub enable_chunked_prefill: bool,
    /// `--long-prefill-token-threshold`: cap on one request's tokens per step (0 = off).
    pub long_prefill_token_threshold: u32,
    /// `--async-scheduling` (vLLM's default since 0.14, January 2026): the next step is
    /// scheduled while the current one runs, so a request entering the wait
    /// queue during a step can join only the step after next.
    pub async_scheduling: bool,
    /// Wait-queue order.
    pub queue_policy: QueuePolicy,
    /// Preemption victim choice.
    pub preemption: PreemptionVictim,
}

/// The full configuration of one instance.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceConfig {
    /// Scheduler knobs.
    pub scheduler: SchedulerConfig,
    /// GPU KV blocks (`--num-gpu-blocks-override`), including vLLM's reserved null block.
    pub num_gpu_blocks: u64,
    /// `--block-size`, tokens per KV block.
    pub block_size: u32,
    /// `--enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// When set, a request unfinished this long after its arrival is given up
    /// by its client and aborted by the server.
    pub client_timeout: Option<Micros>,
    /// Tiers below the GPU cache (vLLM's native KV offloading, LMCache); `None`: GPU only.
    pub offload: Option<crate::kv::offload::OffloadConfig>,
    /// How it receives prompts computed by a prefill instance (a decode
    /// instance of a disaggregated deployment); `None`: it computes its own.
    pub kv_transfer: Option<crate::kv::transfer::KvTransferConfig>,
    /// Record vLLM's KV events ([`crate::kv::events`]) and hand them to
    /// observers once per step. Off by default: it costs an allocation per
    /// stored block.
    pub kv_events: bool,
    /// vLLM `--enable-expert-parallel`: a MoE layer's experts are spread
    /// whole over the tensor-parallel ranks (EP size = TP) and its tokens
    /// reach them by an all-to-all instead of the layer's all-reduce. No
    /// effect on a dense model or at TP 1.
    pub expert_parallel: bool,
    /// vLLM's hybrid KV cache manager, for a model with sliding-window
    /// layers: `num_gpu_blocks` then counts blocks of one group's layers.
    /// `None`: one group of every layer (every other model).
    pub hybrid_kv: Option<HybridKv>,
    /// How the server compiles its fused-MoE kernels on first use
    /// ([`crate::warmup::MoeKernelCache`]); `None` for a dense model or a
    /// server whose Triton cache is warm.
    pub moe_kernel_warmup: Option<crate::warmup::MoeKernelWarmup>,
}

/// vLLM's hybrid KV cache manager for a model with sliding-window layers
/// ([`crate::kv::KvGroups`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HybridKv {
    /// How the layers are grouped.
    pub groups: crate::kv::KvGroups,
    /// The blocks vLLM allocates when the manager is off (KV events or a KV
    /// connector are configured, or `--disable-hybrid-kv-cache-manager`):
    /// one group of every layer, sliding-window ones keeping every token.
    pub unified_blocks: u64,
}

/// A configuration that cannot run.
#[derive(Debug, Error, PartialEq)]
pub enum InstanceConfigError {
    /// A knob that must be at least 1 is 0.
    #[error("--{flag} {}", self.detail())]
    Zero {
        /// Flag name.
        flag: &'static str,
    },
    /// Every running sequence needs at least one token of the step budget, so
    /// vLLM refuses a budget below the seat count.
    #[error("--max-num-batched-tokens {}", self.detail())]
    BudgetBelowSeats {
        /// max_num_batched_tokens.
        budget: u32,
        /// max_num_seqs.
        seqs: u32,
    },
    /// Without chunked prefill every prompt (and every recomputation after a
    /// preemption) must fit one step, so vLLM refuses this configuration.
    #[error("--max-num-batched-tokens {}", self.detail())]
    BudgetBelowModelLen {
        /// max_num_batched_tokens.
        budget: u32,
        /// max_model_len.
        max_model_len: u32,
    },
    /// Cache geometry is invalid.
    #[error(transparent)]
    Kv(#[from] crate::kv::KvConfigError),
    /// The CPU tier cannot be built.
    #[error(transparent)]
    Offload(#[from] crate::kv::offload::OffloadConfigError),
    /// vLLM turns its hybrid KV cache manager off with KV events or a KV
    /// connector ([`InstanceConfig::disable_hybrid_kv`]).
    #[error("the hybrid KV cache manager cannot run with {0}, as in vLLM; turn it off first")]
    HybridKv(&'static str),
    /// A P/D transfer bandwidth that is not a positive finite number.
    #[error("the KV transfer bandwidth must be a positive number of bytes per second, got {0}")]
    TransferBandwidth(f64),
}

impl InstanceConfigError {
    /// The server flag this error is about (`max-num-seqs`), when it is
    /// about one: what a front end names, as a flag or as the file the value
    /// came from, before [`InstanceConfigError::detail`].
    pub fn flag(&self) -> Option<&'static str> {
        match self {
            InstanceConfigError::Zero { flag } => Some(flag),
            InstanceConfigError::BudgetBelowSeats { .. } | InstanceConfigError::BudgetBelowModelLen { .. } => {
                Some("max-num-batched-tokens")
            }
            _ => None,
        }
    }

    /// What is wrong, after the flag's name when [`InstanceConfigError::flag`] gives one.
    pub fn detail(&self) -> String {
        match self {
            InstanceConfigError::Zero { .. } => "must be at least 1, got 0".into(),
            InstanceConfigError::BudgetBelowSeats { budget, seqs } => format!(
                "{budget} is smaller than --max-num-seqs {seqs}; every running request needs at least one token per step, so raise \
                 --max-num-batched-tokens or lower --max-num-seqs"
            ),
            InstanceConfigError::BudgetBelowModelLen { budget, max_model_len } => format!(
                "{budget} is smaller than --max-model-len {max_model_len} with chunked prefill disabled; raise --max-num-batched-tokens, \
                 lower --max-model-len or enable chunked prefill"
            ),
            other => other.to_string(),
        }
    }
}

impl InstanceConfig {
    /// An instance with the given seats, token budget, model length and KV
    /// blocks, and everything else as a plain vLLM v1 server: 16-token
    /// blocks, prefix caching and chunked prefill on, no long-prefill
    /// threshold, synchronous scheduling, FCFS with tail preemption, no
    /// client timeout. Not validated; [`InstanceConfig::validate`] does that.
    pub fn basic(max_num_seqs: u32, max_num_batched_tokens: u32, max_model_len: u32, num_gpu_blocks: u64) -> Self {
        InstanceConfig {
            scheduler: SchedulerConfig {
                max_num_seqs,
                max_num_batched_tokens,
                max_model_len,
                enable_chunked_prefill: true,
                long_prefill_token_threshold: 0,
                async_scheduling: false,
                queue_policy: QueuePolicy::Fcfs,
                preemption: PreemptionVictim::Tail,
            },
            num_gpu_blocks,
            block_size: 16,
            enable_prefix_caching: true,
            client_timeout: None,
            offload: None,
            kv_transfer: None,
            kv_events: false,
            expert_parallel: false,
            hybrid_kv: None,
            moe_kernel_warmup: None,
        }
    }

    /// How the KV cache's layers are grouped: the hybrid manager's groups, or
    /// one full-attention group.
    pub fn kv_groups(&self) -> crate::kv::KvGroups {
        self.hybrid_kv.map_or(crate::kv::KvGroups::FULL, |h| h.groups)
    }

    /// Turns vLLM's hybrid KV cache manager off, as vLLM does when KV events
    /// or a KV connector (offloading, P/D) are configured: one group of every
    /// layer, with the blocks that leaves. No-op when it is off.
    pub fn disable_hybrid_kv(&mut self) {
        if let Some(h) = self.hybrid_kv.take() {
            self.num_gpu_blocks = h.unified_blocks;
        }
    }

    /// Checks the knobs against each other.
    pub fn validate(&self) -> Result<(), InstanceConfigError> {
        let s = &self.scheduler;
        for (flag, v) in [
            ("max-num-seqs", s.max_num_seqs),
            ("max-num-batched-tokens", s.max_num_batched_tokens),
            ("max-model-len", s.max_model_len),
            ("block-size", self.block_size),
        ] {
            if v == 0 {
                return Err(InstanceConfigError::Zero { flag });
            }
        }
        if self.num_gpu_blocks < 2 {
            return Err(crate::kv::KvConfigError::TooFewBlocks(self.num_gpu_blocks).into());
        }
        if s.max_num_batched_tokens < s.max_num_seqs {
            return Err(InstanceConfigError::BudgetBelowSeats { budget: s.max_num_batched_tokens, seqs: s.max_num_seqs });
        }
        if !s.enable_chunked_prefill && s.max_num_batched_tokens < s.max_model_len {
            return Err(InstanceConfigError::BudgetBelowModelLen { budget: s.max_num_batched_tokens, max_model_len: s.max_model_len });
        }
        if let Some(o) = &self.offload {
            o.validate()?;
        }
        if let Some(h) = &self.hybrid_kv {
            let with = [
                (self.kv_events, "KV events"),
                (self.offload.is_some(), "KV offloading"),
                (self.kv_transfer.is_some(), "a P/D KV transfer"),
            ];
            if let Some((_, what)) = with.iter().find(|(on, _)| *on) {
                return Err(InstanceConfigError::HybridKv(what));
            }
            if h.unified_blocks < 2 {
                return Err(crate::kv::KvConfigError::TooFewBlocks(h.unified_blocks).into());
            }
        }
        if let Some(t) = &self.kv_transfer {
            if !t.link.is_valid() {
                return Err(InstanceConfigError::TransferBandwidth(t.link.bytes_per_s));
            }
            if t.block_bytes == 0 {
                return Err(crate::kv::offload::OffloadConfigError::ZeroBlockBytes.into());
            }
        }
        Ok(())
    }
}

/// Maps an `f64` to an `i64` with the same total order (`f64::total_cmp`).
fn ordered_bits(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

/// Sort key of a waiting request under an ordered policy; ties fall back to
/// arrival time, then id, so the order is total.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct WaitKey {
    primary: i64,
    arrival: Micros,
    id: u64,
}

impl WaitKey {
    pub(crate) fn new(policy: QueuePolicy, priority: f64, job_tokens: u32, arrival: Micros, id: u64) -> WaitKey {
        let primary = match policy {
            QueuePolicy::Fcfs => 0,
            QueuePolicy::Priority => ordered_bits(-priority),
            QueuePolicy::ReversePriority => ordered_bits(priority),
            QueuePolicy::ShortestJobFirst => i64::from(job_tokens),
        };
        WaitKey { primary, arrival, id }
    }
}

/// The wait queue of one instance, holding slab slots.
pub(crate) enum WaitQueue {
    Fifo(VecDeque<u32>),
    Ordered(BTreeSet<(WaitKey, u32)>),
}

impl WaitQueue {
    pub(crate) fn new(policy: QueuePolicy) -> WaitQueue {
        match policy {
            QueuePolicy::Fcfs => WaitQueue::Fifo(VecDeque::new()),
            _ => WaitQueue::Ordered(BTreeSet::new()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            WaitQueue::Fifo(q) => q.len(),
            WaitQueue::Ordered(s) => s.len(),
        }
    }

    pub(crate) fn peek(&self) -> Option<u32> {
        match self {
            WaitQueue::Fifo(q) => q.front().copied(),
            WaitQueue::Ordered(s) => s.first().map(|&(_, slot)| slot),
        }
    }

    pub(crate) fn pop(&mut self) -> Option<u32> {
        match self {
            WaitQueue::Fifo(q) => q.pop_front(),
            WaitQueue::Ordered(s) => s.pop_first().map(|(_, slot)| slot),
        }
    }

    /// Adds a newly arrived request (back of a FIFO).
    pub(crate) fn push_new(&mut self, key: WaitKey, slot: u32) {
        match self {
            WaitQueue::Fifo(q) => q.push_back(slot),
            WaitQueue::Ordered(s) => {
                s.insert((key, slot));
            }
        }
    }

    /// Returns a preempted request (front of a FIFO, as vLLM's `prepend_request`).
    pub(crate) fn push_preempted(&mut self, key: WaitKey, slot: u32) {
        match self {
            WaitQueue::Fifo(q) => q.push_front(slot),
            WaitQueue::Ordered(s) => {
                s.insert((key, slot));
            }
        }
    }

    /// Removes a specific request (client timeout); O(queue) for FIFO.
    pub(crate) fn remove(&mut self, key: WaitKey, slot: u32) -> bool {
        match self {
            WaitQueue::Fifo(q) => match q.iter().position(|&s| s == slot) {
                Some(i) => {
                    q.remove(i);
                    true
                }
                None => false,
            },
            WaitQueue::Ordered(s) => s.remove(&(key, slot)),
        }
    }

    /// Slots in admission order (for snapshots and anomaly checks); does not allocate.
    pub(crate) fn iter(&self) -> WaitIter<'_> {
        match self {
            WaitQueue::Fifo(q) => WaitIter::Fifo(q.iter()),
            WaitQueue::Ordered(s) => WaitIter::Ordered(s.iter()),
        }
    }
}

/// Iterator over the slots of a [`WaitQueue`] in admission order.
pub(crate) enum WaitIter<'a> {
    Fifo(std::collections::vec_deque::Iter<'a, u32>),
    Ordered(std::collections::btree_set::Iter<'a, (WaitKey, u32)>),
}

impl Iterator for WaitIter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        match self {
            WaitIter::Fifo(it) => it.next().copied(),
            WaitIter::Ordered(it) => it.next().map(|&(_, slot)| slot),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_bits_preserves_float_order() {
        let xs = [-1e300, -2.5, -0.0, 0.0, 1e-300, 3.0, f64::INFINITY];
        for w in xs.windows(2) {
            assert!(ordered_bits(w[0]) <= ordered_bits(w[1]), "{} {}", w[0], w[1]);
        }
    }

    #[test]
    fn priority_queue_orders_by_priority_then_arrival() {
        let mut q = WaitQueue::new(QueuePolicy::Priority);
        q.push_new(WaitKey::new(QueuePolicy::Priority, 1.0, 0, Micros(5), 0), 0);
        q.push_new(WaitKey::new(QueuePolicy::Priority, 9.0, 0, Micros(9), 1), 1);
        q.push_new(WaitKey::new(QueuePolicy::Priority, 9.0, 0, Micros(7), 2), 2);
        assert_eq!([q.pop(), q.pop(), q.pop()], [Some(2), Some(1), Some(0)]);
    }

    #[test]
    fn fifo_puts_preempted_in_front() {
        let k = WaitKey::new(QueuePolicy::Fcfs, 0.0, 0, Micros(0), 0);
        let mut q = WaitQueue::new(QueuePolicy::Fcfs);
        q.push_new(k, 1);
        q.push_new(k, 2);
        q.push_preempted(k, 3);
        assert!(q.remove(k, 1));
        assert_eq!(q.iter().collect::<Vec<_>>(), [3, 2]);
    }
}
