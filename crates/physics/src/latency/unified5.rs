//! The unified 5-term additive step-time model (`latency-formulas.md` §2,
//! `unified-step-time-formula.md`): one shared HBM term for weights and KV.

use super::basis::{Dims, StepSums};
use super::{FeatureBasis, LatencyModel, QueueingInput, StepBatch, coefficient_array, linear_step_time, overhead_micros};
use crate::hardware::GpuSpec;
use crate::model::ModelConfig;
use blis_engine::time::Micros;

/// Basis functions of unified-5, in µs (F = peak FLOP/s, W = HBM bytes/s):
///
/// ```text
/// T_pf_compute = [L·2·T_pf·d·(2d + 2dKV)/tp + L·Σ_i 4·(H/tp)·t_i·(s_i + t_i/2)·dH + L·T_pf·kEff·6·d·dFF/tp] / F
/// T_dc_compute = [L·2·T_dc·d·(2d + 2dKV)/tp + L·4·(H/tp)·Σ_j c_j·dH + L·T_dc·kEff·6·d·dFF/tp] / F
/// T_memory     = T_weight + T_pf_kv + T_dc_kv, with
///   T_weight   = [L·d·(2d + 2dKV)·wBPP/tp + L·nEff·3·d·dFF·wBPP/tp] / W,  nEff = 1 (dense) or min(N, max(k, T·k))
///   T_pf_kv    = L·2·(KVH/tp)·dH·T_pf·BPP / W
///   T_dc_kv    = L·2·(KVH/tp)·dH·(Σ_j c_j + T_dc)·BPP / W
/// step = β1·T_pf_compute + β2·T_dc_compute + β3·T_memory + β4·L + β5·B
/// ```
///
/// (dFF is the per-expert width for MoE models; the spec's "2 bytes per
/// element" is BPP and wBPP, which are 2 for every half-precision model.)
/// α: α0 µs from arrival to the wait queue, α1 µs from the last token to the
/// response end, α2 µs per output token, accumulating (BLIS's alpha model).
#[derive(Clone, Debug)]
pub struct Unified5Basis {
    dims: Dims,
}

impl Unified5Basis {
    /// Builds the basis for `model` on `tp` GPUs of type `gpu`.
    pub fn new(model: &ModelConfig, gpu: &GpuSpec, tp: u32) -> Unified5Basis {
        Unified5Basis { dims: Dims::new(model, gpu, tp) }
    }

    /// The five basis values of a step, in µs (β4's and β5's are L and B).
    pub fn features(&self, batch: &StepBatch<'_>) -> [f64; 5] {
        let m = &self.dims;
        let s = StepSums::of(batch, m.attention_mix.as_ref());
        // The formula takes every layer's FFN as the (routed) experts'.
        let (ffn_scale, ffn_wbpp) =
            if m.is_moe() { (m.gemm_scale.routed_experts, m.wbpp.routed_experts) } else { (m.gemm_scale.dense_ffn, m.wbpp.dense_ffn) };
        let ffn_per_token = m.l * m.k_eff() * 6.0 * m.d * m.dff_moe / m.tp * ffn_scale;
        let t_pf_compute = m.compute_us(
            m.projection_flops(s.t_pf) + m.l * m.prefill_attention_flops_per_layer(s.prefill_attention_work) + s.t_pf * ffn_per_token,
        );
        let t_dc_compute =
            m.compute_us(m.projection_flops(s.t_dc) + m.l * m.decode_attention_flops_per_layer(s.decode_context) + s.t_dc * ffn_per_token);
        let n_eff = if m.is_moe() { m.n_experts.min(m.k.max(s.tokens() * m.k)) } else { 1.0 };
        let weight_bytes = m.projection_params() * m.wbpp.attention + m.l * n_eff * 3.0 * m.d * m.dff_moe / m.tp * ffn_wbpp;
        let t_memory = m.memory_us(weight_bytes + m.kv_bytes(s.t_pf) + m.kv_bytes(s.decode_context + s.t_dc));
        [t_pf_compute, t_dc_compute, t_memory, m.l, s.batch]
    }
}

/// Names of the α coefficients, in order.
pub const ALPHA_NAMES: [&str; 3] = ["queueing_us", "completion_us", "per_output_token_us"];

/// Names of the β coefficients, in order.
pub const BETA_NAMES: [&str; 5] = ["prefill_compute", "decode_compute", "memory", "per_layer_us", "per_request_us"];

