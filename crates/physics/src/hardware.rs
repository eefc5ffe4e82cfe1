//! GPU specifications and the KV-cache capacity estimate.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::{AttentionSpan, ModelConfig, PerWeightClass, WeightPrecision};
use blis_engine::kv::KvGroups;

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
    /// The memory CUDA reports as the device's total, GiB: what vLLM
    /// multiplies by `--gpu-memory-utilization`. Absent: memory_gib ·
    /// 0.99025, as on HBM boards (an 80 GiB H100 reports 79.22 GiB). A
    /// GDDR6 card with ECC on (the default on data-centre cards) gives
    /// 1/16 of its memory to the ECC codes: a 48 GB L40S or A40 reports
    /// about 44.5 GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_memory_gib: Option<f64>,
    /// NVLink bandwidth per GPU, GB/s (absent for PCIe-only parts).
    #[serde(default)]
    pub nvlink_gb_s: Option<f64>,
    /// How many GPUs NVLink connects all-to-all: 8 on an HGX/DGX board, 2
    /// for PCIe cards joined by a bridge. A tensor-parallel group larger
    /// than this crosses PCIe. Absent with NVLink: [`DEFAULT_NVLINK_DOMAIN_GPUS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_domain_gpus: Option<u32>,
    /// Host link bandwidth, GB/s.
    pub pcie_gb_s: f64,
    /// What `torch.cuda.get_device_name()` calls the GPU ("NVIDIA H100 80GB
    /// HBM3"): vLLM names its tuned kernel configs after it (absent: no
    /// tuned config is found, [`crate::latency::moe_tiles::MoeTiles`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_device_name: Option<String>,
    /// CUDA compute capability, major.minor (9.0 for Hopper, 8.0 for the
    /// A100): it picks vLLM's kernels where vLLM does by it (absent: the
    /// generic kernels, [`crate::vllm::mla_block_size`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<f64>,
    /// Roofline model-FLOPs utilisation during prefill.
    pub mfu_prefill: f64,
    /// Roofline model-FLOPs utilisation during decode.
    pub mfu_decode: f64,
    /// Where the numbers come from.
    pub source: String,
    /// What the GPU's kernels measurably reach; absent for a GPU nobody profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelEfficiency>,
}

/// What a GPU's kernels reach, measured on kernel profiles (`blis kernels`):
/// what carries a coefficient set fitted on one GPU to another. The datasheet
/// peaks alone do not: launch costs aside, an H100 streams a decode GEMM's
/// weights at 99.7 % of its bandwidth, an A100 at 84 % (`data/hardware/`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelEfficiency {
    /// η: fraction of the dense BF16 peak a compute-bound GEMM reaches.
    pub gemm_compute: f64,
    /// μ: fraction of the memory bandwidth a memory-bound GEMM reaches.
    pub gemm_memory: f64,
    /// A decode layer's fixed cost: four GEMM launches plus its norms, rotary
    /// embedding, activation and residual add at 1–8 tokens, µs (median over
    /// the models profiled on every GPU, so comparable between GPUs only).
    pub layer_overhead_us: f64,
    /// What an all-reduce within the NVLink domain reaches (absent: not
    /// measured on this GPU, [`UNMEASURED_NVLINK_ALLREDUCE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_nvlink: Option<AllReduceEfficiency>,
    /// What an all-reduce whose ring crosses PCIe reaches (absent: not
    /// measured on this GPU, [`UNMEASURED_PCIE_ALLREDUCE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_pcie: Option<AllReduceEfficiency>,
    /// Where the figures come from.
    pub source: String,
}

/// A tensor-parallel all-reduce over one kind of link, measured (`blis
/// kernels`, NCCL all-reduce of 1 MiB and more), as a ring: time =
/// `latency_us` + 2(n − 1)·`hop_latency_us` + bytes·2(n − 1)/n / (link
/// bandwidth · `bus_efficiency`).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllReduceEfficiency {
    /// Bus bandwidth reached, as a fraction of the link's datasheet figure
    /// (NVLink's or PCIe's bidirectional GB/s).
    pub bus_efficiency: f64,
    /// Fixed time of one all-reduce, µs.
    pub latency_us: f64,
    /// Time each of a ring's 2(n − 1) steps adds, µs (0 where one group
    /// size was measured, which cannot tell it from `latency_us`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hop_latency_us: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl AllReduceEfficiency {
    /// Time of one all-reduce of `bytes` among `workers` GPUs over a link
    /// of `link_bytes_per_s` (datasheet), µs: the ring's latency plus its
    /// bus bytes, bytes·2(n − 1)/n, at the efficiency's share of the link.
    pub fn time_us(&self, bytes: f64, workers: u32, link_bytes_per_s: f64) -> f64 {
        let n = f64::from(workers.max(1));
        self.latency_at(workers) + bytes * 2.0 * (n - 1.0) / n / (link_bytes_per_s * self.bus_efficiency) * 1e6
    }

    /// Fixed time of one all-reduce among `workers` GPUs, µs: the latency
    /// plus 2(n − 1) ring steps.
    pub fn latency_at(&self, workers: u32) -> f64 {
        self.latency_us + 2.0 * f64::from(workers.max(1) - 1) * self.hop_latency_us
    }
}

/// NVLink GPUs per all-to-all domain assumed when a spec gives NVLink
/// bandwidth without its topology: an HGX/DGX board's eight.
pub const DEFAULT_NVLINK_DOMAIN_GPUS: u32 = 8;

/// An all-reduce over NVLink on a GPU whose collectives nobody measured:
/// the mean of the A100's and H100's DGX boxes (0.569 and 0.771 of
/// 600 and 900 GB/s; 41.9 and 23.6 µs plus 0.88 and 0.41 µs per ring
/// step; `blis kernels`, 2026-11-27). The two differ by 32–54 % (the
/// H100's NVSwitch reduces in the switch), so this is the least certain
/// figure of an unprofiled GPU.
pub const UNMEASURED_NVLINK_ALLREDUCE: AllReduceEfficiency =
    AllReduceEfficiency { bus_efficiency: 0.670, latency_us: 32.75, hop_latency_us: 0.645 };

