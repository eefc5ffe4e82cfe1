//! The physics-normalized model: 11 α (arrival-to-queue) and 16 β (step)
//! features exactly as frozen in `latency-model-research.md` iterations 4–6
//! (chunk-aware attention work, probabilistic-OR congestion gate, token-based
//! MoE activation, LM head FLOPs, ε-guarded denominators, features clamped to
//! [0, 100]). Delay and step time are dot products with fitted coefficients.
//!
//! The feature functions are pure ([`alpha_features`], [`beta_features`] over
//! [`PhysicsConstants`] and the spec's `AlphaInput` / `BetaInput`), so they
//! are checked against an independently computed golden fixture.
//!
//! Two readings of the spec, stated here because the spec leaves them open:
//! weight bytes use the checkpoint's bytes per weight (equal to the activation
//! width for every half-precision model), and the MLP width of a MoE model is
//! the per-expert width. CPU offloading is not simulated, so features α10,
//! β13 and β14 are 0 in simulation (the functions still compute them).

use std::sync::Arc;

use super::{FeatureBasis, LatencyModel, QueueingInput, StepBatch, coefficient_array, linear_step_time, overhead_micros};
use crate::hardware::GpuSpec;
use crate::model::{AttentionMix, ModelConfig, WeightClass};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;

/// Number of α features.
pub const ALPHA_LEN: usize = 11;
/// Number of β features.
pub const BETA_LEN: usize = 16;
/// ε of every guarded denominator.
pub const EPSILON: f64 = 1e-6;
/// Every feature is clamped to [0, FEATURE_CLAMP].
pub const FEATURE_CLAMP: f64 = 100.0;
/// Share of nominal PCIe bandwidth available to KV offload transfers (iteration 4).
pub const PCIE_EFFICIENCY: f64 = 0.75;

/// The vLLM knobs the features use (iteration 5's `VLLMKnobs`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct VllmKnobs {
    /// `--max-num-seqs`.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`.
    pub max_batched_tokens: u32,
    /// `--enable-chunked-prefill`.
    pub chunked_prefill_enabled: bool,
    /// CPU KV offloading.
    pub cpu_offloading: bool,
    /// `--block-size`.
    pub block_size_tokens: u32,
    /// GPU KV blocks.
    pub total_kv_blocks_gpu: u64,
    /// CPU KV blocks (0 without offloading).
    pub total_kv_blocks_cpu: u64,
}

impl VllmKnobs {
    /// The knobs of a simulated instance (no CPU offloading).
    pub fn of(cfg: &InstanceConfig) -> VllmKnobs {
        VllmKnobs {
            max_num_seqs: cfg.scheduler.max_num_seqs,
            max_batched_tokens: cfg.scheduler.max_num_batched_tokens,
            chunked_prefill_enabled: cfg.scheduler.enable_chunked_prefill,
            cpu_offloading: false,
            block_size_tokens: cfg.block_size,
            total_kv_blocks_gpu: cfg.num_gpu_blocks,
            total_kv_blocks_cpu: 0,
        }
    }
}

