//! The roofline model: analytical step time from FLOPs and bytes moved, with
//! no trained coefficients (`latency-formulas.md` §1).

use super::basis::experts_touched;
use super::expert_load::ExpertLoad;
use super::moe_tiles::MoeTiles;
use super::{LatencyModel, StepBatch, step_micros};
use crate::hardware::GpuSpec;
use crate::model::{AttentionMix, ModelConfig};
use blis_engine::time::Micros;

/// Per-request work, per layer, is GEMMs + attention + vector ops; the step
/// costs `max(compute, bytes / bandwidth)` plus tensor-parallel all-reduce:
///
/// ```text
/// ctx       = p + (n − 1)/2  (n > 1)   or   p  (n = 1)           p computed, n new tokens
/// flops     = n · linear_flops_per_token + L · 4·H·n·ctx·dH       GEMMs (2 FLOPs per weight, SwiGLU = 3 matrices)
///           + L · (5·H·n·ctx + 2·n·d)                             softmax, RoPE, norms
///           + 2·d·V per sampled token                             LM head
///           + L · 2·kv_b·p per prefill (latent attention)         the cached latents up-projected
///             (latent attention's dH: ModelConfig::attention_pair_width, for prefill and for decode)
/// compute   = Σ prefill flops / (tp·peak·MFU_prefill) + Σ decode flops / (tp·peak·MFU_decode)
/// bytes     = weights read once (MoE: N·(1 − ((N−k)/N)^T) experts for T tokens, LM head included) / tp
///           + Σ [KV bytes per token · (n + p) + L·d·BPP·n] / tp
/// allreduce = (tp > 1) · 2·L · T·d·BPP · 2(tp − 1)/tp / link bandwidth (NVLink within its domain, else PCIe)
///             (expert-parallel: 2·L + (k − 1)·nMoE layers' worth, the MoE all-to-all)
/// step      = max(compute, bytes / HBM bandwidth) + allreduce,  at least 1 µs
/// ```
///
/// Expert-parallel, a MoE layer waits for its busiest GPU: the routed
/// experts' FLOPs are scaled by the busiest rank's token–expert assignments
/// over the mean, and the experts' bytes by its experts touched over the
/// mean (`latency::expert_load`), as trained-physics does. The routed
/// experts' FLOPs also include the fused MoE kernel's tile padding P for the
/// step's tokens (`latency::moe_tiles`), as trained-physics's do.
///
/// Layers with local attention (sliding windows, Llama-4's chunks) read only
/// their span: the context terms (attention FLOPs, vector ops per context
/// token, KV reads) count what each entry reads averaged over the layers
/// ([`AttentionMix`]), as every latency model's do.
///
/// Deviations from the spec's concrete form, chosen because they are the
/// physics: the FFN counts SwiGLU's three matrices (the spec's reference
/// implementation counts two), the LM head is counted for sampled tokens only
/// (vLLM computes logits only where it samples) and its weights are read every
/// step, and the all-reduce term is explicit. Roofline has no CPU overheads.
#[derive(Clone, Debug)]
pub struct Roofline {
    linear_flops_per_token: f64,
    lm_head_flops: f64,
    /// Attention-score FLOPs per new token and context token of a prefill, and of a decode.
    attn_flops_per_ctx_token: (f64, f64),
    /// FLOPs per cached context token of a prefill (latent attention's up-projection).
    upprojection_flops_per_ctx_token: f64,
    vector_flops_per_ctx_token: f64,
    vector_flops_per_token: f64,
    weight_bytes_dense: f64,
    expert_bytes: f64,
    moe: Option<(f64, f64)>,
    /// The fused-MoE kernel's tiles on this server (`None`: dense).
    tiles: Option<MoeTiles>,
    /// The tiles with whole experts spread over the GPUs, taken by
    /// [`Roofline::with_expert_parallel`].
    tiles_expert_parallel: Option<MoeTiles>,
    /// FLOPs of one token's k routed experts, all MoE layers.
    routed_flops_per_token: f64,
    /// The busiest rank's skews, when expert-parallel.
    expert_parallel: Option<ExpertLoad>,
    kv_bytes_per_token: f64,
    activation_bytes_per_token: f64,
    allreduce_bytes_per_token: f64,
    tp: f64,
    peak_flops: f64,
    mfu_prefill: f64,
    mfu_decode: f64,
    hbm_bytes_per_s: f64,
    interconnect_bytes_per_s: f64,
    /// MoE layers.
    moe_layers: f64,
    /// One layer's all-reduce bytes per token and GPU: d·BPP·2(tp − 1)/tp (0 at tp = 1).
    d_bpp_ring: f64,
    /// How much of the context local-attention layers read (`None`: all of it).
    attention_mix: Option<AttentionMix>,
}

