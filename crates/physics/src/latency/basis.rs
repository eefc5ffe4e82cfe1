//! The architecture and hardware numbers the trained roofline basis
//! functions (`latency-formulas.md` §2 and §3) are written in, and the sums
//! over a step's entries they share.

use super::StepBatch;
use super::moe_tiles::MoeTiles;
use crate::hardware::GpuSpec;
use crate::model::{AttentionMix, ModelConfig, PerWeightClass};

/// Notation of `latency-formulas.md`, as `f64`, for one deployment.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Dims {
    /// L: layers.
    pub l: f64,
    /// d: hidden size.
    pub d: f64,
    /// H: attention heads.
    pub h: f64,
    /// dH of a prefill's attention scores: the head dimension, or latent
    /// attention's mean query·key and value width
    /// ([`ModelConfig::attention_pair_width`]).
    pub dh_prefill: f64,
    /// dH of a decode's attention scores (latent attention: over the latent).
    pub dh_decode: f64,
    /// Attention-score time relative to half precision ([`GpuSpec::attention_time_scale`]).
    pub attention_scale: f64,
    /// Parameters per layer and GPU that latent attention applies to every
    /// cached token of a prefill's context (`kv_b_proj`; 0 for ordinary attention).
    pub upprojection_params: f64,
    /// Q/K/V/O projection parameters of one layer, 2·d·(H·dH) + 2·d·dKV
    /// (dKV = KVH·dH): what the formulas write d·(2d + 2dKV), assuming H·dH = d.
    pub attention_params: f64,
    /// dFF of dense layers.
    pub dff: f64,
    /// dFF of one routed expert (equal to `dff` for dense models).
    pub dff_moe: f64,
    /// Total dFF of a MoE layer's always-active shared experts (0 when none).
    pub dff_shared: f64,
    /// N: routed experts (0 for dense models).
    pub n_experts: f64,
    /// k: experts per token (0 for dense models).
    pub k: f64,
    /// Layers with a MoE FFN.
    pub n_moe: f64,
    /// V: vocabulary size (rows of the LM head).
    pub vocab: f64,
    /// Layers with a dense FFN.
    pub n_dense: f64,
    /// Whether MoE layers are interleaved with dense ones (Llama-4).
    pub interleaved_moe: bool,
    /// BPP: bytes per activation / KV element.
    pub bpp: f64,
    /// wBPP: bytes per weight of each class.
    pub wbpp: PerWeightClass<f64>,
    /// Each class's GEMM time relative to half precision
    /// ([`GpuSpec::gemm_time_scale`]): below 1 for 8-bit float weights on a
    /// GPU with FP8 tensor cores.
    pub gemm_scale: PerWeightClass<f64>,
    /// KV bytes per token per GPU: L·2·(KVH/tp)·dH·BPP, or the replicated
    /// latent of multi-head latent attention.
    pub kv_bytes_per_token: f64,
    /// Tensor-parallel degree.
    pub tp: f64,
    /// F: peak dense half-precision FLOP/s (8-bit float GEMMs: `gemm_scale`).
    pub flops_per_s: f64,
    /// W: HBM bytes per second.
    pub hbm_bytes_per_s: f64,
    /// W_ar: bus bytes per second a tensor-parallel all-reduce reaches
    /// ([`GpuSpec::allreduce_bus_bytes_per_s`]).
    pub allreduce_bytes_per_s: f64,
    /// An all-reduce's fixed latency over the GPU's NVLink one
    /// ([`GpuSpec::allreduce_latency_scale`]).
    pub allreduce_latency_scale: f64,
    /// The fused-MoE kernel's tiles on this server, every expert sharded
    /// over the GPUs (`None` for a dense model).
    pub tiles: Option<MoeTiles>,
    /// The tiles with whole experts spread over the GPUs (expert
    /// parallelism), which `with_expert_parallel` puts in `tiles`.
    pub tiles_expert_parallel: Option<MoeTiles>,
    /// How much of the context local-attention layers read
    /// ([`ModelConfig::attention_mix`]; `None`: every layer reads all of it).
    pub attention_mix: Option<AttentionMix>,
}

