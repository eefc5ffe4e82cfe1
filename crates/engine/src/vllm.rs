//! vLLM's defaults for the server knobs BLIS simulates, stated once: the
//! command-line defaults of `blis run`, the knobs an experiment does not
//! record, and the memory profile behind a derived KV block count all read
//! them from here.

/// The defaults of vLLM's engine arguments that BLIS models.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ServerDefaults {
    /// `--max-num-seqs`.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens` (with chunked prefill).
    pub max_num_batched_tokens: u32,
    /// `--block-size`, tokens.
    pub block_size: u32,
    /// `--gpu-memory-utilization`.
    pub gpu_memory_utilization: f64,
    /// `--enable-chunked-prefill`.
    pub enable_chunked_prefill: bool,
    /// `--enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// `--async-scheduling`.
    pub async_scheduling: bool,
    /// `--long-prefill-token-threshold` (0 = off).
    pub long_prefill_token_threshold: u32,
}

/// vLLM v1's defaults (vLLM 0.9–0.11 online serving): what `blis run` uses
/// when a knob is not given.
pub const DEFAULTS: ServerDefaults = ServerDefaults {
    max_num_seqs: 256,
    max_num_batched_tokens: 8192,
    block_size: 16,
    gpu_memory_utilization: 0.9,
    enable_chunked_prefill: true,
    enable_prefix_caching: true,
    async_scheduling: false,
    long_prefill_token_threshold: 0,
};

/// Async scheduling became vLLM's default late in 2025 (vLLM #27614): a
/// server recorded since then that does not say ran with it.
pub const RECORDED_ASYNC_SCHEDULING: bool = true;

/// The environment variable with which vLLM accepts a `--max-model-len`
/// longer than the model's config allows.
pub const ALLOW_LONG_MAX_MODEL_LEN: &str = "VLLM_ALLOW_LONG_MAX_MODEL_LEN";