/// An all-reduce whose ring crosses PCIe on a GPU whose collectives nobody
/// measured: the mean of the A100's and H100's 4-GPU boxes of bridged pairs,
/// where every ring crosses PCIe twice (0.740 and 0.776 of 64 and 128 GB/s;
/// 57.6 and 49.7 µs, one group size, so no time per ring step; `blis
/// kernels`, 2026-11-27). Either GPU's efficiency times the other's within
/// 5–6 %: a property of the link, not the GPU.
pub const UNMEASURED_PCIE_ALLREDUCE: AllReduceEfficiency =
    AllReduceEfficiency { bus_efficiency: 0.758, latency_us: 53.65, hop_latency_us: 0.0 };

/// The link a tensor-parallel group's all-reduce crosses.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Link {
    /// Every GPU of the group in one NVLink domain.
    NvLink,
    /// The group spans GPUs without NVLink between them.
    Pcie,
}

impl Link {
    /// The link's name for people: "NVLink" or "PCIe".
    pub fn name(self) -> &'static str {
        match self {
            Link::NvLink => "NVLink",
            Link::Pcie => "PCIe",
        }
    }
}

/// How coefficients fitted on one GPU carry to another: factors on the
/// peaks they price work against and on their per-layer overhead. Exactly
/// 1 between GPUs of equal kernel efficiencies.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct Carry {
    /// On the compute peaks: η there / η where fitted.
    pub compute: f64,
    /// On the memory bandwidth: μ there / μ where fitted.
    pub memory: f64,
    /// On a per-layer overhead: layer overhead there / where fitted.
    pub per_layer: f64,
}

impl KernelEfficiency {
    /// The factors that carry coefficients fitted on a GPU with these
    /// efficiencies to one with `to`'s.
    pub fn carry_to(&self, to: &KernelEfficiency) -> Carry {
        Carry {
            compute: to.gemm_compute / self.gemm_compute,
            memory: to.gemm_memory / self.gemm_memory,
            per_layer: to.layer_overhead_us / self.layer_overhead_us,
        }
    }
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

/// Why a GPU spec file could not be used.
#[derive(Debug, Error, PartialEq)]
pub enum GpuSpecParseError {
    /// Not JSON, or neither of the two accepted shapes (a field missing or mistyped).
    #[error("{0}")]
    Format(String),
    /// Parsed, but a figure is out of range.
    #[error(transparent)]
    Invalid(#[from] GpuSpecError),
}

/// `value` as a `T`; the error names the field it concerns, as in
/// "field `kernels.allreduce_pcie.latency_us`: invalid type: …".
fn located<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| match e.path().to_string().as_str() {
        "." => e.inner().to_string(),
        path => format!("field `{path}`: {}", e.inner()),
    })
}

/// The memory a GPU may have, GiB: from a small inference board (a T4 has
/// 16, the smallest datacenter parts 4) to far above any board's (the
/// The longest fixed cost of a kernel or collective a GPU spec may give, µs.
const MAX_FIXED_COST_US: f64 = 1e6;

/// largest carry a few hundred); outside it a spec is a typo.
const MEMORY_GIB: (f64, f64) = (4.0, 4096.0);

/// MFU assumed for a GPU given only by its datasheet: H100 SXM's published factors.
const DATASHEET_MFU: (f64, f64) = (0.45, 0.30);

/// The datasheet shape (`../shared/groundtruth/hardware/*.json`): compute in
/// TFLOP/s, possibly with sparsity, memory in GB and TB/s.
#[derive(Deserialize)]
struct Datasheet {
    name: String,
    compute: DatasheetCompute,
    memory: DatasheetMemory,
    #[serde(default)]
    interconnect: DatasheetInterconnect,
    #[serde(default)]
    datasheet_id: Option<String>,
}

#[derive(Deserialize)]
struct DatasheetCompute {
    bf16_tensor_core: f64,
    #[serde(default)]
    fp8_tensor_core: Option<f64>,
    #[serde(default)]
    with_sparsity: bool,
}

#[derive(Deserialize)]
struct DatasheetMemory {
    capacity_gb: f64,
    bandwidth_tb_s: f64,
}

#[derive(Deserialize, Default)]
struct DatasheetInterconnect {
    #[serde(default)]
    nvlink_bandwidth_gb_s: Option<f64>,
    #[serde(default)]
    nvlink_domain_gpus: Option<u32>,
    #[serde(default)]
    pcie_bandwidth_gb_s: Option<f64>,
}