impl Dims {
    /// The numbers of `model` on `tp` GPUs of type `gpu`.
    pub fn new(model: &ModelConfig, gpu: &GpuSpec, tp: u32) -> Dims {
        let (dff_moe, dff_shared, n_experts, k, n_moe) = match &model.moe {
            Some(m) => (
                f64::from(m.expert_intermediate_size),
                f64::from(m.shared_intermediate_size),
                f64::from(m.num_experts),
                f64::from(m.experts_per_token),
                f64::from(m.num_moe_layers),
            ),
            None => (f64::from(model.intermediate_size), 0.0, 0.0, 0.0, 0.0),
        };
        let (dh_prefill, dh_decode) = model.attention_pair_width();
        Dims {
            l: f64::from(model.num_layers),
            d: f64::from(model.hidden_size),
            h: f64::from(model.num_attention_heads),
            dh_prefill,
            dh_decode,
            attention_scale: gpu.attention_time_scale(model),
            upprojection_params: model.context_upprojection_params_per_layer() / f64::from(tp.max(1)),
            attention_params: model.attention_params_per_layer(),
            dff: f64::from(model.intermediate_size),
            dff_moe,
            dff_shared,
            n_experts,
            k,
            n_moe,
            vocab: f64::from(model.vocab_size),
            n_dense: f64::from(model.num_dense_layers()),
            interleaved_moe: model.moe.as_ref().is_some_and(|m| m.interleaved),
            bpp: model.dtype_bytes,
            wbpp: model.weights.bytes_per_param_by_class(),
            gemm_scale: gpu.gemm_time_scales(&model.weights),
            kv_bytes_per_token: model.kv_bytes_per_token_per_gpu(tp),
            tp: f64::from(tp.max(1)),
            flops_per_s: gpu.peak_flops(),
            hbm_bytes_per_s: gpu.hbm_bytes_per_s(),
            allreduce_bytes_per_s: gpu.allreduce_bus_bytes_per_s(tp.max(1)),
            allreduce_latency_scale: gpu.allreduce_latency_scale(tp.max(1)),
            tiles: MoeTiles::of(model, gpu, tp, false),
            tiles_expert_parallel: MoeTiles::of(model, gpu, tp, true),
            attention_mix: model.attention_mix(),
        }
    }

    /// kEff = max(1, k).
    pub fn k_eff(&self) -> f64 {
        self.k.max(1.0)
    }

    /// Whether the model has routed experts.
    pub fn is_moe(&self) -> bool {
        self.n_experts >= 2.0
    }

    /// Routed experts per MoE layer that `tokens` tokens touch
    /// ([`experts_touched`]); 0 for dense models.
    pub fn experts_touched(&self, tokens: f64) -> f64 {
        if self.is_moe() { experts_touched(self.n_experts, self.k, tokens) } else { 0.0 }
    }

    /// Q/K/V/O projection FLOPs of `tokens` tokens over all layers, per GPU:
    /// L·2·T·d·(2d + 2dKV)/tp (with the real query width when H·dH ≠ d),
    /// at half precision's speed (× the projections' GEMM time scale).
    pub fn projection_flops(&self, tokens: f64) -> f64 {
        2.0 * tokens * self.projection_params() * self.gemm_scale.attention
    }

    /// Q/K/V/O projection parameters of all layers, per GPU: L·d·(2d + 2dKV)/tp.
    pub fn projection_params(&self) -> f64 {
        self.l * self.attention_params / self.tp
    }

    /// LM head parameters per GPU, V·d/tp: vLLM shards the vocabulary
    /// across the TP ranks and reads the whole shard every step (tied
    /// embeddings included: the matrix is the same, the read is not).
    pub fn lm_head_params(&self) -> f64 {
        self.vocab * self.d / self.tp
    }

    /// Attention-score FLOPs per layer per GPU of a prefill's `work`
    /// query·key pairs: 4·(H/tp)·work·dH, at half precision's speed.
    pub fn prefill_attention_flops_per_layer(&self, work: f64) -> f64 {
        4.0 * (self.h / self.tp) * work * self.dh_prefill * self.attention_scale
    }

    /// Attention-score FLOPs per layer per GPU of decodes' `work`
    /// query·key pairs: 4·(H/tp)·work·dH (latent attention's latent width),
    /// at half precision's speed.
    pub fn decode_attention_flops_per_layer(&self, work: f64) -> f64 {
        4.0 * (self.h / self.tp) * work * self.dh_decode * self.attention_scale
    }

    /// FLOPs over all layers, per GPU, of latent attention up-projecting the
    /// `context` cached tokens of a step's prefills (0 for ordinary attention).
    pub fn context_upprojection_flops(&self, context: f64) -> f64 {
        self.l * 2.0 * self.upprojection_params * context * self.gemm_scale.attention
    }

    /// KV bytes per GPU for `tokens` tokens over all layers: L·2·(KVH/tp)·dH·tokens·BPP
    /// (for latent attention, the latent's bytes, which every rank stores).
    pub fn kv_bytes(&self, tokens: f64) -> f64 {
        self.kv_bytes_per_token * tokens
    }

    /// Seconds → microseconds of `flops` at peak.
    pub fn compute_us(&self, flops: f64) -> f64 {
        flops / self.flops_per_s * 1e6
    }