impl FeatureBasis for Unified5Basis {
    fn name(&self) -> &'static str {
        "unified-5"
    }

    fn alpha_names(&self) -> &'static [&'static str] {
        &ALPHA_NAMES
    }

    fn beta_names(&self) -> &'static [&'static str] {
        &BETA_NAMES
    }

    fn step_features(&self, batch: &StepBatch<'_>, out: &mut [f64]) {
        out.copy_from_slice(&self.features(batch));
    }

    fn alpha_features(&self, _arrival: &QueueingInput, output_tokens: u32, ttft: &mut [f64], e2e: &mut [f64]) {
        ttft.copy_from_slice(&[1.0, 0.0, 1.0]);
        e2e.copy_from_slice(&[1.0, 1.0, f64::from(output_tokens)]);
    }

    fn alpha_queueing_features(&self, _arrival: &QueueingInput, out: &mut [f64]) -> bool {
        out.copy_from_slice(&[1.0, 0.0, 0.0]);
        true
    }

    fn with_coefficients_unchecked(&self, alpha: &[f64], beta: &[f64]) -> std::sync::Arc<dyn LatencyModel> {
        std::sync::Arc::new(Unified5 { basis: self.clone(), alpha: coefficient_array(alpha), beta: coefficient_array(beta) })
    }
}

/// Unified-5 with its coefficients.
#[derive(Clone, Debug)]
pub struct Unified5 {
    /// The basis functions.
    pub basis: Unified5Basis,
    /// α0 (queueing µs), α1 (completion µs), α2 (µs per output token).
    pub alpha: [f64; 3],
    /// β1..β5.
    pub beta: [f64; 5],
}

impl Unified5 {
    /// The published H100 coefficients (`latency-formulas.md` §2).
    pub const PUBLISHED_ALPHA: [f64; 3] = [19615.0, 1850.0, 1.71];
    /// The published H100 coefficients (`latency-formulas.md` §2).
    pub const PUBLISHED_BETA: [f64; 5] = [0.393, 0.093, 0.910, 68.3, 12.9];
}

impl LatencyModel for Unified5 {
    fn name(&self) -> &'static str {
        "unified-5"
    }

    fn step_time(&self, batch: &StepBatch<'_>) -> Micros {
        linear_step_time(batch, &self.beta, || self.basis.features(batch))
    }

    fn queueing_delay(&self, _input: &QueueingInput) -> Micros {
        overhead_micros(self.alpha[0])
    }

    fn output_token_overhead(&self) -> Micros {
        overhead_micros(self.alpha[2])
    }

    fn completion_overhead(&self) -> Micros {
        overhead_micros(self.alpha[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{find_gpu, find_model};
    use blis_engine::latency::{BatchEntry, InstanceLoad};

    /// Llama-2-7B (L 32, d 4096, H = KVH = 32, dH 128, dFF 11008) on one H100
    /// (F 989.5e12, W 3.35e12); a 100-token prefill (s = 100) and one decode at
    /// context 200, worked out by hand:
    ///
    /// ```text
    /// T_pf_compute = [32·2·100·4096·16384 + 32·4·32·(100·150)·128 + 32·100·6·4096·11008] / F = 1316.8928 µs
    /// T_dc_compute = [32·2·1·4096·16384   + 32·4·32·200·128       + 32·1·6·4096·11008]   / F =   13.1954 µs
    /// T_memory     = [(32·4096·16384 + 32·3·4096·11008)·2 + 32·2·32·128·(100 + 201)·2] / W = 3913.3795 µs
    /// step = 0.393·1316.8928 + 0.093·13.1954 + 0.910·3913.3795 + 68.3·32 + 12.9·2 = 6291.34 µs
    /// ```
    #[test]
    fn published_coefficients_on_a_hand_computed_step() {
        let model = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        let basis = Unified5Basis::new(&model, &find_gpu("H100").unwrap().spec(), 1);
        let entries = [
            BatchEntry { computed_tokens: 0, new_tokens: 100, prompt_tokens: 100 },
            BatchEntry { computed_tokens: 200, new_tokens: 1, prompt_tokens: 150 },
        ];
        let batch = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
        let want = [1316.892769277413, 13.195420264780193, 3913.379534328358, 32.0, 2.0];
        for (got, want) in basis.features(&batch).iter().zip(want) {
            assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        }
        let m = basis.with_coefficients(&Unified5::PUBLISHED_ALPHA, &Unified5::PUBLISHED_BETA).unwrap();
        assert_eq!(m.step_time(&batch), Micros(6291));
        assert_eq!(
            (
                m.queueing_delay(&QueueingInput { prompt_tokens: 1, prefix_hit_tokens: 0, load: InstanceLoad::default() }),
                m.completion_overhead()
            ),
            (Micros(19615), Micros(1850))
        );
        assert_eq!((m.output_token_overhead(), m.token_emission_delay()), (Micros(2), Micros::ZERO));
        assert_eq!(m.step_time(&StepBatch { entries: &[], load: InstanceLoad::default(), preempted: 0 }), Micros(1));
        assert!(basis.with_coefficients(&[1.0], &Unified5::PUBLISHED_BETA).is_err());
        assert!(basis.with_coefficients(&Unified5::PUBLISHED_ALPHA, &[0.0, 0.0, f64::NAN, 0.0, 0.0]).is_err());
    }
}
