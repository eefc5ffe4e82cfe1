//! GPU specifications and the KV-cache capacity estimate.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::ModelConfig;

/// One GPU model's datasheet figures (dense, no sparsity) plus the roofline
/// efficiency factors. Bundled specs live in `data/hardware/*.json`; users can
/// supply their own file with the same fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Display name, e.g. "H100 SXM 80GB".
    pub name: String,
    /// Dense BF16/FP16 tensor-core throughput, TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor-core throughput, TFLOP/s (absent on GPUs without FP8).
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    /// HBM bandwidth, TB/s (10^12 bytes per second).
    pub hbm_tb_s: f64,
    /// Memory capacity, GiB.
    pub memory_gib: f64,
    /// NVLink bandwidth per GPU, GB/s (absent for PCIe-only parts).
    #[serde(default)]
    pub nvlink_gb_s: Option<f64>,
    /// Host link bandwidth, GB/s.
    pub pcie_gb_s: f64,
    /// Roofline model-FLOPs utilisation during prefill.
    pub mfu_prefill: f64,
    /// Roofline model-FLOPs utilisation during decode.
    pub mfu_decode: f64,
    /// Where the numbers come from.
    pub source: String,
}

/// A spec value outside its allowed range.
#[derive(Debug, Error, PartialEq)]
#[error("GPU spec field `{field}` = {value} is invalid: {reason}")]
pub struct GpuSpecError {
    /// Field name.
    pub field: &'static str,
    /// Offending value.
    pub value: f64,
    /// What is allowed.
    pub reason: &'static str,
}

impl GpuSpec {
    /// Checks every figure is finite and positive and every efficiency is in (0, 1].
    pub fn validate(&self) -> Result<(), GpuSpecError> {
        let positive = [
            ("bf16_tflops", Some(self.bf16_tflops)),
            ("fp8_tflops", self.fp8_tflops),
            ("hbm_tb_s", Some(self.hbm_tb_s)),
            ("memory_gib", Some(self.memory_gib)),
            ("nvlink_gb_s", self.nvlink_gb_s),
            ("pcie_gb_s", Some(self.pcie_gb_s)),
        ];
        for (field, value) in positive {
            if let Some(v) = value
                && !(v.is_finite() && v > 0.0)
            {
                return Err(GpuSpecError { field, value: v, reason: "must be a positive number" });
            }
        }
        for (field, v) in [("mfu_prefill", self.mfu_prefill), ("mfu_decode", self.mfu_decode)] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(GpuSpecError { field, value: v, reason: "must be in (0, 1]" });
            }
        }
        Ok(())
    }

    /// Peak dense FLOP/s for weights of `weight_bytes_per_param` bytes: the FP8
    /// peak for 8-bit (or smaller) weights when the GPU has one, else BF16.
    pub fn peak_flops(&self, weight_bytes_per_param: f64) -> f64 {
        let tflops = match self.fp8_tflops {
            Some(fp8) if weight_bytes_per_param <= 1.0 => fp8,
            _ => self.bf16_tflops,
        };
        tflops * 1e12
    }

    /// HBM bandwidth in bytes per second.
    pub fn hbm_bytes_per_s(&self) -> f64 {
        self.hbm_tb_s * 1e12
    }

    /// GPU-to-GPU bandwidth in bytes per second: NVLink, else the host link.
    pub fn interconnect_bytes_per_s(&self) -> f64 {
        self.nvlink_gb_s.unwrap_or(self.pcie_gb_s) * 1e9
    }
}

/// Why no KV block count can be derived.
#[derive(Debug, Error, PartialEq)]
pub enum CapacityError {
    /// Weights and reserves exceed the memory budget.
    #[error(
        "the model does not fit: weights and reserves need {needed_gib:.1} GiB per GPU but \
         gpu_memory_utilization × memory gives {available_gib:.1} GiB; raise --tp or --gpu-memory-utilization"
    )]
    DoesNotFit {
        /// GiB needed per GPU before any KV cache.
        needed_gib: f64,
        /// GiB available per GPU.
        available_gib: f64,
    },
}

/// Activation workspace vLLM's memory profiler reserves per GPU, GiB.
const ACTIVATION_RESERVE_DENSE_GIB: f64 = 5.5;
/// Same for MoE models, whose expert routing buffers are larger.
const ACTIVATION_RESERVE_MOE_GIB: f64 = 8.0;
/// Non-torch memory (CUDA context, NCCL buffers) per GPU at tp = 1 and tp > 1.
const NON_TORCH_GIB: [f64; 2] = [0.15, 0.6];

/// Number of KV blocks a vLLM instance would allocate, following the llm-d
/// capacity planner's approximation of vLLM's memory profiling
/// (`latency-formulas.md` §5), summed over the `tp` GPUs of the instance:
///
/// ```text
/// available  = memory_gib · gpu_memory_utilization · tp
/// overhead   = weight bytes + activation reserve (5.5 GiB dense, 8 GiB MoE, once)
///              + non-torch memory (0.15 GiB per GPU at tp = 1, 0.6 GiB per GPU at tp > 1) · tp
/// blocks     = floor((available − overhead) · 2^30 / (KV bytes per token over all GPUs · block_size))
/// ```
///
/// (KV bytes per token over all GPUs is 2·L·KVH·dH·BPP while tp ≤ KVH; past
/// that every rank holds one replicated head, and for latent attention every
/// rank stores the whole latent: tp times the per-GPU bytes.)
/// On the three H100 runs in `validation/` this gives 6 886 / 31 048 / 24 474
/// blocks against the 7 462 / 31 356 / 27 510 the servers reported, so it is
/// conservative by 1–11 %; pass `--num-gpu-blocks` when the real count is known.
pub fn kv_blocks(
    model: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
    gpu_memory_utilization: f64,
    block_size_tokens: u32,
) -> Result<u64, CapacityError> {
    const GIB: f64 = (1u64 << 30) as f64;
    let tp = tp.max(1);
    let gpus = f64::from(tp);
    let available_gib = gpu.memory_gib * gpu_memory_utilization * gpus;
    let reserve = if model.moe.is_some() { ACTIVATION_RESERVE_MOE_GIB } else { ACTIVATION_RESERVE_DENSE_GIB };
    let non_torch = NON_TORCH_GIB[usize::from(tp > 1)] * gpus;
    let needed_gib = model.weight_bytes() / GIB + reserve + non_torch;
    let free_bytes = (available_gib - needed_gib) * GIB;
    let block_bytes = model.kv_bytes_per_token_per_gpu(tp) * gpus * f64::from(block_size_tokens);
    let blocks = (free_bytes / block_bytes).floor();
    if blocks < 2.0 {
        return Err(CapacityError::DoesNotFit { needed_gib: needed_gib / gpus, available_gib: available_gib / gpus });
    }
    Ok(blocks as u64)
}