impl GpuSpec {
    /// Parses and validates a GPU spec: either BLIS's own shape (the fields of
    /// this struct, as in `data/hardware/*.json`) or a vendor datasheet shape
    /// with `compute.bf16_tensor_core` / `fp8_tensor_core` (halved when
    /// `with_sparsity` is true), `memory.capacity_gb` (taken as GiB, as
    /// vendors round binary capacities) / `bandwidth_tb_s` and
    /// `interconnect.nvlink_bandwidth_gb_s` / `nvlink_domain_gpus` / `pcie_bandwidth_gb_s`; a
    /// datasheet carries no efficiency factors, so it gets H100 SXM's MFU.
    pub fn from_json(text: &str) -> Result<GpuSpec, GpuSpecParseError> {
        // Read shallowly: memory about the text's size, whatever it carries.
        let value = match crate::shallow_json::object(text, &[]) {
            Ok(map) => serde_json::Value::Object(map),
            Err(e) => return Err(GpuSpecParseError::Format(e.to_string())),
        };
        let value_is_datasheet = value.get("compute").is_some();
        let spec = if value_is_datasheet {
            let d: Datasheet = located(value).map_err(|e| GpuSpecParseError::Format(format!("datasheet shape: {e}")))?;
            let dense = if d.compute.with_sparsity { 0.5 } else { 1.0 };
            let pcie_gb_s = d
                .interconnect
                .pcie_bandwidth_gb_s
                .ok_or_else(|| GpuSpecParseError::Format("datasheet shape: missing field `interconnect.pcie_bandwidth_gb_s`".into()))?;
            GpuSpec {
                source: format!(
                    "datasheet {}{}; MFU assumed equal to H100 SXM's",
                    d.datasheet_id.as_deref().unwrap_or("(no id)"),
                    if d.compute.with_sparsity { " (dense = half the sparse figures)" } else { "" }
                ),
                name: d.name,
                bf16_tflops: d.compute.bf16_tensor_core * dense,
                fp8_tflops: d.compute.fp8_tensor_core.map(|f| f * dense),
                hbm_tb_s: d.memory.bandwidth_tb_s,
                memory_gib: d.memory.capacity_gb,
                cuda_memory_gib: None,
                nvlink_gb_s: d.interconnect.nvlink_bandwidth_gb_s,
                nvlink_domain_gpus: d.interconnect.nvlink_domain_gpus,
                pcie_gb_s,
                torch_device_name: None,
                compute_capability: None,
                mfu_prefill: DATASHEET_MFU.0,
                mfu_decode: DATASHEET_MFU.1,
                kernels: None,
            }
        } else {
            located(value).map_err(GpuSpecParseError::Format)?
        };
        spec.validate().map_err(|mut e| {
            // Name a datasheet's own fields where it gave the value as it is.
            if value_is_datasheet {
                let sheet = [
                    ("memory_gib", "memory.capacity_gb"),
                    ("hbm_tb_s", "memory.bandwidth_tb_s"),
                    ("nvlink_gb_s", "interconnect.nvlink_bandwidth_gb_s"),
                    ("nvlink_domain_gpus", "interconnect.nvlink_domain_gpus"),
                    ("pcie_gb_s", "interconnect.pcie_bandwidth_gb_s"),
                ];
                e.field = sheet.iter().find(|(ours, _)| *ours == e.field).map_or(e.field, |(_, theirs)| theirs);
            }
            e
        })?;
        Ok(spec)
    }

