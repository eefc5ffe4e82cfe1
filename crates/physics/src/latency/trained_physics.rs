//! The trained-physics model (`latency-formulas.md` §3, BLIS's "iter29"):
//! roofline basis functions split into prefill and decode compute and KV
//! traffic, static weight traffic, tensor-parallel all-reduce volume, and
//! per-layer, per-request and per-step overheads.

use std::sync::{Arc, OnceLock};

use super::basis::{Dims, StepSums};
use super::expert_load::ExpertLoad;
use super::{FeatureBasis, LatencyModel, QueueingInput, StepBatch, coefficient_array, linear_step_time, overhead_micros};
use crate::hardware::GpuSpec;
use crate::model::ModelConfig;
use blis_engine::time::Micros;

/// Number of β coefficients.
pub const BETA_LEN: usize = 12;

/// The β's names ([`FeatureBasis::beta_names`]), in coefficient order.
pub const BETA_NAMES: [&str; BETA_LEN] = [
    "prefill_compute",
    "decode_compute",
    "weights",
    "allreduce",
    "per_layer_us",
    "per_request_us",
    "per_step_us",
    "interleaved_moe_layer_us",
    "prefill_kv",
    "decode_kv",
    "expert_dispatch",
    "allreduce_call_us",
];

/// Basis functions of trained-physics, in µs (F = peak FLOP/s, the FP8 peak
/// for 8-bit weights; W = HBM bytes/s; W_ar = the bus bandwidth an
/// all-reduce of tp GPUs reaches over the link it crosses, NVLink within an
/// NVLink domain, else PCIe, [`GpuSpec::allreduce_bus_bytes_per_s`];
/// λ = that link's all-reduce latency over NVLink's,
/// [`GpuSpec::allreduce_latency_scale`]; g = tp for MoE layers at dp = 1):
///
/// ```text
/// FFN(X)  = nMoE·X·(kEff·P·dFF_moe + dFF_sh)·6·d/g + nDense·X·6·d·dFF/tp
///           (P ≥ 1: the fused MoE kernel's tile padding for the step's T_pf + T_dc tokens, `latency::moe_tiles`)
/// T_pf_c  = [L·2·T_pf·d·(2d + 2dKV)/tp + L·Σ_i 4·(H/tp)·t_i·(s_i + t_i/2)·dH + FFN(T_pf) + B_pf·2·V·d/tp] / F
/// T_dc_c  = [L·2·T_dc·d·(2d + 2dKV)/tp + L·4·(H/tp)·Σ_j c_j·dH + FFN(T_dc) + T_dc·2·V·d/tp] / F
/// T_pf_kv = L·2·(KVH/tp)·dH·T_pf·BPP / W
/// T_dc_kv = L·2·(KVH/tp)·dH·(Σ_j c_j + T_dc)·BPP / W
/// T_w     = [L·d·(2d + 2dKV)/tp + nMoE·(nEff·dFF_moe + dFF_sh)·3·d/g + nDense·3·d·dFF/tp + V·d/tp]·wBPP / W   (per GPU)
/// nEff    = N·(1 − ((N − k)/N)^(T_pf + T_dc))   (routed experts the step's tokens touch)
/// V(u, T) = u·T·d·BPP·2(tp − 1)/tp / W_ar;   T_ar = V(L, T) + V(nDense, T) + V(nMoE, T)   (0 at tp = 1)
/// T_dispatch = kEff·V(nMoE, T) with expert parallelism, when V(nMoE, T) leaves T_ar; else 0
///           (expert parallelism also scales kEff·dFF_moe and nEff by the busiest rank's skews, `latency::expert_load`)
/// C_ar    = λ·(L + nDense + nMoE·(1, or 2 with expert parallelism))   (collective calls; 0 at tp = 1)
/// step    = β1a·T_pf_c + β2a·T_dc_c + β3·T_w + β4·T_ar + β5·L + β6·B + β7 + β8·nMoE·[interleaved]
///         + β1b·T_pf_kv + β2b·T_dc_kv + βEP·T_dispatch + βcall·C_ar
/// ```
///
/// B_pf = B − T_dc is the number of prefill entries: vLLM computes logits
/// for the last scheduled token of every request in the step (a partial
/// prefill chunk's are discarded), so the LM head (V·d/tp per GPU,
/// vocabulary-parallel) is read once per step and multiplies one row per
/// request.
///
/// Seven departures from the published formula. The first three change no
/// dense Llama-2 step or Mixtral step of 16+ tokens:
/// * T_w reads the nEff routed experts a step touches rather than all N (the
///   fused MoE kernel skips experts without tokens; at 16+ tokens Mixtral's
///   nEff is within 1 % of 8, while Qwen3-30B-A3B's 128 experts are only 7 %
///   touched by one token);
/// * MoE layers count their shared experts (dFF_sh, DeepSeek and Llama-4),
///   which every token passes through;
/// * d·(2d + 2dKV) stands for the real projection size 2·d·(H·dH) + 2·d·dKV,
///   which differs when H·dH ≠ d (Qwen3-30B-A3B, Mistral-Nemo);
/// * the LM head is priced (weights in T_w, one row per request in T_pf_c
///   and T_dc_c): 1–2 % of a 32k-vocabulary Llama-2 step's weight bytes,
///   but 6–7 % of an 8B model's with a 128k–152k vocabulary (Llama-3, Qwen),
///   which a set fitted without it would predict that much too fast;
/// * βcall prices each tensor-parallel collective's fixed latency (a kernel
///   and a cross-GPU handshake, whatever its size), which T_ar's bytes
///   cannot: a Llama-2-70B decode step at TP 4 makes 160 of them;
/// * the routed experts' FLOPs include the fused MoE kernel's tile padding
///   P (1.64× the needed rows for a 302-token Mixtral step);
/// * all-reduce bytes move at the measured bus bandwidth of the link they
///   cross (W_ar), not at HBM bandwidth: a set fitted on NVLink H100s prices
///   a group of PCIe cards' collectives 13× slower per byte, not 4×.
///
/// The feature vector is in the published coefficient order
/// `[β1a, β2a, β3, β4, β5, β6, β7, β8, β1b, β2b, βEP]`, then βcall (a
/// coefficient file with the published eleven reads as βcall = 0).
/// T_dispatch is 0 unless the basis is expert-parallel
/// ([`TrainedPhysicsBasis::with_expert_parallel`]). α0 is the arrival-to-queue delay,
/// α1 the delay from the last token to the response end, α2 the delay from a
/// token's step end to the API (it does not accumulate: TTFT = prefill step
/// end + α2 − arrival, later gaps are step gaps).
#[derive(Clone, Debug)]
pub struct TrainedPhysicsBasis {
    dims: Dims,
    /// With MoE layers expert-parallel (vLLM `--enable-expert-parallel` on
    /// a MoE model at TP > 1), how unevenly they load the ranks.
    expert_parallel: Option<ExpertLoad>,
    /// A MoE model's per-token-count terms, computed once per count.
    moe_terms: Option<MoeTermsMemo>,
}