/// Constants derived once per deployment (iteration 2 "static constants",
/// iteration 5's LM head). Bytes, FLOPs, bytes/s, FLOP/s and seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct PhysicsConstants {
    /// L·(4h(h + kv_dim) + n_mlp_proj·2·h·I·moe_factor) + 2·h·V.
    pub flops_linear_per_token: f64,
    /// (2h² + 2h·kv_dim)·bytes per weight, one layer.
    pub weight_bytes_attn: f64,
    /// n_mlp_proj·h·I·bytes per weight: one expert's (or the dense) MLP, one layer.
    pub weight_bytes_mlp_unit: f64,
    /// L·(weight_bytes_attn + weight_bytes_mlp_unit·moe_weight_factor), moe_weight_factor = top_k (MoE) or 1.
    pub weight_bytes_total: f64,
    /// 2·L·kv_dim·2·kvBPP bytes (the published formula's, with the KV cache's element size).
    pub kv_bytes_per_token: f64,
    /// Peak FLOP/s ÷ tp.
    pub hw_peak_flops: f64,
    /// HBM bytes/s ÷ tp.
    pub hw_peak_bandwidth: f64,
    /// PCIe bytes/s × [`PCIE_EFFICIENCY`].
    pub hw_pcie_bandwidth_eff: f64,
    /// GPU-to-GPU bytes/s.
    pub hw_interconnect_bw: f64,
    /// (tp > 1)·L·2·h·dtype·2(tp − 1)/tp.
    pub comm_bytes_per_token: f64,
    /// max(max_batched_tokens·flops_linear_per_token / hw_peak_flops, weight_bytes_total / hw_peak_bandwidth), seconds.
    pub roofline_step_time: f64,
    /// L.
    pub num_layers: f64,
    /// h.
    pub hidden_size: f64,
    /// KVH / H.
    pub gqa_ratio: f64,
    /// (top_k, num_experts) of a MoE model.
    pub moe: Option<(f64, f64)>,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Server knobs.
    pub knobs: VllmKnobs,
}

/// MLP projections: 3 for gated (SwiGLU) FFNs, 2 for the classic up/down FFN.
fn n_mlp_proj(architecture: &str) -> f64 {
    const UNGATED: [&str; 5] = ["GPT2", "GPTNeoX", "GPTBigCode", "OPT", "Falcon"];
    if UNGATED.iter().any(|a| architecture.starts_with(a)) { 2.0 } else { 3.0 }
}

impl PhysicsConstants {
    /// Derives the constants of `model` on `tp` GPUs of type `gpu` with `knobs`.
    pub fn new(model: &ModelConfig, gpu: &GpuSpec, tp: u32, knobs: VllmKnobs) -> PhysicsConstants {
        let tp = tp.max(1);
        let tp_f = f64::from(tp);
        let h = f64::from(model.hidden_size);
        let l = f64::from(model.num_layers);
        let kv_dim = h * f64::from(model.num_kv_heads) / f64::from(model.num_attention_heads);
        let proj = n_mlp_proj(&model.architecture);
        let (width, moe_factor, moe_weight_factor, moe) = match &model.moe {
            Some(m) => {
                let (k, n) = (f64::from(m.experts_per_token), f64::from(m.num_experts));
                (f64::from(m.expert_intermediate_size), k / n, k, Some((k, n)))
            }
            None => (f64::from(model.intermediate_size), 1.0, 1.0, None),
        };
        // Each class's FLOPs at half precision's speed, its bytes at its own precision.
        let mlp_class = if model.moe.is_some() { WeightClass::RoutedExperts } else { WeightClass::DenseFfn };
        let (scale, wbpp) = (gpu.gemm_time_scales(&model.weights), model.weights.bytes_per_param_by_class());
        let flops_attn_linear = 4.0 * h * (h + kv_dim) * scale.attention;
        let flops_mlp = proj * 2.0 * h * width * moe_factor * scale.get(mlp_class);
        let flops_linear_per_token = l * (flops_attn_linear + flops_mlp) + 2.0 * h * f64::from(model.vocab_size) * scale.lm_head;
        let weight_bytes_attn = (2.0 * h * h + 2.0 * h * kv_dim) * wbpp.attention;
        let weight_bytes_mlp_unit = proj * h * width * wbpp.get(mlp_class);
        let weight_bytes_total = l * (weight_bytes_attn + weight_bytes_mlp_unit * moe_weight_factor);
        let dtype = model.dtype_bytes;
        let hw_peak_flops = gpu.peak_flops() / tp_f;
        let hw_peak_bandwidth = gpu.hbm_bytes_per_s() / tp_f;
        let comm_bytes_per_token = if tp > 1 { l * 2.0 * h * dtype * 2.0 * (tp_f - 1.0) / tp_f } else { 0.0 };
        let roofline_step_time =
            (f64::from(knobs.max_batched_tokens) * flops_linear_per_token / hw_peak_flops).max(weight_bytes_total / hw_peak_bandwidth);
        PhysicsConstants {
            flops_linear_per_token,
            weight_bytes_attn,
            weight_bytes_mlp_unit,
            weight_bytes_total,
            kv_bytes_per_token: 2.0 * l * kv_dim * 2.0 * model.kv_dtype_bytes,
            hw_peak_flops,
            hw_peak_bandwidth,
            hw_pcie_bandwidth_eff: gpu.pcie_gb_s * 1e9 * PCIE_EFFICIENCY,
            hw_interconnect_bw: gpu.link_bytes_per_s(tp),
            comm_bytes_per_token,
            roofline_step_time,
            num_layers: l,
            hidden_size: h,
            gqa_ratio: f64::from(model.num_kv_heads) / f64::from(model.num_attention_heads),
            moe,
            tp,
            knobs,
        }
    }