    /// Checks every figure is finite, positive and below an absurd bound,
    /// and every efficiency is in (0, 1].
    pub fn validate(&self) -> Result<(), GpuSpecError> {
        // Upper bounds a thousand times above today's boards: a typo, not a GPU.
        let positive = [
            ("bf16_tflops", Some(self.bf16_tflops), 1e6, "must be a positive number of TFLOP/s, at most 1e6"),
            ("fp8_tflops", self.fp8_tflops, 1e6, "must be a positive number of TFLOP/s, at most 1e6"),
            ("hbm_tb_s", Some(self.hbm_tb_s), 1e4, "must be a positive number of TB/s, at most 1e4"),
            ("memory_gib", Some(self.memory_gib), f64::INFINITY, "must be a positive number"),
            ("nvlink_gb_s", self.nvlink_gb_s, 1e6, "must be a positive number of GB/s, at most 1e6"),
            ("pcie_gb_s", Some(self.pcie_gb_s), 1e6, "must be a positive number of GB/s, at most 1e6"),
        ];
        for (field, value, max, reason) in positive {
            if let Some(v) = value
                && !(v.is_finite() && v > 0.0 && v <= max)
            {
                return Err(GpuSpecError { field, value: v, reason });
            }
        }
        if !(MEMORY_GIB.0..=MEMORY_GIB.1).contains(&self.memory_gib) {
            return Err(GpuSpecError {
                field: "memory_gib",
                value: self.memory_gib,
                reason: "must be a number of GiB in [4, 4096] (what accelerator boards carry)",
            });
        }
        if let Some(v) = self.cuda_memory_gib
            && !(v.is_finite() && v > 0.0 && v <= self.memory_gib)
        {
            return Err(GpuSpecError {
                field: "cuda_memory_gib",
                value: v,
                reason: "must be a positive number of GiB, at most memory_gib",
            });
        }
        if let Some(v) = self.compute_capability
            && !(1.0..100.0).contains(&v)
        {
            return Err(GpuSpecError {
                field: "compute_capability",
                value: v,
                reason: "must be a CUDA compute capability such as 9.0 or 8.6",
            });
        }
        let kernels = self.kernels.as_ref();
        let efficiencies = [
            ("mfu_prefill", Some(self.mfu_prefill)),
            ("mfu_decode", Some(self.mfu_decode)),
            ("kernels.gemm_compute", kernels.map(|k| k.gemm_compute)),
            ("kernels.gemm_memory", kernels.map(|k| k.gemm_memory)),
            ("kernels.allreduce_nvlink.bus_efficiency", kernels.and_then(|k| k.allreduce_nvlink).map(|a| a.bus_efficiency)),
            ("kernels.allreduce_pcie.bus_efficiency", kernels.and_then(|k| k.allreduce_pcie).map(|a| a.bus_efficiency)),
        ];
        for (field, v) in efficiencies {
            if let Some(v) = v
                && !(v > 0.0 && v <= 1.0)
            {
                return Err(GpuSpecError { field, value: v, reason: "must be in (0, 1]" });
            }
        }
        let fixed_costs = [
            ("kernels.layer_overhead_us", kernels.map(|k| k.layer_overhead_us)),
            ("kernels.allreduce_nvlink.latency_us", kernels.and_then(|k| k.allreduce_nvlink).map(|a| a.latency_us)),
            ("kernels.allreduce_pcie.latency_us", kernels.and_then(|k| k.allreduce_pcie).map(|a| a.latency_us)),
        ];
        for (field, v) in fixed_costs {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0 && v <= MAX_FIXED_COST_US)
            {
                return Err(GpuSpecError { field, value: v, reason: "must be a positive number of µs, at most 1e6 (a second)" });
            }
        }
        let hops = [
            ("kernels.allreduce_nvlink.hop_latency_us", kernels.and_then(|k| k.allreduce_nvlink).map(|a| a.hop_latency_us)),
            ("kernels.allreduce_pcie.hop_latency_us", kernels.and_then(|k| k.allreduce_pcie).map(|a| a.hop_latency_us)),
        ];
        for (field, v) in hops {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(GpuSpecError { field, value: v, reason: "must be a number of at least 0" });
            }
        }
        if let Some(n) = self.nvlink_domain_gpus
            && n < 2
        {
            return Err(GpuSpecError { field: "nvlink_domain_gpus", value: f64::from(n), reason: "must be at least 2" });
        }
        Ok(())
    }

    /// Peak dense half-precision (BF16) FLOP/s: what attention, activations
    /// and half-precision GEMMs run at.
    pub fn peak_flops(&self) -> f64 {
        self.bf16_tflops * 1e12
    }

    /// How long GEMMs whose weights are a share `fp8_share` 8-bit floats
    /// take, relative to half-precision ones: the FP8 share runs at the FP8
    /// peak where the GPU has FP8 tensor cores. Exactly 1 at share 0 and on
    /// GPUs without FP8 (integer weights are dequantised for the product).
    pub fn gemm_time_scale(&self, fp8_share: f64) -> f64 {
        match self.fp8_tflops {
            Some(fp8) if fp8_share > 0.0 => 1.0 - fp8_share + fp8_share * self.bf16_tflops / fp8,
            _ => 1.0,
        }
    }

    /// How long `model`'s attention-score products take on this GPU,
    /// relative to half precision: FP8's time where vLLM attends in FP8
    /// ([`crate::vllm::attends_in_fp8`]), else 1.
    pub fn attention_time_scale(&self, model: &ModelConfig) -> f64 {
        let fp8 = crate::vllm::attends_in_fp8(model.fp8_kv_cache(), model.mla.is_some(), self.compute_capability);
        if fp8 { self.gemm_time_scale(1.0) } else { 1.0 }
    }

    /// [`GpuSpec::gemm_time_scale`] of each class of `weights`.
    pub fn gemm_time_scales(&self, weights: &WeightPrecision) -> PerWeightClass<f64> {
        PerWeightClass::from_fn(|c| self.gemm_time_scale(weights.fp8_share(c)))
    }

    /// HBM bandwidth in bytes per second.
    pub fn hbm_bytes_per_s(&self) -> f64 {
        self.hbm_tb_s * 1e12
    }

    /// This GPU as coefficients fitted on another one see it, once carried
    /// here by `carry`: its compute peaks and memory bandwidth scaled.
    pub fn carried(&self, carry: Carry) -> GpuSpec {
        GpuSpec {
            bf16_tflops: self.bf16_tflops * carry.compute,
            fp8_tflops: self.fp8_tflops.map(|f| f * carry.compute),
            hbm_tb_s: self.hbm_tb_s * carry.memory,
            ..self.clone()
        }
    }

    /// The link an all-reduce of `tp` GPUs crosses: NVLink when the GPU has
    /// it and the group fits one NVLink domain, else PCIe.
    pub fn allreduce_link(&self, tp: u32) -> Link {
        match self.nvlink_gb_s {
            Some(_) if tp <= self.nvlink_domain_gpus.unwrap_or(DEFAULT_NVLINK_DOMAIN_GPUS) => Link::NvLink,
            _ => Link::Pcie,
        }
    }

    /// Datasheet bandwidth of `link`, bytes per second (`None`: no NVLink).
    pub fn bandwidth_of(&self, link: Link) -> Option<f64> {
        match link {
            Link::NvLink => self.nvlink_gb_s.map(|g| g * 1e9),
            Link::Pcie => Some(self.pcie_gb_s * 1e9),
        }
    }

    /// Datasheet bandwidth of the link an all-reduce of `tp` GPUs crosses,
    /// bytes per second.
    pub fn link_bytes_per_s(&self, tp: u32) -> f64 {
        self.bandwidth_of(self.allreduce_link(tp)).unwrap_or(self.pcie_gb_s * 1e9)
    }

    /// What an all-reduce over `link` reaches on this GPU: measured, else
    /// the profiled GPUs' mean.
    pub fn allreduce(&self, link: Link) -> AllReduceEfficiency {
        let kernels = self.kernels.as_ref();
        match link {
            Link::NvLink => kernels.and_then(|k| k.allreduce_nvlink).unwrap_or(UNMEASURED_NVLINK_ALLREDUCE),
            Link::Pcie => kernels.and_then(|k| k.allreduce_pcie).unwrap_or(UNMEASURED_PCIE_ALLREDUCE),
        }
    }

    /// Bus bandwidth an all-reduce of `tp` GPUs reaches, bytes per second:
    /// its link's datasheet figure times the measured efficiency.
    pub fn allreduce_bus_bytes_per_s(&self, tp: u32) -> f64 {
        self.link_bytes_per_s(tp) * self.allreduce(self.allreduce_link(tp)).bus_efficiency
    }

    /// The KV block size vLLM forces for a latent-attention (MLA) model on
    /// this GPU, if any ([`crate::vllm::mla_block_size`]).
    pub fn mla_block_size(&self) -> Option<u32> {
        crate::vllm::mla_block_size(self.compute_capability)
    }

    /// vLLM's `--max-num-seqs` and `--max-num-batched-tokens` when neither is
    /// given on this GPU ([`crate::vllm::batch_defaults`]).
    pub fn batch_defaults(&self) -> crate::vllm::BatchDefaults {
        crate::vllm::batch_defaults(&self.name, self.reported_memory_gib())
    }

    /// The memory CUDA reports as the device's total, GiB
    /// ([`GpuSpec::cuda_memory_gib`], else memory_gib · 0.99025).
    pub fn reported_memory_gib(&self) -> f64 {
        self.cuda_memory_gib.unwrap_or(self.memory_gib * CUDA_REPORTED_MEMORY_FRACTION)
    }

    /// An all-reduce of `tp` GPUs' fixed latency over the same GPU's NVLink
    /// one at the same group size (1 within an NVLink domain; about 1.7 for
    /// the profiled GPUs' 4-GPU PCIe rings).
    pub fn allreduce_latency_scale(&self, tp: u32) -> f64 {
        self.allreduce(self.allreduce_link(tp)).latency_at(tp) / self.allreduce(Link::NvLink).latency_at(tp)
    }
}