/// The terms of a MoE step that depend only on its token count, the tile
/// padding P and the experts touched nEff (a `powf` and a tail sum each),
/// memoised by count: a run's steps take a few hundred distinct counts,
/// each many times. Counts beyond [`MoeTermsMemo::COUNTS`] are computed on
/// every call. Filled lazily, so it is the function's values exactly.
#[derive(Clone, Debug)]
struct MoeTermsMemo {
    by_tokens: Box<[OnceLock<(f64, f64)>]>,
}

impl MoeTermsMemo {
    /// Token counts memoised: 0 ..= 8191 (vLLM's token budgets are at most
    /// a few thousand on the shared runs' servers).
    const COUNTS: usize = 8192;

    fn new() -> MoeTermsMemo {
        MoeTermsMemo { by_tokens: (0..Self::COUNTS).map(|_| OnceLock::new()).collect() }
    }
}

impl TrainedPhysicsBasis {
    /// Builds the basis for `model` on `tp` GPUs of type `gpu`.
    pub fn new(model: &ModelConfig, gpu: &GpuSpec, tp: u32) -> TrainedPhysicsBasis {
        let dims = Dims::new(model, gpu, tp);
        let moe_terms = dims.is_moe().then(MoeTermsMemo::new);
        TrainedPhysicsBasis { dims, expert_parallel: None, moe_terms }
    }

    /// A step of `tokens` tokens: (tile padding P, experts touched nEff);
    /// (1, 0) for a dense model.
    fn moe_terms(&self, tokens: f64) -> (f64, f64) {
        let m = &self.dims;
        let compute = || (m.tiles.map_or(1.0, |t| t.padding_factor(m.n_experts, m.k, tokens)), m.experts_touched(tokens));
        match &self.moe_terms {
            None => (1.0, 0.0),
            Some(memo) if tokens >= 0.0 && tokens < MoeTermsMemo::COUNTS as f64 && tokens.fract() == 0.0 => {
                *memo.by_tokens[tokens as usize].get_or_init(compute)
            }
            Some(_) => compute(),
        }
    }

    /// The basis with MoE layers expert-parallel when `on` (vLLM
    /// `--enable-expert-parallel`): each of the TP ranks holds whole experts,
    /// and a MoE layer's all-reduce gives way to an all-to-all that sends
    /// each token's hidden state to its k experts' ranks and back,
    /// T_dispatch = k·V(nMoE, T), priced by βEP. A MoE layer also waits for
    /// its busiest rank: the routed experts' FLOPs and the experts' weights
    /// a step reads (nEff/EP whole experts per rank on average, as many
    /// bytes as nEff experts' 1/TP shards) are scaled by the busiest rank's
    /// share over the mean (1.4× for one Mixtral token at
    /// EP 2, → 1 as a step's tokens grow). No effect on a dense model or at
    /// TP 1.
    pub fn with_expert_parallel(mut self, on: bool) -> TrainedPhysicsBasis {
        let m = &self.dims;
        self.expert_parallel = (on && m.is_moe() && m.tp > 1.0).then(|| ExpertLoad::new(m.n_experts, m.k, m.tp as u32));
        if self.expert_parallel.is_some() {
            self.dims.tiles = self.dims.tiles_expert_parallel;
            self.moe_terms = self.moe_terms.as_ref().map(|_| MoeTermsMemo::new());
        }
        self
    }