impl Roofline {
    /// Builds the model for `model` on `tp` GPUs of type `gpu`.
    pub fn new(model: &ModelConfig, gpu: &GpuSpec, tp: u32) -> Roofline {
        let l = f64::from(model.num_layers);
        let d = f64::from(model.hidden_size);
        let h = f64::from(model.num_attention_heads);
        let (dh_prefill, dh_decode) = model.attention_pair_width();
        let attention_scale = gpu.attention_time_scale(model);
        let bpp = model.dtype_bytes;
        // FLOPs at half precision's speed (8-bit float GEMMs count less), bytes at each class's precision.
        let scale = gpu.gemm_time_scales(&model.weights);
        let wbpp = model.weights.bytes_per_param_by_class();
        let gemm_flops = model.gemm_flops_per_token_by_class();
        let (expert_bytes, moe, shared_and_router_bytes, routed_flops_per_token) = match &model.moe {
            Some(m) => {
                let params_per_expert = 3.0 * d * f64::from(m.expert_intermediate_size) * f64::from(m.num_moe_layers);
                let shared = 3.0 * d * f64::from(m.shared_intermediate_size) * f64::from(m.num_moe_layers);
                let router = d * f64::from(m.num_experts) * f64::from(m.num_moe_layers);
                let k = f64::from(m.experts_per_token);
                (
                    params_per_expert * wbpp.routed_experts,
                    Some((f64::from(m.num_experts), k)),
                    shared * wbpp.shared_experts + router * bpp,
                    2.0 * k * params_per_expert * scale.routed_experts,
                )
            }
            None => (0.0, None, 0.0, 0.0),
        };
        let lm_head_params = f64::from(model.vocab_size) * d;
        let weight_bytes_dense = l * model.attention_params_per_layer() * wbpp.attention
            + f64::from(model.num_dense_layers()) * model.dense_ffn_params() * wbpp.dense_ffn
            + shared_and_router_bytes
            + lm_head_params * wbpp.lm_head;
        let tp_n = f64::from(tp.max(1));
        Roofline {
            linear_flops_per_token: model.stack_gemm_flops_per_token_by_class().weighted_sum(&scale),
            lm_head_flops: gemm_flops.lm_head * scale.lm_head,
            attn_flops_per_ctx_token: (l * 4.0 * h * dh_prefill * attention_scale, l * 4.0 * h * dh_decode * attention_scale),
            upprojection_flops_per_ctx_token: l * 2.0 * model.context_upprojection_params_per_layer() * scale.attention,
            vector_flops_per_ctx_token: l * 5.0 * h,
            vector_flops_per_token: l * 2.0 * d,
            weight_bytes_dense,
            expert_bytes,
            moe,
            tiles: MoeTiles::of(model, gpu, tp, false),
            tiles_expert_parallel: MoeTiles::of(model, gpu, tp, true),
            routed_flops_per_token,
            expert_parallel: None,
            // Over all ranks, replicated heads and latents included (÷ tp below).
            kv_bytes_per_token: model.kv_bytes_per_token_per_gpu(tp) * tp_n,
            activation_bytes_per_token: l * d * bpp,
            allreduce_bytes_per_token: if tp > 1 { 2.0 * l * d * bpp * 2.0 * (tp_n - 1.0) / tp_n } else { 0.0 },
            tp: tp_n,
            peak_flops: gpu.peak_flops(),
            mfu_prefill: gpu.mfu_prefill,
            mfu_decode: gpu.mfu_decode,
            hbm_bytes_per_s: gpu.hbm_bytes_per_s(),
            interconnect_bytes_per_s: gpu.link_bytes_per_s(tp),
            moe_layers: model.moe.as_ref().map_or(0.0, |m| f64::from(m.num_moe_layers)),
            d_bpp_ring: if tp > 1 { d * bpp * 2.0 * (tp_n - 1.0) / tp_n } else { 0.0 },
            attention_mix: model.attention_mix(),
        }
    }