/// Why no KV block count can be derived.
#[derive(Debug, Error, PartialEq)]
pub enum CapacityError {
    /// Weights and the profiling run's reserves exceed the memory budget.
    #[error(
        "the model does not fit: its weights need {weights_gib:.1} GiB per GPU and vLLM's profiling run {reserves_gib:.1} GiB \
         more, but gpu_memory_utilization × memory gives {available_gib:.1} GiB; {}",
        does_not_fit_advice(*weights_gib, *available_gib, *reported_gib)
    )]
    DoesNotFit {
        /// Weight GiB per GPU.
        weights_gib: f64,
        /// GiB per GPU of the profiling run's activation peak and non-torch memory.
        reserves_gib: f64,
        /// GiB available per GPU: what CUDA reports × gpu_memory_utilization.
        available_gib: f64,
        /// GiB CUDA reports per GPU.
        reported_gib: f64,
    },
}

/// What would make a model fit: a smaller profiling run only while the
/// weights fit the budget, a higher utilisation only while they fit the GPU.
fn does_not_fit_advice(weights_gib: f64, available_gib: f64, reported_gib: f64) -> &'static str {
    if weights_gib < available_gib {
        "raise --tp or --gpu-memory-utilization, or lower --max-num-batched-tokens"
    } else if weights_gib < reported_gib {
        "raise --gpu-memory-utilization or --tp"
    } else {
        "raise --tp or use a GPU with more memory"
    }
}

/// Share of an HBM GPU's nominal memory that CUDA reports as its total and
/// vLLM multiplies by `--gpu-memory-utilization`: an 80 GiB H100 reports
/// 79.22 GiB (vLLM's memory-profiling log, vllm-project/vllm#12126). A GPU
/// spec's `cuda_memory_gib` overrides it.
const CUDA_REPORTED_MEMORY_FRACTION: f64 = 79.22 / 80.0;
/// Memory outside PyTorch's allocator that vLLM's profiler charges per GPU
/// (cuBLAS workspaces; NCCL and custom all-reduce buffers when tp > 1), GiB,
/// at tp = 1 and tp > 1 (the llm-d capacity planner's figures).
const NON_TORCH_GIB: [f64; 2] = [0.15, 0.6];

/// The vLLM settings, besides the model and the GPU, that decide how many KV
/// blocks an instance allocates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvSizing {
    /// Tensor-parallel degree: the GPUs of the instance.
    pub tp: u32,
    /// `--gpu-memory-utilization`, in (0, 1].
    pub gpu_memory_utilization: f64,
    /// `--block-size`, tokens per block.
    pub block_size_tokens: u32,
    /// `--max-num-batched-tokens`: the tokens of the profiling forward pass.
    pub max_num_batched_tokens: u32,
    /// `--max-num-seqs`: the rows of the profiling sampler pass.
    pub max_num_seqs: u32,
    /// vLLM's hybrid KV cache manager is on (its default; [`kv_groups`]).
    pub hybrid_kv: bool,
}

impl KvSizing {
    /// `tp` of `gpu` with vLLM v1's default knobs (BLIS's too): utilisation
    /// 0.9, 16-token blocks, and the GPU's batch defaults
    /// ([`GpuSpec::batch_defaults`]).
    pub fn defaults(tp: u32, gpu: &GpuSpec) -> KvSizing {
        let (d, batch) = (crate::vllm::DEFAULTS, gpu.batch_defaults());
        KvSizing {
            tp,
            gpu_memory_utilization: d.gpu_memory_utilization,
            block_size_tokens: d.block_size,
            max_num_batched_tokens: batch.max_num_batched_tokens,
            max_num_seqs: batch.max_num_seqs,
            hybrid_kv: true,
        }
    }
}

/// How vLLM groups `model`'s attention layers in its KV cache, and the
/// layers of each group (`kv_cache_utils._get_kv_cache_groups_uniform_page_size`).
///
/// With the hybrid manager on (`hybrid`) and both sliding-window and
/// full-attention layers, the group size is the smaller count, or the larger
/// when it is under 1.25 times the smaller; each kind fills
/// ⌈layers / size⌉ groups, the last padded. A model whose layers all slide
/// has one sliding-window group whatever `hybrid` says (vLLM's specs are
/// then uniform). Everything else, chunked local attention included (vLLM
/// turns the manager off for it by default), is one full-attention group of
/// every layer.
pub fn kv_groups(model: &ModelConfig, hybrid: bool) -> (KvGroups, u32) {
    let all = model.num_layers.max(1);
    let Some(local) = model.local_attention else { return (KvGroups::FULL, all) };
    let AttentionSpan::Sliding { window_tokens } = local.span else { return (KvGroups::FULL, all) };
    let (sliding, full) = (local.layers.min(all), all - local.layers.min(all));
    if full == 0 {
        return (KvGroups { full: 0, sliding: 1, window_tokens }, all);
    }
    if !hybrid {
        return (KvGroups::FULL, all);
    }
    let (small, large) = (sliding.min(full), sliding.max(full));
    let size = if f64::from(large) < f64::from(small) * 1.25 { large } else { small };
    let groups = KvGroups { full: full.div_ceil(size), sliding: sliding.div_ceil(size), window_tokens };
    if groups.count() > KvGroups::MAX_GROUPS {
        return (KvGroups::FULL, all);
    }
    (groups, size)
}