    /// FFN FLOPs of `tokens` tokens per GPU, the routed experts' scaled by
    /// `routed_scale` (tile padding, times the busiest rank's skew under
    /// expert parallelism).
    fn ffn_flops(&self, tokens: f64, routed_scale: f64) -> f64 {
        let (m, g) = (&self.dims, &self.dims.gemm_scale);
        m.n_moe * tokens * (m.k_eff() * m.dff_moe * routed_scale * g.routed_experts + m.dff_shared * g.shared_experts) * 6.0 * m.d / m.tp
            + m.n_dense * tokens * 6.0 * m.d * m.dff / m.tp * g.dense_ffn
    }

    /// The eleven basis values of a step, in coefficient order.
    pub fn features(&self, batch: &StepBatch<'_>) -> [f64; BETA_LEN] {
        let m = &self.dims;
        let s = StepSums::of(batch, m.attention_mix.as_ref());
        // Under expert parallelism the busiest rank's share of the routed work and weights, over the mean.
        let (routed_skew, weight_skew) =
            self.expert_parallel.as_ref().map_or((1.0, 1.0), |load| (load.assignment_skew(s.tokens()), load.expert_skew(s.tokens())));
        // The fused MoE kernel computes whole tiles of each expert's rows.
        let (padding, experts_touched) = self.moe_terms(s.tokens());
        let routed_scale = routed_skew * padding;
        let lm_head_flops_per_row = 2.0 * m.lm_head_params() * m.gemm_scale.lm_head;
        let t_pf_c = m.compute_us(
            m.projection_flops(s.t_pf)
                + m.l * m.prefill_attention_flops_per_layer(s.prefill_attention_work)
                + self.ffn_flops(s.t_pf, routed_scale)
                + (s.batch - s.t_dc) * lm_head_flops_per_row
                + m.context_upprojection_flops(s.prefill_context),
        );
        let t_dc_c = m.compute_us(
            m.projection_flops(s.t_dc)
                + m.l * m.decode_attention_flops_per_layer(s.decode_context)
                + self.ffn_flops(s.t_dc, routed_scale)
                + s.t_dc * lm_head_flops_per_row,
        );
        let t_pf_kv = m.memory_us(m.kv_bytes(s.t_pf));
        let t_dc_kv = m.memory_us(m.kv_bytes(s.decode_context + s.t_dc));
        let w = &m.wbpp;
        let weight_bytes = m.projection_params() * w.attention
            + m.n_moe * (experts_touched * weight_skew * m.dff_moe * w.routed_experts + m.dff_shared * w.shared_experts) * 3.0 * m.d / m.tp
            + m.n_dense * 3.0 * m.d * m.dff / m.tp * w.dense_ffn
            + m.lm_head_params() * w.lm_head;
        let t_w = m.memory_us(weight_bytes);
        let ring = if m.tp > 1.0 { 2.0 * (m.tp - 1.0) / m.tp } else { 0.0 };
        let volume = |layers: f64| m.allreduce_us(layers * s.tokens() * m.d * m.bpp * ring);
        let (t_moe_ar, t_dispatch) = match (m.is_moe(), self.expert_parallel.is_some()) {
            (false, _) => (0.0, 0.0),
            (true, false) => (volume(m.n_moe), 0.0),
            (true, true) => (0.0, m.k_eff() * volume(m.n_moe)),
        };
        let t_ar = volume(m.l) + volume(m.n_dense) + t_moe_ar;
        let interleaved = if m.interleaved_moe { m.n_moe } else { 0.0 };
        let moe_calls = if self.expert_parallel.is_some() { 2.0 } else { 1.0 };
        let calls = if m.tp > 1.0 { (m.l + m.n_dense + m.n_moe * moe_calls) * m.allreduce_latency_scale } else { 0.0 };
        [t_pf_c, t_dc_c, t_w, t_ar, m.l, s.batch, 1.0, interleaved, t_pf_kv, t_dc_kv, t_dispatch, calls]
    }
}

impl FeatureBasis for TrainedPhysicsBasis {
    fn name(&self) -> &'static str {
        "trained-physics"
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

    fn alpha_features(&self, arrival: &QueueingInput, _output_tokens: u32, ttft: &mut [f64], e2e: &mut [f64]) {
        let running = f64::from(arrival.load.running);
        ttft.copy_from_slice(&[1.0, 0.0, 1.0, running]);
        e2e.copy_from_slice(&[1.0, 1.0, 1.0, running]);
    }

    fn alpha_queueing_features(&self, arrival: &QueueingInput, out: &mut [f64]) -> bool {
        out.copy_from_slice(&[1.0, 0.0, 0.0, f64::from(arrival.load.running)]);
        true
    }

    fn with_coefficients_unchecked(&self, alpha: &[f64], beta: &[f64]) -> Arc<dyn LatencyModel> {
        Arc::new(TrainedPhysics { basis: self.clone(), alpha: coefficient_array(alpha), beta: coefficient_array(beta) })
    }
}

/// Trained-physics with its coefficients.
#[derive(Clone, Debug)]
pub struct TrainedPhysics {
    /// The basis functions.
    pub basis: TrainedPhysicsBasis,
    /// α0 (queueing µs), α1 (completion µs), α2 (token emission µs), α3
    /// (queueing µs per request the server is running at arrival).
    pub alpha: [f64; ALPHA_LEN],
    /// β in the order `[β1a, β2a, β3, β4, β5, β6, β7, β8, β1b, β2b, βEP, βcall]`.
    pub beta: [f64; BETA_LEN],
}

