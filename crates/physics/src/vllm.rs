//! vLLM's defaults for the server knobs BLIS simulates, stated once: the
//! command-line defaults of `blis run`, the knobs an experiment does not
//! record, and the memory profile behind a derived KV block count all read
//! them from here.

/// The defaults of vLLM's engine arguments that BLIS models and that do not
/// depend on the GPU (those that do: [`batch_defaults`]).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ServerDefaults {
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

/// The first vLLM release (major, minor) that schedules asynchronously when
/// not told: 0.14, January 2026 (vLLM #27614). Older servers did not.
pub const ASYNC_SCHEDULING_DEFAULT_SINCE: (u32, u32) = (0, 14);

/// vLLM v1's defaults for online serving, as of the release
/// [`ASYNC_SCHEDULING_DEFAULT_SINCE`] names: what every BLIS command uses
/// when a knob is not given.
pub const DEFAULTS: ServerDefaults = ServerDefaults {
    block_size: 16,
    gpu_memory_utilization: 0.9,
    enable_chunked_prefill: true,
    enable_prefix_caching: true,
    async_scheduling: true,
    long_prefill_token_threshold: 0,
};

/// vLLM's `--kv-cache-dtype`: what one element of the KV cache is stored
/// as. It sets the bytes every token's cache takes, so how many blocks fit
/// in GPU memory and how many bytes a decode step's attention reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// `auto`: the model's dtype (half precision), or FP8 where the
    /// checkpoint quantises its KV cache.
    Auto,
    /// `bfloat16`, `float16`: two bytes.
    Half,
    /// `fp8`, `fp8_e4m3`, `fp8_e5m2`, `fp8_inc`: one byte (the per-tensor
    /// scales are a few floats per layer, not per token).
    Fp8,
}

/// The `--kv-cache-dtype` values BLIS simulates.
pub const KV_CACHE_DTYPES: &str = "auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc";

impl std::str::FromStr for KvCacheDtype {
    type Err = String;

    fn from_str(s: &str) -> Result<KvCacheDtype, String> {
        match s {
            "auto" => Ok(KvCacheDtype::Auto),
            "bfloat16" | "float16" => Ok(KvCacheDtype::Half),
            "fp8" | "fp8_e4m3" | "fp8_e5m2" | "fp8_inc" => Ok(KvCacheDtype::Fp8),
            "fp8_ds_mla" => Err(format!("`{s}`: DeepSeek sparse attention's cache layout is not simulated; allowed: {KV_CACHE_DTYPES}")),
            _ => Err(format!("`{s}`: allowed: {KV_CACHE_DTYPES}")),
        }
    }
}

impl KvCacheDtype {
    /// Bytes of one cache element for a model whose `auto` cache stores
    /// elements of `auto_bytes`.
    pub fn bytes(self, auto_bytes: f64) -> f64 {
        match self {
            KvCacheDtype::Auto => auto_bytes,
            KvCacheDtype::Half => 2.0,
            KvCacheDtype::Fp8 => 1.0,
        }
    }
}

/// vLLM's batch limits when neither flag is given.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchDefaults {
    /// `--max-num-seqs`.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens` (with chunked prefill).
    pub max_num_batched_tokens: u32,
}

/// GPU memory, GiB, from which vLLM takes the larger batch defaults.
const LARGE_GPU_MIN_GIB: f64 = 70.0;

/// vLLM's batch defaults for online serving on a GPU named `gpu_name` with
/// `gpu_memory_gib` of memory (`vllm serve`,
/// `EngineArgs.get_batch_defaults`, vLLM 0.9 and later): 1024 sequences and
/// 8192 batched tokens on a GPU of 70 GiB or more that is not an A100 (H100,
/// H200: vLLM #16158), else 256 and 2048 (an A100's throughput falls with
/// the larger budget, vLLM #17885; the 48 GB L40S and A40 are below the
/// line). The A100 is recognised by its name, as vLLM does.
pub fn batch_defaults(gpu_name: &str, gpu_memory_gib: f64) -> BatchDefaults {
    if gpu_memory_gib >= LARGE_GPU_MIN_GIB && !gpu_name.to_ascii_lowercase().contains("a100") {
        BatchDefaults { max_num_seqs: 1024, max_num_batched_tokens: 8192 }
    } else {
        BatchDefaults { max_num_seqs: 256, max_num_batched_tokens: 2048 }
    }
}

/// The KV block size vLLM forces for a latent-attention (MLA) model on a
/// GPU of `compute_capability` (`CudaPlatform.check_and_update_config`,
/// default attention backend): 64 tokens on Hopper (9.x, FlashMLA's
/// blocks), 128 on Blackwell (10.x, CUTLASS MLA's); elsewhere (an A100's
/// Triton MLA, a GPU whose capability is not known) the block size given.
pub fn mla_block_size(compute_capability: Option<f64>) -> Option<u32> {
    match compute_capability?.floor() as u32 {
        9 => Some(64),
        10 => Some(128),
        _ => None,
    }
}

/// Whether vLLM's attention backend multiplies attention scores in FP8 on
/// a GPU of `compute_capability`: with an FP8 KV cache, FlashAttention 3
/// (Hopper and later) quantizes the query and runs both products on FP8
/// tensor cores. Latent attention (FlashMLA) and older GPUs' backends
/// dequantize the cache and attend in half precision.
pub fn attends_in_fp8(fp8_kv_cache: bool, latent_attention: bool, compute_capability: Option<f64>) -> bool {
    fp8_kv_cache && !latent_attention && compute_capability.is_some_and(|cc| cc >= 9.0)
}

/// The environment variable with which vLLM accepts a `--max-model-len`
/// longer than the model's config allows.
pub const ALLOW_LONG_MAX_MODEL_LEN: &str = "VLLM_ALLOW_LONG_MAX_MODEL_LEN";
