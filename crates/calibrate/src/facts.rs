//! `server-facts.yaml`: what a vLLM server's log records about it and
//! inference-perf does not (GPU, KV blocks, parallelism, scheduler limits,
//! caching, quantization, a CPU tier), and whether the run is judged on
//! latency or on its overload. [`crate::vllm_log`] reads the same facts
//! from the log itself.

use serde::{Deserialize, Serialize};

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
    /// Some runs of the batch did; which ones, and the capacity, were not recorded.
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
pub(crate) const SERVER_FACT_KEYS: [&str; 17] = [
    "hardware", "tensor_parallel_size", "data_parallel_size", "num_gpu_blocks", "block_size", "kv_cache_dtype", "quantization", "gpu_memory_utilization", "enable_prefix_caching",
    "enable_chunked_prefill", "async_scheduling", "enable_expert_parallel", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "status", "cpu_offload",
];