/// How vLLM's memory profiler (`Worker.determine_available_memory`) splits
/// one GPU's memory, and the KV blocks that fit in what is left.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KvBudget {
    /// What CUDA reports ([`GpuSpec::reported_memory_gib`]) · gpu_memory_utilization.
    pub requested_gib: f64,
    /// Weight bytes / tp.
    pub weights_gib: f64,
    /// Peak activations of the profiling run
    /// ([`ModelConfig::profile_activation_bytes_per_gpu`]).
    pub activation_peak_gib: f64,
    /// Memory outside PyTorch's allocator: 0.15 GiB at tp = 1, 0.6 GiB at tp > 1.
    pub non_torch_gib: f64,
    /// What is left for the KV cache: requested − weights − activation peak − non-torch.
    pub kv_cache_gib: f64,
    /// floor(KV cache bytes / (KV bytes per token per GPU of one group's
    /// layers · block_size)).
    #[serde(skip)]
    pub blocks: u64,
    /// How the layers are grouped ([`kv_groups`]).
    #[serde(skip)]
    pub groups: KvGroups,
}

/// The memory budget of a vLLM instance and the number of KV blocks it
/// allocates, following vLLM's memory profiler, per GPU:
///
/// ```text
/// requested = what CUDA reports (memory_gib · 0.99025 on HBM boards) · gpu_memory_utilization
/// KV bytes  = requested − weight bytes / tp − profiling activation peak − non-torch memory
/// blocks    = floor(KV bytes / (KV bytes per token per GPU · block_size · layers per group / layers))
/// ```
///
/// A block holds one KV cache group's layers ([`kv_groups`]): every layer
/// but for a model with sliding-window layers under the hybrid manager.
///
/// The activation peak is [`ModelConfig::profile_activation_bytes_per_gpu`]
/// at `--max-num-batched-tokens` and `--max-num-seqs`; non-torch memory is
/// 0.15 GiB at tp = 1 and 0.6 GiB at tp > 1. No constant here is fitted:
/// on the three H100 servers in `validation/` this gives 7 472 / 31 451 /
/// 27 595 blocks against the 7 462 / 31 356 / 27 510 they reported (0.1–0.3 %
/// high); pass `--num-gpu-blocks` when the real count is known. Fewer than
/// two blocks is [`CapacityError::DoesNotFit`].
pub fn kv_budget(model: &ModelConfig, gpu: &GpuSpec, sizing: &KvSizing) -> Result<KvBudget, CapacityError> {
    const GIB: f64 = (1u64 << 30) as f64;
    let tp = sizing.tp.max(1);
    let reported_gib = gpu.reported_memory_gib();
    let requested_gib = reported_gib * sizing.gpu_memory_utilization;
    let weights_gib = model.weight_bytes() / f64::from(tp) / GIB;
    let activation_peak_gib = model.profile_activation_bytes_per_gpu(tp, sizing.max_num_batched_tokens, sizing.max_num_seqs) / GIB;
    let non_torch_gib = NON_TORCH_GIB[usize::from(tp > 1)];
    let kv_cache_gib = requested_gib - weights_gib - activation_peak_gib - non_torch_gib;
    let (groups, group_layers) = kv_groups(model, sizing.hybrid_kv);
    let group_share = f64::from(group_layers) / f64::from(model.num_layers.max(1));
    let block_bytes = model.kv_bytes_per_token_per_gpu(tp) * group_share * f64::from(sizing.block_size_tokens);
    let blocks = (kv_cache_gib * GIB / block_bytes).floor();
    if blocks < 2.0 {
        let reserves_gib = activation_peak_gib + non_torch_gib;
        return Err(CapacityError::DoesNotFit { weights_gib, reserves_gib, available_gib: requested_gib, reported_gib });
    }
    Ok(KvBudget { requested_gib, weights_gib, activation_peak_gib, non_torch_gib, kv_cache_gib, blocks: blocks as u64, groups })
}