    /// Bytes of one KV block: block_size_tokens × kv_bytes_per_token.
    pub fn block_size_bytes(&self) -> f64 {
        f64::from(self.knobs.block_size_tokens) * self.kv_bytes_per_token
    }

    /// Fraction of experts a step of `scheduled_tokens` tokens activates:
    /// 1 − (1 − top_k/N)^max(1, T); 0 for dense models and empty steps.
    pub fn moe_activation(&self, scheduled_tokens: f64) -> f64 {
        match self.moe {
            Some((k, n)) if scheduled_tokens > 0.0 => 1.0 - (1.0 - k / n).powf(scheduled_tokens.max(1.0)),
            _ => 0.0,
        }
    }

    /// Weight bytes a step of `scheduled_tokens` tokens reads: all attention
    /// weights plus the MLP weights of N·activation experts (dense: one MLP).
    pub fn effective_weight_bytes(&self, scheduled_tokens: f64) -> f64 {
        let experts = match self.moe {
            Some((_, n)) => n * self.moe_activation(scheduled_tokens),
            None => 1.0,
        };
        self.num_layers * (self.weight_bytes_attn + self.weight_bytes_mlp_unit * experts)
    }
}

/// What α sees when a request arrives (iteration 4's `AlphaInput`).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct AlphaInput {
    /// Requests in the running batch.
    pub running_depth: f64,
    /// Requests waiting.
    pub waiting_depth: f64,
    /// Fraction of GPU KV blocks in use.
    pub kv_usage_ratio: f64,
    /// The request's prompt length.
    pub prompt_tokens: f64,
    /// Fraction of the prompt the prefix cache holds.
    pub prefix_hit_ratio: f64,
    /// Free KV bytes: total blocks × block bytes × max(ε, 1 − usage).
    pub kv_free_bytes: f64,
    /// EMA of preempted / running per step.
    pub preemption_ema: f64,
}

/// What β sees of one step (iteration 5's `BetaInput`).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BetaInput {
    /// Σ new tokens of prefill requests.
    pub prefill_tokens: f64,
    /// Decode requests (one token each).
    pub decode_tokens: f64,
    /// All tokens of the step.
    pub scheduled_tokens: f64,
    /// Prefill requests.
    pub num_prefill_reqs: f64,
    /// Decode requests.
    pub num_decode_reqs: f64,
    /// Requests in the running batch.
    pub running_depth: f64,
    /// Σ over prefill requests of (computed + chunk)·chunk.
    pub sum_prefill_attn_work: f64,
    /// Σ over decode requests of their sequence length.
    pub decode_context_tokens: f64,
    /// Σ over decode requests of their KV blocks.
    pub sum_decode_kv_blocks: f64,
    /// EMA of preempted / running per step.
    pub preemption_ema: f64,
    /// KV blocks moved between GPU and CPU this step.
    pub transfer_blocks: f64,
    /// CPU-resident KV blocks read this step.
    pub cpu_resident_read_blocks: f64,
}