    /// The model with MoE layers expert-parallel when `on` (vLLM
    /// `--enable-expert-parallel`): a MoE layer's FFN all-reduce gives way to
    /// an all-to-all carrying each token to its k experts' GPUs and back, k
    /// times the volume, over the same interconnect, and the layer waits for
    /// its busiest GPU. No effect on a dense model or at TP 1.
    pub fn with_expert_parallel(mut self, on: bool) -> Roofline {
        if let (true, Some((n, k)), true) = (on, self.moe, self.tp > 1.0) {
            self.allreduce_bytes_per_token += (k.max(1.0) - 1.0) * self.moe_layers * self.d_bpp_ring;
            self.expert_parallel = Some(ExpertLoad::new(n, k, self.tp as u32));
            self.tiles = self.tiles_expert_parallel;
        }
        self
    }
}

impl LatencyModel for Roofline {
    fn name(&self) -> &'static str {
        "roofline"
    }

    fn step_time(&self, batch: &StepBatch<'_>) -> Micros {
        if batch.entries.is_empty() {
            return super::MIN_STEP;
        }
        let (mut flops_pf, mut flops_dc, mut dyn_bytes, mut tokens, mut decode_tokens) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for e in batch.entries {
            let n = f64::from(e.new_tokens);
            let p = f64::from(e.computed_tokens);
            let ctx = if e.new_tokens > 1 { p + (n - 1.0) / 2.0 } else { p };
            // What local-attention layers read, averaged over the layers.
            let (ctx, p_read) = match &self.attention_mix {
                None => (ctx, p),
                Some(mix) => {
                    let read = mix.decode_context(e.computed_tokens);
                    (if e.is_decode() { read } else { ctx * mix.prefill_scale(e.computed_tokens, e.new_tokens) }, read)
                }
            };
            let attn = if e.is_decode() { self.attn_flops_per_ctx_token.1 } else { self.attn_flops_per_ctx_token.0 };
            let mut flops =
                n * (self.linear_flops_per_token + self.vector_flops_per_token) + n * ctx * (attn + self.vector_flops_per_ctx_token);
            if !e.is_decode() {
                flops += p * self.upprojection_flops_per_ctx_token;
            }
            if e.context_tokens() >= e.prompt_tokens {
                flops += self.lm_head_flops;
            }
            if e.is_decode() {
                flops_dc += flops;
                decode_tokens += n;
            } else {
                flops_pf += flops;
            }
            dyn_bytes += self.kv_bytes_per_token * (n + p_read) + self.activation_bytes_per_token * n;
            tokens += n;
        }
        let (assignment_skew, expert_skew) =
            self.expert_parallel.as_ref().map_or((1.0, 1.0), |load| (load.assignment_skew(tokens), load.expert_skew(tokens)));
        // The fused MoE kernel computes whole tiles of each expert's rows.
        let padding = self.moe.zip(self.tiles).map_or(1.0, |((n, k), tiles)| tiles.padding_factor(n, k, tokens));
        let routed_scale = assignment_skew * padding;
        if routed_scale > 1.0 {
            let extra = self.routed_flops_per_token * (routed_scale - 1.0);
            flops_pf += extra * (tokens - decode_tokens);
            flops_dc += extra * decode_tokens;
        }
        let compute_s = (flops_pf / self.mfu_prefill + flops_dc / self.mfu_decode) / (self.tp * self.peak_flops);
        let experts_read = match self.moe {
            Some((n, k)) => experts_touched(n, k, tokens) * expert_skew,
            None => 0.0,
        };
        let bytes = (self.weight_bytes_dense + experts_read * self.expert_bytes + dyn_bytes) / self.tp;
        let memory_s = bytes / self.hbm_bytes_per_s;
        let allreduce_s = self.allreduce_bytes_per_token * tokens / self.interconnect_bytes_per_s;
        step_micros((compute_s.max(memory_s) + allreduce_s) * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{find_gpu, find_model};
    use blis_engine::latency::{BatchEntry, InstanceLoad};

    /// Llama-4 Scout's chunked layers read within their chunk: a long
    /// decode batch and a prefill past the first chunk cost less than with
    /// every layer attending to everything; within the first chunk, the same.
    #[test]
    fn llama4_chunked_layers_cost_less_past_the_first_chunk() {
        let h100 = find_gpu("H100").unwrap().spec();
        let scout =
            ModelConfig::from_hf_json(find_model("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic").unwrap().config_json).unwrap();
        let all_full = ModelConfig { local_attention: None, ..scout.clone() };
        let step = |m: &ModelConfig, entries: &[BatchEntry]| {
            Roofline::new(m, &h100, 4).step_time(&StepBatch { entries, load: InstanceLoad::default(), preempted: 0 })
        };
        let decodes = |context: u32| vec![BatchEntry { computed_tokens: context, new_tokens: 1, prompt_tokens: 1 }; 64];
        let prefill = |computed: u32| [BatchEntry { computed_tokens: computed, new_tokens: 2048, prompt_tokens: computed + 2048 }];
        assert!(step(&scout, &decodes(100_000)) < step(&all_full, &decodes(100_000)));
        assert!(step(&scout, &prefill(60_000)) < step(&all_full, &prefill(60_000)));
        assert_eq!(step(&scout, &decodes(8_000)), step(&all_full, &decodes(8_000)));
        assert_eq!(step(&scout, &prefill(4_096)), step(&all_full, &prefill(4_096)));
    }

    /// Mixtral-8x7B on two H100s, expert-parallel: the all-to-all is in
    /// both variants below, so the step's excess over the same model
    /// without the skews is what the busiest GPU adds. One decode token is
    /// memory-bound: its two experts share a GPU 3 times in 7, so that
    /// GPU reads 2·(skew − 1) experts' weights more. A 4096-token prefill
    /// is compute-bound and routes 8192 assignments, nearly evenly: its
    /// routed FLOPs grow by the few percent the assignment skew says.
    #[test]
    fn expert_parallel_steps_wait_for_the_busiest_gpu() {
        let model = ModelConfig::from_hf_json(find_model("mistralai/Mixtral-8x7B-v0.1").unwrap().config_json).unwrap();
        let gpu = find_gpu("H100").unwrap().spec();
        let ep = Roofline::new(&model, &gpu, 2).with_expert_parallel(true);
        let mut even = ep.clone();
        even.expert_parallel = None;
        let step = |m: &Roofline, entries: &[BatchEntry]| {
            m.step_time(&StepBatch { entries, load: InstanceLoad::default(), preempted: 0 }).as_us() as f64
        };
        let load = ExpertLoad::new(8.0, 2.0, 2);

        let decode = [BatchEntry { computed_tokens: 900, new_tokens: 1, prompt_tokens: 600 }];
        let skew = load.expert_skew(1.0);
        assert!(skew > 1.35 && skew < 1.5, "{skew}");
        let extra_us = 2.0 * (skew - 1.0) * ep.expert_bytes / 2.0 / ep.hbm_bytes_per_s * 1e6;
        let got = step(&ep, &decode) - step(&even, &decode);
        assert!((got - extra_us).abs() <= 1.0, "{got} µs vs {extra_us} µs");

        let prefill = [BatchEntry { computed_tokens: 0, new_tokens: 4096, prompt_tokens: 4096 }];
        let skew = load.assignment_skew(4096.0);
        assert!(skew > 1.0 && skew < 1.02, "{skew}");
        // Whole experts, 4 per GPU: vLLM has no tuned config for E = 4, N = 14336; its default is 64 rows.
        assert_eq!(ep.tiles, Some(MoeTiles::Untuned { experts: 4 }));
        let padding = MoeTiles::Untuned { experts: 4 }.padding_factor(8.0, 2.0, 4096.0);
        assert!(padding > 1.0 && padding < 1.1, "{padding}");
        let extra_us = ep.routed_flops_per_token * 4096.0 * padding * (skew - 1.0) / ep.mfu_prefill / (2.0 * ep.peak_flops) * 1e6;
        let got = step(&ep, &prefill) - step(&even, &prefill);
        assert!(extra_us > 10.0 && (got - extra_us).abs() <= 1.0, "{got} µs vs {extra_us} µs");

        let dense = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        for (m, tp) in [(&dense, 2), (&model, 1)] {
            let plain = Roofline::new(m, &gpu, tp);
            assert_eq!(step(&plain.clone().with_expert_parallel(true), &decode), step(&plain, &decode), "no experts to spread, or one GPU");
        }
    }
}
