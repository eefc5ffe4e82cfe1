//! `server-facts.yaml`: what a vLLM server's log records about it and
//! inference-perf does not (GPU, KV blocks, parallelism, scheduler limits,
//! caching, quantization, a CPU tier), and whether the run is judged on
//! latency or on its overload. [`crate::experiment::vllm_log`] reads the same facts
//! from the log itself.

use serde::{Deserialize, Serialize};

/// Most KV blocks an experiment may declare (10^8 blocks of 16 tokens is far
/// beyond any GPU); bounds memory on absurd input.
pub(crate) const MAX_GPU_BLOCKS: u64 = 100_000_000;

/// Whether a run is judged on latency or on predicting its overload.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Sub-saturation: latencies are compared.
    Active,
    /// More than 10 % of requests timed out: judged on whether BLIS predicts the overload.
    OverloadExcluded,
}

impl Status {
    /// The name used in files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::OverloadExcluded => "overload-excluded",
        }
    }
}

/// `server-facts.yaml`: facts the server log records and inference-perf does not.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ServerFacts {
    /// GPU name (a bundled GPU or alias, e.g. `H100-SXM-80GB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    /// Tensor-parallel degree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel_size: Option<u32>,
    /// `--data-parallel-size`: engine replicas behind vLLM's load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_size: Option<u32>,
    /// GPU KV blocks the server allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_gpu_blocks: Option<u64>,
    /// Tokens per KV block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// `--kv-cache-dtype` (`auto`, `fp8`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<String>,
    /// `--quantization` (`fp8`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// `--gpu-memory-utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<f64>,
    /// Prefix caching on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_prefix_caching: Option<bool>,
    /// Chunked prefill on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_chunked_prefill: Option<bool>,
    /// `--async-scheduling` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_scheduling: Option<bool>,
    /// `--enable-expert-parallel` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_expert_parallel: Option<bool>,
    /// `--max-num-seqs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u32>,
    /// `--max-num-batched-tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u32>,
    /// `--max-model-len`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u32>,
    /// vLLM V1's logged `GPU KV cache size`, in tokens, where
    /// `num_gpu_blocks` was read from it (`blis convert vllm-log` writes
    /// both). Read as one group's blocks it is the pool of a model whose
    /// layers all attend fully; for a model whose sliding-window layers
    /// vLLM's hybrid KV cache manager groups, BLIS reads the pool from it
    /// and the groups instead ([`ServerFacts::grouped_pool_blocks`]), as
    /// long as `num_gpu_blocks` is still its one-group reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<u64>,
    /// vLLM V1's logged `Maximum concurrency` for requests of
    /// `max_model_len` tokens: which of vLLM's two ways of logging a
    /// grouped cache's size `kv_cache_tokens` took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<f64>,
    /// `active` or `overload-excluded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Whether the server offloaded KV blocks to CPU memory: `true`,
    /// `false`, or `unknown` (on for some runs of a batch, capacity not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offload: Option<CpuOffloadFact>,
    /// Keys BLIS does not read (a typo, or a fact it does not simulate).
    #[serde(flatten)]
    pub other: std::collections::BTreeMap<String, serde_json::Value>,
}

/// `cpu_offload` in `server-facts.yaml`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "serde_json::Value", into = "serde_json::Value")]
pub enum CpuOffloadFact {
    /// The server offloaded KV blocks to CPU memory.
    On,
    /// It did not.
    Off,
    /// Not recorded: the server may have offloaded KV blocks.
    Unknown,
}

impl CpuOffloadFact {
    /// Whether a CPU tier may have been on (`true` or `unknown`).
    pub fn may_be_on(self) -> bool {
        self != CpuOffloadFact::Off
    }
}

impl From<CpuOffloadFact> for serde_json::Value {
    fn from(f: CpuOffloadFact) -> serde_json::Value {
        match f {
            CpuOffloadFact::On => true.into(),
            CpuOffloadFact::Off => false.into(),
            CpuOffloadFact::Unknown => "unknown".into(),
        }
    }
}

impl TryFrom<serde_json::Value> for CpuOffloadFact {
    type Error = String;

    fn try_from(v: serde_json::Value) -> Result<Self, String> {
        match v {
            serde_json::Value::Bool(true) => Ok(CpuOffloadFact::On),
            serde_json::Value::Bool(false) => Ok(CpuOffloadFact::Off),
            serde_json::Value::String(s) if s == "unknown" => Ok(CpuOffloadFact::Unknown),
            other => Err(format!("`{other}` is not true, false or unknown")),
        }
    }
}

/// The keys of `server-facts.yaml` that BLIS reads.
pub(crate) const SERVER_FACT_KEYS: [&str; 19] = [
    "hardware",
    "tensor_parallel_size",
    "data_parallel_size",
    "num_gpu_blocks",
    "block_size",
    "kv_cache_dtype",
    "quantization",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "async_scheduling",
    "enable_expert_parallel",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "kv_cache_tokens",
    "max_concurrency",
    "status",
    "cpu_offload",
];