impl TrainedPhysics {
    /// The published H100 coefficients (`latency-formulas.md` §3, loss 34.6 %).
    pub const PUBLISHED_ALPHA: [f64; PUBLISHED_ALPHA_LEN] = [15563.199579, 777.3455, 45.907545];
    /// The published H100 coefficients (`latency-formulas.md` §3), in the
    /// published layout ([`TrainedPhysics::beta_from_published_layout`]).
    pub const PUBLISHED_BETA: [f64; PUBLISHED_BETA_LEN] =
        [0.152128, 0.0, 1.36252915, 0.752037, 32.09546717, 4.41684444, 126.024825, 481.8613888, 0.0, 1.94710771, 0.752037];

    /// BLIS's α from a set in the published formula's layout: α3, the
    /// queueing per running request, is 0.
    pub fn alpha_from_published_layout(published: &[f64; PUBLISHED_ALPHA_LEN]) -> [f64; ALPHA_LEN] {
        let mut alpha = [0.0; ALPHA_LEN];
        alpha[..PUBLISHED_ALPHA_LEN].copy_from_slice(published);
        alpha
    }

    /// β of the published formula's layout, eleven coefficients whose T_ar
    /// and T_dispatch move bytes at HBM bandwidth W, as BLIS's twelve, whose
    /// move them at the all-reduce bus bandwidth W_ar: β4 and βEP times
    /// W_ar/W of `fitted_on` (at TP 2; the same for any group within its
    /// NVLink domain), βcall = 0. On that GPU every step is timed as the
    /// published formula times it; carried to another, the collectives
    /// follow its link.
    pub fn beta_from_published_layout(published: &[f64; PUBLISHED_BETA_LEN], fitted_on: &GpuSpec) -> [f64; BETA_LEN] {
        let per_bus_byte = fitted_on.allreduce_bus_bytes_per_s(2) / fitted_on.hbm_bytes_per_s();
        let mut beta = [0.0; BETA_LEN];
        beta[..PUBLISHED_BETA_LEN].copy_from_slice(published);
        for (b, name) in beta.iter_mut().zip(BETA_NAMES) {
            if ["allreduce", "expert_dispatch"].contains(&name) {
                *b *= per_bus_byte;
            }
        }
        beta
    }
}

/// Number of β of the published formula (all of BLIS's but βcall).
pub const PUBLISHED_BETA_LEN: usize = 11;

/// Names of BLIS's α, in order.
pub const ALPHA_NAMES: [&str; ALPHA_LEN] = ["queueing_us", "completion_us", "token_emission_us", "queueing_per_running_us"];
/// Number of BLIS's α.
pub const ALPHA_LEN: usize = 4;
/// Number of α of the published formula (all of BLIS's but the per-running
/// queueing α3, which a set in that layout reads as 0).
pub const PUBLISHED_ALPHA_LEN: usize = 3;