/// Number of KV blocks a vLLM instance allocates: [`kv_budget`]'s blocks.
pub fn kv_blocks(model: &ModelConfig, gpu: &GpuSpec, sizing: &KvSizing) -> Result<u64, CapacityError> {
    kv_budget(model, gpu, sizing).map(|b| b.blocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{find_gpu, find_model};

    /// NVIDIA's datasheet figures for two H100 variants, in the vendor shape (with sparsity).
    const H100_SXM_DATASHEET: &str = r#"{"name": "H100 SXM", "vendor": "NVIDIA", "compute": {"fp32": 67, "bf16_tensor_core": 1979,
        "fp8_tensor_core": 3958, "with_sparsity": true}, "memory": {"capacity_gb": 80, "bandwidth_tb_s": 3.35},
        "interconnect": {"nvlink_bandwidth_gb_s": 900, "pcie_bandwidth_gb_s": 128}, "power": {"tdp_watts": 700}, "datasheet_id": "2430615"}"#;
    const H100_NVL_DATASHEET: &str = r#"{"name": "H100 NVL", "compute": {"bf16_tensor_core": 1671, "fp8_tensor_core": 3341, "with_sparsity": true},
        "memory": {"capacity_gb": 94, "bandwidth_tb_s": 3.9}, "interconnect": {"nvlink_bandwidth_gb_s": 600, "pcie_bandwidth_gb_s": 128}}"#;

    #[test]
    fn a_vendor_datasheet_gives_the_figures_of_the_hand_written_bundled_spec() {
        for (sheet, bundled) in [(H100_SXM_DATASHEET, "H100"), (H100_NVL_DATASHEET, "H100-NVL")] {
            let parsed = GpuSpec::from_json(sheet).unwrap();
            let want = find_gpu(bundled).unwrap().spec();
            let figures = |g: &GpuSpec| {
                (g.bf16_tflops, g.fp8_tflops, g.hbm_tb_s, g.memory_gib, g.nvlink_gb_s, g.pcie_gb_s, g.mfu_prefill, g.mfu_decode)
            };
            assert_eq!(figures(&parsed), figures(&want), "{bundled}");
        }
        // Dense figures are taken as they are.
        let dense = GpuSpec::from_json(&H100_NVL_DATASHEET.replace("\"with_sparsity\": true", "\"with_sparsity\": false")).unwrap();
        assert_eq!(dense.bf16_tflops, 1671.0);
    }

    #[test]
    fn both_shapes_are_checked_and_errors_say_what_is_wrong() {
        let own = include_str!("../../../data/hardware/L40S.json");
        assert_eq!(GpuSpec::from_json(own).unwrap(), find_gpu("L40S").unwrap().spec());
        let e = GpuSpec::from_json(&H100_NVL_DATASHEET.replace(r#", "pcie_bandwidth_gb_s": 128"#, "")).unwrap_err();
        assert!(e.to_string().contains("interconnect.pcie_bandwidth_gb_s"), "{e}");
        let e = GpuSpec::from_json(&H100_NVL_DATASHEET.replace("3.9", "-3.9")).unwrap_err();
        // A datasheet's error names the datasheet's field.
        assert!(matches!(e, GpuSpecParseError::Invalid(GpuSpecError { field: "memory.bandwidth_tb_s", .. })), "{e}");
        // A field given twice is refused, not read as its last value.
        let e = GpuSpec::from_json(&own.replacen('{', "{\"bf16_tflops\": 1,", 1)).unwrap_err();
        assert!(e.to_string().contains("field `bf16_tflops` is given twice"), "{e}");
        // Peaks a thousand times any board's are refused (fuzzing: 1e308 TFLOP/s passed).
        let e = GpuSpec::from_json(&own.replace("\"bf16_tflops\": 362.05", "\"bf16_tflops\": 1e308")).unwrap_err();
        assert!(e.to_string().contains("`bf16_tflops` = ") && e.to_string().contains("at most 1e6"), "{e}");
        // Memory no board carries is refused in either shape (fuzzing: 1 GiB and 1e6 GiB passed).
        for (memory, shown) in [("1", "1"), ("1e6", "1000000")] {
            let e = GpuSpec::from_json(&own.replace("\"memory_gib\": 48.0", &format!("\"memory_gib\": {memory}"))).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "GPU spec field `memory_gib` = {shown} is invalid: must be a number of GiB in [4, 4096] (what accelerator boards carry)"
                )
            );
            let e =
                GpuSpec::from_json(&H100_NVL_DATASHEET.replace("\"capacity_gb\": 94", &format!("\"capacity_gb\": {memory}"))).unwrap_err();
            assert!(e.to_string().starts_with(&format!("GPU spec field `memory.capacity_gb` = {shown} is invalid")), "{e}");
        }
        let e = GpuSpec::from_json(r#"{"name": "x", "compute": {}}"#).unwrap_err();
        assert!(e.to_string().contains("bf16_tensor_core"), "{e}");
        assert!(matches!(GpuSpec::from_json("{"), Err(GpuSpecParseError::Format(_))));
        let e = GpuSpec::from_json(&own.replace("\"source\"", "\"colour\": 1, \"source\"")).unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
        // Topology and collective figures are checked too.
        let a100 = include_str!("../../../data/hardware/A100-80GB.json");
        let e = GpuSpec::from_json(&a100.replace("\"nvlink_domain_gpus\": 8", "\"nvlink_domain_gpus\": 1")).unwrap_err();
        assert_eq!(e.to_string(), "GPU spec field `nvlink_domain_gpus` = 1 is invalid: must be at least 2");
        let e = GpuSpec::from_json(&a100.replace("\"bus_efficiency\": 0.740", "\"bus_efficiency\": 7.40")).unwrap_err();
        assert!(e.to_string().contains("kernels.allreduce_pcie.bus_efficiency") && e.to_string().contains("(0, 1]"), "{e}");
        let e = GpuSpec::from_json(&a100.replace("\"nvlink_domain_gpus\": 8", "\"nvlink_domain_gpus\": -3")).unwrap_err();
        assert!(e.to_string().starts_with("field `nvlink_domain_gpus`: invalid value: integer `-3`"), "{e}");
        let e = GpuSpec::from_json(&a100.replace("\"latency_us\": 57.6", "\"latency_us\": \"slow\"")).unwrap_err();
        assert!(e.to_string().starts_with("field `kernels.allreduce_pcie.latency_us`: invalid type: string"), "{e}");
        let e = GpuSpec::from_json(&a100.replace("\"latency_us\": 41.9", "\"latency_us\": -41.9")).unwrap_err();
        assert!(e.to_string().contains("kernels.allreduce_nvlink.latency_us"), "{e}");
        let e = GpuSpec::from_json(&a100.replace("\"compute_capability\": 8.0", "\"compute_capability\": 0.5")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GPU spec field `compute_capability` = 0.5 is invalid: must be a CUDA compute capability such as 9.0 or 8.6"
        );
        let e = GpuSpec::from_json(&a100.replace("\"hop_latency_us\": 0.88", "\"hop_latency_us\": -0.88")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GPU spec field `kernels.allreduce_nvlink.hop_latency_us` = -0.88 is invalid: must be a number of at least 0"
        );
        let sheet =
            H100_NVL_DATASHEET.replace("\"nvlink_bandwidth_gb_s\": 600,", "\"nvlink_bandwidth_gb_s\": 600, \"nvlink_domain_gpus\": 2,");
        let bridged = GpuSpec::from_json(&sheet).unwrap();
        assert_eq!((bridged.allreduce_link(2), bridged.allreduce_link(4)), (Link::NvLink, Link::Pcie));
        assert_eq!(
            GpuSpec::from_json(H100_NVL_DATASHEET).unwrap().allreduce_link(8),
            Link::NvLink,
            "an HGX board's 8 when the sheet says nothing"
        );
    }

    /// vLLM's grouping (`_get_kv_cache_groups_uniform_page_size`) of the
    /// layer mixes models ship with, from gpt-oss-20b's `config.json` with
    /// its `layer_types` rewritten.
    #[test]
    fn layers_are_grouped_as_vllm_groups_them() {
        let gpt_oss: serde_json::Value = serde_json::from_str(include_str!("../tests/fixtures/gpt-oss-20b.json")).unwrap();
        let with_layers = |sliding: usize, full: usize| {
            let mut cfg = gpt_oss.clone();
            let types: Vec<&str> =
                std::iter::repeat_n("sliding_attention", sliding).chain(std::iter::repeat_n("full_attention", full)).collect();
            cfg["layer_types"] = serde_json::json!(types);
            cfg["num_hidden_layers"] = serde_json::json!(sliding + full);
            ModelConfig::from_hf_json(&cfg.to_string()).unwrap()
        };
        let groups = |m: &ModelConfig, hybrid| kv_groups(m, hybrid);
        let g = |full, sliding| KvGroups { full, sliding, window_tokens: 128 };
        // gpt-oss: 12 + 12 layers, two groups of 12.
        assert_eq!(groups(&with_layers(12, 12), true), (g(1, 1), 12));
        // Gemma-3-27B's 52 sliding and 10 full: groups of 10, the last sliding one padded.
        assert_eq!(groups(&with_layers(52, 10), true), (g(1, 6), 10));
        // Nearly balanced (gpt-oss with an EAGLE layer): the larger count, padded.
        assert_eq!(groups(&with_layers(12, 13), true), (g(1, 1), 13));
        // Off, or every layer sliding: one group of every layer.
        assert_eq!(groups(&with_layers(12, 12), false), (KvGroups::FULL, 24));
        assert_eq!(groups(&with_layers(24, 0), false), (g(0, 1), 24));
        // Chunked local attention (Llama-4): vLLM keeps the manager off by default.
        let scout =
            ModelConfig::from_hf_json(find_model("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic").unwrap().config_json).unwrap();
        assert!(scout.local_attention.is_some());
        assert_eq!(groups(&scout, true), (KvGroups::FULL, scout.num_layers));
        // A block of one group's 12 layers is half a block of all 24: twice the blocks.
        let h100 = find_gpu("H100").unwrap().spec();
        let blocks =
            |hybrid_kv| kv_budget(&with_layers(12, 12), &h100, &KvSizing { hybrid_kv, ..KvSizing::defaults(1, &h100) }).unwrap().blocks;
        assert!(blocks(true).abs_diff(2 * blocks(false)) <= 1, "{} vs {}", blocks(true), blocks(false));
    }

    #[test]
    fn a_larger_profiling_budget_leaves_fewer_blocks_and_too_large_a_model_is_refused() {
        let model = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        let h100 = find_gpu("H100").unwrap().spec();
        let blocks = |tokens: u32, seqs: u32| {
            kv_blocks(&model, &h100, &KvSizing { max_num_batched_tokens: tokens, max_num_seqs: seqs, ..KvSizing::defaults(1, &h100) })
                .unwrap()
        };
        let mut last = u64::MAX;
        for tokens in [256, 2048, 8192, 32_768, 131_072] {
            let b = blocks(tokens, 256);
            assert!(b < last, "{tokens} tokens: {b} blocks, not fewer than {last}");
            last = b;
        }
        assert!(blocks(8192, 4096) < blocks(8192, 256), "more sampler rows leave fewer blocks");
        // The budget of the real Llama-2-7B server (2048 tokens, 128 sequences), by hand:
        // 80 · 0.99025 · 0.9 GiB requested, 6.738 B fp16 weights, 2048 · 2 · 57 600 bytes of activations.
        let b = kv_budget(&model, &h100, &KvSizing { max_num_batched_tokens: 2048, max_num_seqs: 128, ..KvSizing::defaults(1, &h100) })
            .unwrap();
        assert!((b.requested_gib - 71.298).abs() < 1e-9, "{b:?}");
        assert!((b.weights_gib - model.total_params() * 2.0 / f64::from(1 << 30)).abs() < 1e-9, "{b:?}");
        assert_eq!((b.activation_peak_gib, b.non_torch_gib), (235_929_600.0 / f64::from(1 << 30), 0.15));
        assert_eq!(b.kv_cache_gib, b.requested_gib - b.weights_gib - b.activation_peak_gib - b.non_torch_gib);
        assert_eq!(b.blocks, (b.kv_cache_gib * 1024.0 / 8.0).floor() as u64, "8 MiB blocks");
        let small = KvSizing { gpu_memory_utilization: 0.15, ..KvSizing::defaults(1, &h100) };
        match kv_blocks(&model, &h100, &small) {
            Err(e @ CapacityError::DoesNotFit { weights_gib, reserves_gib, available_gib, reported_gib }) => {
                assert!((available_gib - 80.0 * 0.99025 * 0.15).abs() < 1e-6 && reported_gib == 79.22, "{available_gib} {reported_gib}");
                // 6.74 B parameters in fp16.
                assert!((weights_gib - 12.55).abs() < 0.01 && reserves_gib > 0.15, "{weights_gib} {reserves_gib}");
                assert!(e.to_string().ends_with("; raise --gpu-memory-utilization or --tp"), "{e}");
            }
            other => panic!("expected DoesNotFit, got {other:?}"),
        }
        // Weights that fit but leave no room for the profiling run's peak:
        // a smaller token budget is worth suggesting.
        let tight = KvSizing { gpu_memory_utilization: 0.165, max_num_batched_tokens: 131_072, ..KvSizing::defaults(1, &h100) };
        let e = kv_blocks(&model, &h100, &tight).unwrap_err();
        assert!(e.to_string().contains("lower --max-num-batched-tokens"), "{e}");
        // Weights larger than the GPU: only more GPUs or a larger one help.
        let l40s = find_gpu("L40S").unwrap().spec();
        let big = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-70b-hf").unwrap().config_json).unwrap();
        let e = kv_blocks(&big, &l40s, &KvSizing::defaults(2, &l40s)).unwrap_err();
        assert!(e.to_string().ends_with("; raise --tp or use a GPU with more memory"), "{e}");
    }
}