    /// Seconds → microseconds of moving `bytes` through HBM.
    pub fn memory_us(&self, bytes: f64) -> f64 {
        bytes / self.hbm_bytes_per_s * 1e6
    }

    /// Seconds → microseconds of an all-reduce's `bus_bytes` (bytes ·
    /// 2(tp − 1)/tp) at the bus bandwidth the GPU's collectives reach.
    pub fn allreduce_us(&self, bus_bytes: f64) -> f64 {
        bus_bytes / self.allreduce_bytes_per_s * 1e6
    }
}

/// Routed experts (of `n`, `k` per token) that `tokens` tokens touch, in
/// expectation when each token picks its experts uniformly:
/// nEff = N·(1 − ((N − k)/N)^T), between min(k, N) for one token and N. The
/// fused MoE kernel loads only the experts that received tokens, so this, not
/// N, is how many experts' weights a step reads.
pub(crate) fn experts_touched(n: f64, k: f64, tokens: f64) -> f64 {
    n * (1.0 - ((n - k) / n).powf(tokens))
}

/// The per-step sums the basis functions use (`latency-formulas.md` notation).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct StepSums {
    /// T_pf: prefill tokens.
    pub t_pf: f64,
    /// T_dc: decode requests (one token each).
    pub t_dc: f64,
    /// Σ_i t_i·(s_i + t_i/2) over prefill entries (s_i = prompt length),
    /// each scaled by what its local-attention layers read
    /// ([`AttentionMix::prefill_scale`]).
    pub prefill_attention_work: f64,
    /// Σ_j c_j over decode entries (c_j = tokens already in the KV cache),
    /// each as its local-attention layers read it ([`AttentionMix::decode_context`]).
    pub decode_context: f64,
    /// Σ_i p_i over prefill entries (p_i = tokens already in the KV cache).
    pub prefill_context: f64,
    /// B: requests in the batch.
    pub batch: f64,
}

impl StepSums {
    /// One pass over the entries, attention work blended by `mix`. Token
    /// counts are summed as integers: every partial sum is far below 2⁵³, so
    /// this is exactly their sum in `f64`, entry by entry, without a chain
    /// of floating-point additions per entry.
    pub fn of(batch: &StepBatch<'_>, mix: Option<&AttentionMix>) -> StepSums {
        let mut s = StepSums { batch: batch.entries.len() as f64, ..StepSums::default() };
        let (mut decodes, mut decode_context, mut prefill_tokens, mut prefill_context) = (0u64, 0u64, 0u64, 0u64);
        for e in batch.entries {
            if e.is_decode() {
                decodes += 1;
                match mix {
                    None => decode_context += u64::from(e.computed_tokens),
                    Some(m) => s.decode_context += m.decode_context(e.computed_tokens),
                }
            } else {
                prefill_tokens += u64::from(e.new_tokens);
                prefill_context += u64::from(e.computed_tokens);
                let t = f64::from(e.new_tokens);
                let work = t * (f64::from(e.prompt_tokens) + t / 2.0);
                s.prefill_attention_work += mix.map_or(work, |m| work * m.prefill_scale(e.computed_tokens, e.new_tokens));
            }
        }
        (s.t_dc, s.t_pf, s.prefill_context) = (decodes as f64, prefill_tokens as f64, prefill_context as f64);
        if mix.is_none() {
            s.decode_context = decode_context as f64;
        }
        s
    }

    /// T_pf + T_dc.
    pub fn tokens(&self) -> f64 {
        self.t_pf + self.t_dc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::latency::BatchEntry;
    use proptest::prelude::*;

    proptest! {
        /// The integer sums are exactly the floating-point sums, entry by entry.
        #[test]
        fn step_sums_are_the_per_entry_sums(entries in proptest::collection::vec((0u32..2_000_000, 1u32..8192, 1u32..2_000_000), 0..600)) {
            let entries: Vec<BatchEntry> = entries.into_iter().map(|(computed_tokens, new_tokens, prompt_tokens)| BatchEntry { computed_tokens, new_tokens, prompt_tokens }).collect();
            let batch = StepBatch { entries: &entries, load: Default::default(), preempted: 0 };
            let mut want = StepSums { batch: entries.len() as f64, ..StepSums::default() };
            for e in &entries {
                if e.is_decode() {
                    want.t_dc += 1.0;
                    want.decode_context += f64::from(e.computed_tokens);
                } else {
                    let t = f64::from(e.new_tokens);
                    want.t_pf += t;
                    want.prefill_context += f64::from(e.computed_tokens);
                    want.prefill_attention_work += t * (f64::from(e.prompt_tokens) + t / 2.0);
                }
            }
            prop_assert_eq!(StepSums::of(&batch, None), want);
        }
    }
}