impl LatencyModel for TrainedPhysics {
    fn name(&self) -> &'static str {
        "trained-physics"
    }

    fn step_time(&self, batch: &StepBatch<'_>) -> Micros {
        linear_step_time(batch, &self.beta, || self.basis.features(batch))
    }

    fn queueing_delay(&self, input: &QueueingInput) -> Micros {
        overhead_micros(self.alpha[0] + self.alpha[3] * f64::from(input.load.running))
    }

    fn token_emission_delay(&self) -> Micros {
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
    use crate::latency::moe_tiles::MoeTiles;
    use blis_engine::latency::{BatchEntry, InstanceLoad};

    /// The memoised MoE terms are the functions' values, for counts inside
    /// the memo (asked twice), beyond it and between integers.
    #[test]
    fn memoised_moe_terms_are_the_computed_ones() {
        let model = ModelConfig::from_hf_json(find_model("mistralai/Mixtral-8x7B-v0.1").unwrap().config_json).unwrap();
        let basis = TrainedPhysicsBasis::new(&model, &find_gpu("H100").unwrap().spec(), 2);
        let m = &basis.dims;
        let tiles = m.tiles.expect("Mixtral on H100 has tuned tiles");
        for tokens in [0.0, 1.0, 7.0, 302.0, 302.0, 2048.0, 8191.0, 8192.0, 20_000.0, 2.5] {
            let want = (tiles.padding_factor(m.n_experts, m.k, tokens), m.experts_touched(tokens));
            assert_eq!(basis.moe_terms(tokens), want, "{tokens} tokens");
        }
        let dense = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        assert_eq!(TrainedPhysicsBasis::new(&dense, &find_gpu("H100").unwrap().spec(), 1).moe_terms(302.0), (1.0, 0.0));
    }

    /// Mixtral-8x7B (L 32, d 4096, H 32, KVH 8, dH 128, dKV 1024, dFF 14336,
    /// N 8, k 2) on two H100s (F 989.5e12, W 3.35e12, W_ar = 0.771 of NVLink's
    /// 900e9 = 693.9e9); a 300-token prefill
    /// chunk of a 700-token prompt and decodes at contexts 900 and 50 (302
    /// tokens touch nEff = 8·(1 − 0.75³⁰²) = 8 experts, in 64-row tiles:
    /// P = 8·64·E[⌈X/64⌉]/(302·2) = 1.63602 for X ~ Binomial(302, 1/4), summed
    /// exactly), worked out by hand:
    ///
    /// ```text
    /// FFN(X)  = 32·(X·2·P/2)·6·4096·14336;   LM(rows) = rows·2·32000·4096/2
    /// T_pf_c  = [32·2·300·4096·10240/2 + 32·4·16·300·(700 + 150)·128 + FFN(300) + LM(1)] / F = 3892.7920 µs + (P − 1)·R(300)
    /// T_dc_c  = [32·2·2·4096·10240/2   + 32·4·16·(900 + 50)·128     + FFN(2)   + LM(2)] / F =   26.0173 µs + (P − 1)·R(2)
    ///           (the figures at P = 1; R(X) = 32·X·6·4096·14336 / F, the routed FLOPs' time)
    /// T_w     = [32·4096·10240/2 + 32·(8/2)·3·4096·14336 + 32000·4096/2]·2 / W          = 13901.6137 µs
    /// T_ar    = 2 · 32·302·4096·2·(2·1/2) / W_ar                                    =  228.1813 µs
    /// T_pf_kv = 32·2·4·128·300·2 / W = 5.8689 µs;  T_dc_kv = 32·2·4·128·(950 + 2)·2 / W = 18.6240 µs
    /// C_ar    = 32 attention + 32 MoE all-reduces = 64 (96 expert-parallel: dispatch and combine)
    /// step    = published β · [T_pf_c, T_dc_c, T_w, T_ar, 32, 3, 1, 0, T_pf_kv, T_dc_kv, 0, 64] = 21102.42 µs (P exact;
    ///           β4 = 0.752037·W_ar/W, the published per-HBM-byte β4 in BLIS's per-bus-byte basis)
    /// ```
    #[test]
    fn published_coefficients_on_a_hand_computed_moe_step() {
        let model = ModelConfig::from_hf_json(find_model("mistralai/Mixtral-8x7B-v0.1").unwrap().config_json).unwrap();
        let basis = TrainedPhysicsBasis::new(&model, &find_gpu("H100").unwrap().spec(), 2);
        let entries = [
            BatchEntry { computed_tokens: 400, new_tokens: 300, prompt_tokens: 700 },
            BatchEntry { computed_tokens: 900, new_tokens: 1, prompt_tokens: 600 },
            BatchEntry { computed_tokens: 50, new_tokens: 1, prompt_tokens: 40 },
        ];
        let batch = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
        let routed_us = |tokens: f64| basis.dims.compute_us(32.0 * tokens * 6.0 * 4096.0 * 14336.0);
        let padding = crate::latency::moe_tiles::MIXTRAL_H100.padding_factor(8.0, 2.0, 302.0);
        assert!((padding - 1.6360186068989422).abs() < 0.01 * 1.636, "{padding}");
        let want = [
            3892.7920379989896 + (padding - 1.0) * routed_us(300.0),
            26.017295264274885 + (padding - 1.0) * routed_us(2.0),
            13901.613697910449,
            228.1812595474852,
            32.0,
            3.0,
            1.0,
            0.0,
            5.86889552238806,
            18.623961791044778,
            0.0,
            64.0,
        ];
        for (got, want) in basis.features(&batch).iter().zip(want) {
            assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        }
        // Expert-parallel, the MoE layers' half of T_ar (V(32) at 302 tokens = 117.442 µs)
        // gives way to the all-to-all, k = 2 times that, and the routed FFN
        // FLOPs grow by the busiest rank's share of 302 tokens' assignments;
        // 302 tokens touch all 8 experts, so the weights do not.
        let ep = basis.clone().with_expert_parallel(true).features(&batch);
        let skew = ExpertLoad::new(8.0, 2.0, 2).assignment_skew(302.0);
        assert!(skew > 1.01 && skew < 1.05, "{skew}");
        let mut want_ep = want;
        want_ep[0] = want[0] + padding * routed_us(300.0) * (skew - 1.0);
        want_ep[1] = want[1] + padding * routed_us(2.0) * (skew - 1.0);
        want_ep[3] = want[3] / 2.0;
        want_ep[10] = want[3];
        want_ep[11] = 96.0;
        for (got, want) in ep.iter().zip(want_ep) {
            assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        }
        // One decode token under expert parallelism: its two experts share a
        // rank 3 times in 7, so the busiest rank reads more expert weights.
        let one = [BatchEntry { computed_tokens: 900, new_tokens: 1, prompt_tokens: 600 }];
        let one = StepBatch { entries: &one, load: InstanceLoad::default(), preempted: 0 };
        let (plain, ep) = (basis.features(&one), basis.clone().with_expert_parallel(true).features(&one));
        let weight_skew = ExpertLoad::new(8.0, 2.0, 2).expert_skew(1.0);
        assert!(weight_skew > 1.35 && weight_skew < 1.5, "{weight_skew}");
        let routed_weights_us = basis.dims.memory_us(32.0 * 2.0 * 3.0 * 4096.0 * 14336.0 / 2.0 * 2.0);
        assert!((ep[2] - plain[2] - routed_weights_us * (weight_skew - 1.0)).abs() < 1e-6 * plain[2], "{} vs {}", ep[2], plain[2]);
        let dense = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        let h100 = find_gpu("H100").unwrap().spec();
        for (m, tp) in [(&dense, 2), (&model, 1)] {
            let plain = TrainedPhysicsBasis::new(m, &h100, tp);
            assert_eq!(
                plain.clone().with_expert_parallel(true).features(&batch),
                plain.features(&batch),
                "no experts to spread, or one GPU"
            );
        }
        let published = TrainedPhysics::beta_from_published_layout(&TrainedPhysics::PUBLISHED_BETA, &find_gpu("H100").unwrap().spec());
        assert!(
            (published[3] - 0.752037 * 693.9 / 3350.0).abs() < 1e-12 && published[10] == published[3] && published[11] == 0.0,
            "{published:?}"
        );
        let m =
            basis.with_coefficients(&TrainedPhysics::alpha_from_published_layout(&TrainedPhysics::PUBLISHED_ALPHA), &published).unwrap();
        // The hand figure takes P exact; the basis approximates its tail within 1 %.
        let step_us = m.step_time(&batch).0 as f64;
        assert!((step_us - 21102.42).abs() <= 0.152128 * 0.01 * 1.636 * 2174.02 + 1.0, "{step_us}");
        assert_eq!((m.token_emission_delay(), m.output_token_overhead(), m.completion_overhead()), (Micros(46), Micros::ZERO, Micros(777)));
    }

    /// Qwen3-30B-A3B (L 48, d 2048, H 32, KVH 4, dH 128, so H·dH = 4096 ≠ d;
    /// 128 experts of dFF 768, k 8, every layer MoE) on one H100, decode
    /// only, by hand:
    ///
    /// ```text
    /// nEff(1) = 128·(1 − 120/128)     = 8;    nEff(2) = 128·(1 − (120/128)²) = 15.5
    /// attn    = 48·(2·2048·4096 + 2·2048·512)
    /// lm      = 151936·2048                (the LM head)
    /// T_w(1)  = [attn + 48·8·3·2048·768 + lm]·2 / W    = 1808.4023403 µs
    /// T_w(2)  = [attn + 48·15.5·3·2048·768 + lm]·2 / W = 2822.5474866 µs
    /// ```
    ///
    /// Reading all 128 experts would be 18.0 ms per step at any batch size.
    #[test]
    fn weights_of_a_fine_grained_moe_are_the_experts_its_tokens_touch() {
        let qwen = ModelConfig::from_hf_json(find_model("Qwen/Qwen3-30B-A3B").unwrap().config_json).unwrap();
        let basis = TrainedPhysicsBasis::new(&qwen, &find_gpu("H100").unwrap().spec(), 1);
        let decode = BatchEntry { computed_tokens: 100, new_tokens: 1, prompt_tokens: 50 };
        let t_w = |n: usize| {
            let entries = vec![decode; n];
            basis.features(&StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 })[2]
        };
        for (got, want) in [(t_w(1), 1808.4023402985074), (t_w(2), 2822.547486567164)] {
            assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        }
        let all_experts = 18034.724680597017;
        let mut previous = 0.0;
        for n in [1, 4, 16, 64, 256, 1024] {
            let w = t_w(n);
            assert!(previous < w && w <= all_experts * (1.0 + 1e-12), "T_w({n}) = {w} after {previous}, cap {all_experts}");
            previous = w;
        }
        assert!((all_experts - t_w(1024)) / all_experts < 1e-12);
    }

    /// α3 prices the queueing delay per request the server is running when
    /// one arrives, in the model and in the features a fit reads; the
    /// other overheads do not see the batch.
    #[test]
    fn queueing_grows_with_the_running_batch_and_nothing_else_does() {
        let llama = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        let basis = TrainedPhysicsBasis::new(&llama, &find_gpu("H100").unwrap().spec(), 1);
        let m = basis.with_coefficients(&[3000.0, 500.0, 2000.0, 60.0], &[1.0; BETA_LEN]).unwrap();
        let arrival = |running| QueueingInput {
            prompt_tokens: 600,
            prefix_hit_tokens: 0,
            load: InstanceLoad { running, waiting: 7, ..InstanceLoad::default() },
        };
        assert_eq!([0, 1, 100].map(|n| m.queueing_delay(&arrival(n))), [Micros(3000), Micros(3060), Micros(9000)]);
        assert_eq!((m.token_emission_delay(), m.completion_overhead()), (Micros(2000), Micros(500)));
        let (mut ttft, mut e2e, mut queue) = ([0.0; ALPHA_LEN], [0.0; ALPHA_LEN], [0.0; ALPHA_LEN]);
        basis.alpha_features(&arrival(100), 50, &mut ttft, &mut e2e);
        assert!(basis.alpha_queueing_features(&arrival(100), &mut queue));
        assert_eq!((ttft, e2e, queue), ([1.0, 0.0, 1.0, 100.0], [1.0, 1.0, 1.0, 100.0], [1.0, 0.0, 0.0, 100.0]));
        assert!(
            basis.with_coefficients(&TrainedPhysics::PUBLISHED_ALPHA, &[1.0; BETA_LEN]).is_err(),
            "three α are the file layout, not the model's"
        );
    }

    /// DeepSeek-V2-Lite: 26 MoE layers of 6-of-64 experts (dFF 1408) plus two
    /// shared experts (dFF 2816 in all) and one dense layer (dFF 10944). One
    /// more decode token (at context 1) adds its projections, its attention
    /// (over the latent, as vLLM's MLA decode runs it),
    /// the shared experts' and the dense layer's FFN, [26·2816 + 10944]·6·2048
    /// = 1 034 158 080 FLOPs, one LM head row, 2·102400·2048 = 419 430 400,
    /// and its routed experts, 26·6·1408·6·2048 per routed row, in tiles:
    /// P(n)·n rows for n tokens.
    #[test]
    fn shared_experts_are_computed_for_every_token() {
        let lite = ModelConfig::from_hf_json(find_model("deepseek-ai/DeepSeek-V2-Lite").unwrap().config_json).unwrap();
        let h100 = find_gpu("H100").unwrap().spec();
        let basis = TrainedPhysicsBasis::new(&lite, &h100, 1);
        let decode = BatchEntry { computed_tokens: 1, new_tokens: 1, prompt_tokens: 1 };
        let t_dc_c = |n: usize| {
            let entries = vec![decode; n];
            basis.features(&StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 })[1]
        };
        let projections = 27.0 * 2.0 * lite.attention_params_per_layer();
        // Decode attends over the 512-wide latent and 64-wide rotary key of its one context token: 2·576 + 2·512 per head.
        let attention = 27.0 * 16.0 * (2.0 * 576.0 + 2.0 * 512.0);
        // vLLM ships no tuned config for E = 64, N = 1408 on the H100: its default, 16 rows up to 64 tokens.
        assert_eq!(basis.dims.tiles, Some(MoeTiles::Untuned { experts: 64 }));
        let routed_rows = |n: f64| n * MoeTiles::Untuned { experts: 64 }.padding_factor(64.0, 6.0, n);
        // One token's 6 experts each pad to a 16-row tile.
        assert_eq!(routed_rows(1.0), 16.0);
        let routed = (routed_rows(2.0) - routed_rows(1.0)) * 26.0 * 6.0 * 1408.0 * 6.0 * 2048.0;
        let want = (projections + attention + 1_034_158_080.0 + 419_430_400.0 + routed) / 989.5e12 * 1e6;
        let got = t_dc_c(2) - t_dc_c(1);
        assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
    }

    /// A latent-attention prefill up-projects its cached context's latents to
    /// keys and values (`kv_b_proj`, 512·16·(128 + 128) weights per layer)
    /// before attending to them; an ordinary model's cache holds them already.
    #[test]
    fn latent_attention_prefills_upproject_their_cached_context() {
        let h100 = find_gpu("H100").unwrap().spec();
        let t_pf_c = |model: &str, tp: u32, cached: u32| {
            let m = ModelConfig::from_hf_json(find_model(model).unwrap().config_json).unwrap();
            let entries = [BatchEntry { computed_tokens: cached, new_tokens: 256, prompt_tokens: 2048 }];
            TrainedPhysicsBasis::new(&m, &h100, tp).features(&StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 })
                [0]
        };
        let lite = "deepseek-ai/DeepSeek-V2-Lite";
        let want = 27.0 * 2.0 * (512.0 * 16.0 * 256.0) * 1000.0 / 989.5e12 * 1e6;
        let got = t_pf_c(lite, 1, 1000) - t_pf_c(lite, 1, 0);
        assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        // Sharded over the heads at TP 2.
        assert!(((t_pf_c(lite, 2, 1000) - t_pf_c(lite, 2, 0)) - want / 2.0).abs() <= 1e-9 * want);
        assert_eq!(t_pf_c("meta-llama/Llama-2-7b-hf", 1, 1000), t_pf_c("meta-llama/Llama-2-7b-hf", 1, 0));
    }

    /// Llama-4 Scout attends within chunks of 8 192 tokens in 36 of its 48
    /// layers: a decode at 100 000 tokens reads 100 000 in 12 layers and
    /// 100 000 mod 8 192 = 1 696 in 36, so its attention FLOPs and KV reads
    /// are those of a full-attention model at 12/48·100 000 + 36/48·1 696.
    /// Within the first chunk nothing changes.
    #[test]
    fn llama4_decodes_attend_within_their_chunk_in_three_layers_of_four() {
        let h100 = find_gpu("H100").unwrap().spec();
        let scout =
            ModelConfig::from_hf_json(find_model("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic").unwrap().config_json).unwrap();
        assert_eq!(scout.local_attention.map(|l| l.layers), Some(36));
        let all_full = ModelConfig { local_attention: None, ..scout.clone() };
        // One decode (new = 1, past a 1-token prompt) or one prefill chunk ending the prompt.
        let features = |m: &ModelConfig, computed: u32, new: u32| {
            let prompt_tokens = if new == 1 { 1 } else { computed + new };
            let entries = [BatchEntry { computed_tokens: computed, new_tokens: new, prompt_tokens }];
            TrainedPhysicsBasis::new(m, &h100, 4).features(&StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 })
        };
        // Decode attention FLOPs (index 1) and KV reads (index 9): linear in the context read.
        let attended = 0.25 * 100_000.0 + 0.75 * 1_696.0;
        for index in [1, 9] {
            let (at, base, per_token) = (
                features(&scout, 100_000, 1)[index],
                features(&all_full, 1, 1)[index],
                features(&all_full, 2, 1)[index] - features(&all_full, 1, 1)[index],
            );
            let read = 1.0 + (at - base) / per_token;
            assert!((read - attended).abs() < 1e-6 * attended, "feature {index}: {read} tokens read, not {attended}");
        }
        assert_eq!(features(&scout, 8_000, 1), features(&all_full, 8_000, 1));
        assert_eq!(features(&scout, 0, 8_192), features(&all_full, 0, 8_192));
        // A prefill chunk past the first chunk of 8 192 attends to less.
        assert!(features(&scout, 16_384, 2_048)[0] < features(&all_full, 16_384, 2_048)[0]);
    }

    /// With an FP8 KV cache, FlashAttention 3 attends on FP8 tensor cores:
    /// on an H100 (1 979 over 989.5 TFLOP/s) a decode's attention-score
    /// FLOPs take half as long; an A100's backend and latent attention
    /// dequantize and attend in half precision.
    #[test]
    fn an_fp8_kv_cache_attends_in_fp8_on_hopper() {
        let attention_us = |model: &str, gpu: &str, fp8: bool| {
            let m = ModelConfig::from_hf_json(find_model(model).unwrap().config_json).unwrap();
            let m = if fp8 { m.with_kv_cache_dtype("fp8".parse().unwrap()) } else { m };
            let basis = TrainedPhysicsBasis::new(&m, &find_gpu(gpu).unwrap().spec(), 1);
            let t_dc_c = |context: u32| {
                let entries = [BatchEntry { computed_tokens: context, new_tokens: 1, prompt_tokens: 1 }];
                basis.features(&StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 })[1]
            };
            t_dc_c(1001) - t_dc_c(1)
        };
        let (llama, lite) = ("meta-llama/Llama-2-7b-hf", "deepseek-ai/DeepSeek-V2-Lite");
        let (half, fp8) = (attention_us(llama, "H100", false), attention_us(llama, "H100", true));
        assert!((fp8 - half / 2.0).abs() <= 1e-9 * half, "{fp8} vs {half}");
        assert_eq!(attention_us(llama, "A100-80GB", true), attention_us(llama, "A100-80GB", false));
        assert_eq!(attention_us(lite, "H100", true), attention_us(lite, "H100", false));
    }

    #[test]
    fn dense_tp1_has_no_allreduce_and_interleaved_moe_counts_its_layers() {
        let h100 = find_gpu("H100").unwrap().spec();
        let dense = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        let entries = [BatchEntry { computed_tokens: 10, new_tokens: 1, prompt_tokens: 5 }];
        let batch = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
        let f = TrainedPhysicsBasis::new(&dense, &h100, 1).features(&batch);
        assert_eq!((f[3], f[7], f[11]), (0.0, 0.0, 0.0));
        // Llama-2-7B at TP 2: an all-reduce after attention and after the MLP of each of its 32 layers.
        assert_eq!(TrainedPhysicsBasis::new(&dense, &h100, 2).features(&batch)[11], 64.0);
        let scout =
            ModelConfig::from_hf_json(find_model("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic").unwrap().config_json).unwrap();
        let moe = scout.moe.as_ref().unwrap();
        assert!(moe.interleaved);
        assert_eq!(TrainedPhysicsBasis::new(&scout, &h100, 2).features(&batch)[7], f64::from(moe.num_moe_layers));
    }

    /// The same H100s bridged in pairs (an NVLink domain of 2): at TP 2 the
    /// group stays on NVLink and nothing changes; at TP 4 its rings cross
    /// PCIe, so T_ar grows by the ratio of the two links' measured bus
    /// bandwidths and C_ar by the ratio of their latencies, and no other
    /// basis value moves.
    #[test]
    fn a_group_past_its_nvlink_domain_pays_pcie_for_its_collectives() {
        let h100 = find_gpu("H100").unwrap().spec();
        let bridged = GpuSpec { nvlink_domain_gpus: Some(2), ..h100.clone() };
        let dense = ModelConfig::from_hf_json(find_model("meta-llama/Llama-2-7b-hf").unwrap().config_json).unwrap();
        let entries: Vec<BatchEntry> =
            (0..16).map(|i| BatchEntry { computed_tokens: 300 + i, new_tokens: 1, prompt_tokens: 200 }).collect();
        let batch = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
        let features = |gpu: &GpuSpec, tp: u32| TrainedPhysicsBasis::new(&dense, gpu, tp).features(&batch);
        assert_eq!(features(&h100, 2), features(&bridged, 2));
        let (nvlink, pcie) = (features(&h100, 4), features(&bridged, 4));
        let k = h100.kernels.as_ref().unwrap();
        let (on_nvlink, on_pcie) = (k.allreduce_nvlink.unwrap(), k.allreduce_pcie.unwrap());
        let bandwidth_ratio = 900.0 * on_nvlink.bus_efficiency / (128.0 * on_pcie.bus_efficiency);
        assert!((pcie[3] / nvlink[3] / bandwidth_ratio - 1.0).abs() < 1e-12, "{} vs {}", pcie[3], nvlink[3]);
        assert!((pcie[11] / nvlink[11] - on_pcie.latency_at(4) / on_nvlink.latency_at(4)).abs() < 1e-12);
        assert!(bandwidth_ratio > 5.0 && pcie[11] > nvlink[11]);
        for i in (0..BETA_LEN).filter(|i| ![3, 11].contains(i)) {
            assert_eq!(pcie[i], nvlink[i], "β{i}");
        }
    }
}