/// The KV blocks of one group that vLLM V1's logged cache size of `tokens`
/// stands for, with blocks of `block_size` tokens: the size over the block
/// size, or, for a `max_model_len` that is no whole number of blocks, back
/// through the blocks per request (vLLM logs the capacity as its maximum
/// concurrency times `max_model_len`).
pub fn one_group_blocks(tokens: u64, block_size: u32, max_model_len: Option<u32>) -> u64 {
    let block = u64::from(block_size.max(1));
    match max_model_len.map(u64::from) {
        Some(len) if len % block != 0 => (tokens as f64 * len.div_ceil(block) as f64 / len as f64).round() as u64,
        _ => tokens.div_ceil(block),
    }
}

impl ServerFacts {
    /// The block pool of a server whose KV cache vLLM grouped as `groups`,
    /// read from the logged `kv_cache_tokens`, when `num_gpu_blocks` is
    /// still its one-group reading ([`one_group_blocks`]; a count set by
    /// hand wins). vLLM has logged a grouped cache's size two ways: its
    /// maximum concurrency times `max_model_len` (the pool over the blocks
    /// one request of that length holds in every group, since mid-2026),
    /// recognised by the logged concurrency, and before that the pool over
    /// the number of groups times the block size (the pool is then known
    /// to a block per group, and the smallest such pool is taken). `None`
    /// with one group, or without the facts to tell.
    pub fn grouped_pool_blocks(
        &self,
        groups: blis_engine::kv::KvGroups,
        block_size: u32,
        max_model_len: u32,
        chunk_tokens: u32,
    ) -> Option<u64> {
        let tokens = self.kv_cache_tokens?;
        if groups == blis_engine::kv::KvGroups::FULL
            || self.num_gpu_blocks != Some(one_group_blocks(tokens, block_size, Some(max_model_len)))
        {
            return None;
        }
        let len = u64::from(max_model_len.max(1));
        let per_request = groups.peak_blocks(len, chunk_tokens, block_size);
        // Logged as int(pool / per_request × len), the concurrency to two decimals.
        let as_concurrency = self.max_concurrency.is_some_and(|c| (tokens as f64 / len as f64 - c).abs() <= 0.005 + 1.0 / len as f64);
        Some(if as_concurrency {
            (u128::from(tokens) * u128::from(per_request)).div_ceil(u128::from(len)).min(u128::from(u64::MAX)) as u64
        } else {
            (tokens / u64::from(block_size.max(1))).saturating_mul(u64::from(groups.count()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::kv::KvGroups;
    use proptest::prelude::*;

    /// gpt-oss-20b's grouping: a full-attention group and a 128-token
    /// sliding-window one.
    const GPT_OSS: KvGroups = KvGroups { full: 1, sliding: 1, window_tokens: 128 };

    /// The facts `blis convert vllm-log` writes for a log of `tokens` and `concurrency`.
    fn logged(tokens: u64, concurrency: f64, len: u32) -> ServerFacts {
        ServerFacts {
            num_gpu_blocks: Some(one_group_blocks(tokens, 16, Some(len))),
            kv_cache_tokens: Some(tokens),
            max_concurrency: Some(concurrency),
            ..ServerFacts::default()
        }
    }

    proptest! {
        /// Whichever way vLLM logged a grouped pool, the pool is read back:
        /// exactly from the concurrency form, to a block per group from
        /// the older per-group form; one group keeps the one-group reading,
        /// and a block count set by hand is left alone.
        #[test]
        fn a_grouped_pool_is_read_back_from_either_logged_form(pool in 2_000u64..5_000_000, len in prop::sample::select(vec![4096u32, 8192, 10_000, 131_072]), chunk in 512u32..16_384) {
            let per_request = GPT_OSS.peak_blocks(u64::from(len), chunk, 16);
            let concurrency = pool as f64 / per_request as f64;
            let rounded = (concurrency * 100.0).round() / 100.0;
            // Since mid-2026: int(concurrency × max_model_len).
            let facts = logged((concurrency * f64::from(len)) as u64, rounded, len);
            prop_assert_eq!(facts.grouped_pool_blocks(GPT_OSS, 16, len, chunk), Some(pool));
            // Before: the pool over the groups, times the block size.
            let facts = logged(pool / 2 * 16, rounded, len);
            prop_assert_eq!(facts.grouped_pool_blocks(GPT_OSS, 16, len, chunk), Some(pool - pool % 2));
            prop_assert_eq!(facts.grouped_pool_blocks(KvGroups::FULL, 16, len, chunk), None);
            let edited = ServerFacts { num_gpu_blocks: Some(pool), ..facts };
            prop_assert_eq!(edited.grouped_pool_blocks(GPT_OSS, 16, len, chunk), None);
        }
    }
}