fn safe_div(numerator: f64, denominator: f64) -> f64 {
    numerator / denominator.max(EPSILON)
}

fn clamp_all<const N: usize>(mut f: [f64; N]) -> [f64; N] {
    for x in &mut f {
        *x = x.clamp(0.0, FEATURE_CLAMP);
    }
    f
}

fn indicator(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// The 11 α features (iteration 4 table, probabilistic-OR gate g = s + m − s·m).
pub fn alpha_features(c: &PhysicsConstants, a: &AlphaInput) -> [f64; ALPHA_LEN] {
    let k = &c.knobs;
    let s = a.running_depth / f64::from(k.max_num_seqs);
    let m = a.kv_usage_ratio;
    let g = s + m - s * m;
    let cpu_expansion = indicator(k.cpu_offloading) * safe_div(k.total_kv_blocks_cpu as f64, k.total_kv_blocks_gpu as f64);
    clamp_all([
        s,
        m,
        a.prompt_tokens * c.flops_linear_per_token / c.hw_peak_flops,
        1.0,
        g * a.waiting_depth.ln_1p() * c.roofline_step_time,
        g * m * safe_div(a.waiting_depth, f64::from(k.max_num_seqs)),
        g * a.prefix_hit_ratio * safe_div(a.prompt_tokens, f64::from(k.max_batched_tokens)),
        g * safe_div(a.prompt_tokens * c.kv_bytes_per_token, a.kv_free_bytes),
        g * a.preemption_ema,
        g * cpu_expansion,
        g,
    ])
}

/// The 16 β features (iteration 4 table with iteration 5's chunk-aware attention).
pub fn beta_features(c: &PhysicsConstants, b: &BetaInput) -> [f64; BETA_LEN] {
    let k = &c.knobs;
    let offload = indicator(k.cpu_offloading);
    clamp_all([
        b.prefill_tokens * c.flops_linear_per_token / c.hw_peak_flops,
        b.sum_prefill_attn_work * c.num_layers * 2.0 * c.hidden_size / c.hw_peak_flops,
        indicator(b.decode_tokens > 0.0) * c.effective_weight_bytes(b.scheduled_tokens) / c.hw_peak_bandwidth,
        b.decode_context_tokens * 2.0 * c.num_layers * c.hidden_size / c.hw_peak_flops,
        b.sum_decode_kv_blocks * c.block_size_bytes() / c.hw_peak_bandwidth,
        safe_div(b.scheduled_tokens, f64::from(k.max_batched_tokens)),
        safe_div(b.prefill_tokens, b.prefill_tokens + b.decode_tokens),
        c.moe_activation(b.scheduled_tokens),
        b.scheduled_tokens * c.comm_bytes_per_token / c.hw_interconnect_bw,
        c.gqa_ratio,
        1.0 / b.scheduled_tokens.max(1.0),
        b.preemption_ema,
        offload * b.transfer_blocks * c.block_size_bytes() / c.hw_pcie_bandwidth_eff,
        offload * b.cpu_resident_read_blocks * c.block_size_bytes() / c.hw_pcie_bandwidth_eff,
        indicator(k.chunked_prefill_enabled && b.num_prefill_reqs > 0.0 && b.num_decode_reqs > 0.0),
        1.0,
    ])
}

/// The physics-normalized feature basis of one deployment.
#[derive(Clone, Debug)]
pub struct PhysicsNormalizedBasis {
    /// Derived constants.
    pub constants: PhysicsConstants,
    /// How much of the context local-attention layers read (`None`: all of it).
    attention_mix: Option<AttentionMix>,
}

impl PhysicsNormalizedBasis {
    /// Builds the basis for `model` on `tp` GPUs of type `gpu`, served with `instance`'s knobs.
    pub fn new(model: &ModelConfig, gpu: &GpuSpec, tp: u32, instance: &InstanceConfig) -> PhysicsNormalizedBasis {
        PhysicsNormalizedBasis {
            constants: PhysicsConstants::new(model, gpu, tp, VllmKnobs::of(instance)),
            attention_mix: model.attention_mix(),
        }
    }

    /// The spec's `AlphaInput` of a simulated arrival.
    pub fn alpha_input(&self, q: &QueueingInput) -> AlphaInput {
        let c = &self.constants;
        let prompt = f64::from(q.prompt_tokens);
        AlphaInput {
            running_depth: f64::from(q.load.running),
            waiting_depth: f64::from(q.load.waiting),
            kv_usage_ratio: q.load.kv_usage,
            prompt_tokens: prompt,
            prefix_hit_ratio: f64::from(q.prefix_hit_tokens) / prompt.max(1.0),
            kv_free_bytes: c.knobs.total_kv_blocks_gpu as f64 * c.block_size_bytes() * (1.0 - q.load.kv_usage).max(EPSILON),
            preemption_ema: q.load.preemption_ema,
        }
    }

    /// The spec's `BetaInput` of a simulated step.
    pub fn beta_input(&self, batch: &StepBatch<'_>) -> BetaInput {
        let block = self.constants.knobs.block_size_tokens;
        let mut b =
            BetaInput { running_depth: f64::from(batch.load.running), preemption_ema: batch.load.preemption_ema, ..BetaInput::default() };
        for e in batch.entries {
            let new = f64::from(e.new_tokens);
            b.scheduled_tokens += new;
            if e.is_decode() {
                b.decode_tokens += new;
                b.num_decode_reqs += 1.0;
                b.decode_context_tokens +=
                    self.attention_mix.map_or(f64::from(e.context_tokens()), |m| m.decode_context(e.computed_tokens) + new);
                b.sum_decode_kv_blocks += f64::from(e.context_tokens().div_ceil(block));
            } else {
                b.prefill_tokens += new;
                b.num_prefill_reqs += 1.0;
                let work = f64::from(e.context_tokens()) * new;
                b.sum_prefill_attn_work += self.attention_mix.map_or(work, |m| work * m.prefill_scale(e.computed_tokens, e.new_tokens));
            }
        }
        b
    }
}

/// Names of the α coefficients, in order.
pub const ALPHA_NAMES: [&str; 11] = [
    "batch_saturation",
    "kv_pressure",
    "admission_compute",
    "base_bias",
    "queue_drain",
    "queue_memory",
    "prefix_cache_benefit",
    "memory_admission_gap",
    "preemption_disruption",
    "cpu_offload_expansion",
    "queued_regime_bias",
];

/// Names of the β coefficients, in order.
pub const BETA_NAMES: [&str; 16] = [
    "prefill_linear",
    "prefill_attention",
    "decode_weights",
    "decode_attention",
    "kv_read",
    "batch_utilization",
    "prefill_decode_mix",
    "moe_activation",
    "tp_communication",
    "gqa_ratio",
    "fixed_step_overhead",
    "preemption",
    "cpu_offload_transfer",
    "cpu_offload_read",
    "chunked_prefill_mix",
    "bias",
];

impl FeatureBasis for PhysicsNormalizedBasis {
    fn name(&self) -> &'static str {
        "physics-normalized"
    }

    fn alpha_names(&self) -> &'static [&'static str] {
        &ALPHA_NAMES
    }

    fn beta_names(&self) -> &'static [&'static str] {
        &BETA_NAMES
    }

    fn step_features(&self, batch: &StepBatch<'_>, out: &mut [f64]) {
        out.copy_from_slice(&beta_features(&self.constants, &self.beta_input(batch)));
    }

    fn alpha_features(&self, arrival: &QueueingInput, _output_tokens: u32, ttft: &mut [f64], e2e: &mut [f64]) {
        let f = alpha_features(&self.constants, &self.alpha_input(arrival));
        ttft.copy_from_slice(&f);
        e2e.copy_from_slice(&f);
    }

    fn with_coefficients_unchecked(&self, alpha: &[f64], beta: &[f64]) -> Arc<dyn LatencyModel> {
        Arc::new(PhysicsNormalized { basis: self.clone(), alpha: coefficient_array(alpha), beta: coefficient_array(beta) })
    }
}

/// The physics-normalized model with its coefficients: queueing delay α·F_queue µs,
/// step time β·F_step µs, no per-token or completion overheads.
#[derive(Clone, Debug)]
pub struct PhysicsNormalized {
    /// The feature basis.
    pub basis: PhysicsNormalizedBasis,
    /// α, in feature order.
    pub alpha: [f64; ALPHA_LEN],
    /// β, in feature order.
    pub beta: [f64; BETA_LEN],
}

impl LatencyModel for PhysicsNormalized {
    fn name(&self) -> &'static str {
        "physics-normalized"
    }

    fn step_time(&self, batch: &StepBatch<'_>) -> Micros {
        linear_step_time(batch, &self.beta, || beta_features(&self.basis.constants, &self.basis.beta_input(batch)))
    }

    fn queueing_delay(&self, input: &QueueingInput) -> Micros {
        let f = alpha_features(&self.basis.constants, &self.basis.alpha_input(input));
        overhead_micros(f.iter().zip(&self.alpha).map(|(x, a)| x * a).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{find_gpu, find_model};
    use blis_engine::latency::{BatchEntry, InstanceLoad};

    fn instance() -> InstanceConfig {
        InstanceConfig::basic(128, 2048, 4096, 1000)
    }

    #[test]
    fn simulated_steps_and_arrivals_map_to_the_spec_inputs() {
        let model = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        let basis = PhysicsNormalizedBasis::new(&model, &find_gpu("H100").unwrap().spec(), 1, &instance());
        let entries = [
            // A 512-token chunk at position 1024 of a 4096-token prompt: (1024 + 512)·512 work.
            BatchEntry { computed_tokens: 1024, new_tokens: 512, prompt_tokens: 4096 },
            // Decodes of sequence length 33 (3 blocks) and 16 (1 block).
            BatchEntry { computed_tokens: 32, new_tokens: 1, prompt_tokens: 20 },
            BatchEntry { computed_tokens: 15, new_tokens: 1, prompt_tokens: 10 },
        ];
        let load = InstanceLoad { running: 7, waiting: 2, kv_usage: 0.25, kv_free_blocks: 700, preemption_ema: 0.125 };
        let b = basis.beta_input(&StepBatch { entries: &entries, load, preempted: 0 });
        assert_eq!(
            b,
            BetaInput {
                prefill_tokens: 512.0,
                decode_tokens: 2.0,
                scheduled_tokens: 514.0,
                num_prefill_reqs: 1.0,
                num_decode_reqs: 2.0,
                running_depth: 7.0,
                sum_prefill_attn_work: 1536.0 * 512.0,
                decode_context_tokens: 49.0,
                sum_decode_kv_blocks: 4.0,
                preemption_ema: 0.125,
                transfer_blocks: 0.0,
                cpu_resident_read_blocks: 0.0,
            }
        );
        let a = basis.alpha_input(&QueueingInput { prompt_tokens: 400, prefix_hit_tokens: 100, load });
        // 1000 blocks · 16 tokens · 2·32·4096·2·2 bytes · (1 − 0.25)
        assert_eq!(a.kv_free_bytes, 1000.0 * 16.0 * 1_048_576.0 * 0.75);
        assert_eq!((a.prefix_hit_ratio, a.running_depth, a.waiting_depth), (0.25, 7.0, 2.0));
    }
}
