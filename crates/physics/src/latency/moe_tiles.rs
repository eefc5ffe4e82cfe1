//! Tile padding of vLLM's fused MoE kernel.
//!
//! vLLM's fused MoE kernel (Triton `fused_moe`) sorts a step's token–expert
//! assignments by expert and pads each expert's rows up to a multiple of the
//! kernel's tile height BLOCK_SIZE_M (`moe_align_block_size`): an expert that
//! receives m tokens computes ⌈m/B⌉·B rows, the padding included. B comes
//! from a config chosen by the step's token count M ([`MoeTiles`]): the
//! tuned config vLLM ships for the server's expert shape and GPU
//! (`E={experts},N={expert width per GPU},device_name={GPU}.json`, the key
//! nearest M), else vLLM's default (16 rows while M is at most the experts,
//! 64 beyond).
//!
//! With tokens routed uniformly, an expert's count is X ~ Binomial(T, k/N)
//! and a step computes N·B·E[⌈X/B⌉] rows against T·k useful ones. A few
//! tokens per expert pay a whole tile: 302 Mixtral tokens (75 per expert at
//! B = 64) compute 1.6 times the rows they need, 2 048 tokens (512 per
//! expert at B = 128) 1.1 times.

use blis_engine::warmup::{H100_E8_N7168, TileHeights, config_index};

use super::expert_load::normal_cdf;
use crate::hardware::GpuSpec;
use crate::model::ModelConfig;

/// The bf16 tuned configs vLLM ships (`fused_moe/configs/`, read 2026-11-27)
/// for the bundled MoE models' expert shapes on the bundled GPUs that have
/// one: (device name, E, N per GPU, BLOCK_SIZE_M by key). Mixtral-8x7B and
/// 8x22B (E = 8), Qwen3-30B-A3B (E = 128), DeepSeek-V2-Lite (E = 64) and
/// Llama-4-Scout (E = 16) at TP 1–8; a shape or GPU not here has none.
const TUNED: [(&str, u32, u32, TileHeights); 30] = [
    ("NVIDIA_H100_80GB_HBM3", 8, 7168, H100_E8_N7168),
    ("NVIDIA_H100_80GB_HBM3", 8, 4096, [16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 8, 3584, [16, 16, 16, 16, 16, 16, 16, 64, 64, 64, 128, 64, 64, 128, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 8, 2048, [16, 16, 16, 16, 16, 32, 16, 32, 32, 32, 64, 64, 64, 128, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 8, 1792, [16, 16, 16, 16, 16, 32, 32, 32, 32, 32, 64, 128, 64, 64, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 128, 768, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 64, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 128, 384, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 64, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 128, 192, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 64, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 16, 4096, [16, 16, 16, 64, 16, 64, 64, 64, 64, 64, 128, 128, 128, 128, 128, 128, 128, 128]),
    ("NVIDIA_H100_80GB_HBM3", 16, 2048, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 128, 128, 128, 256, 128]),
    ("NVIDIA_H100_80GB_HBM3", 16, 1024, [16, 32, 64, 16, 16, 16, 16, 16, 16, 16, 16, 64, 64, 64, 128, 128, 128, 128]),
    ("NVIDIA_A100-SXM4-80GB", 8, 7168, [16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 32, 64, 64, 64, 128, 128, 128, 128]),
    ("NVIDIA_A100-SXM4-80GB", 8, 4096, [16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 32, 64, 64, 64, 64, 128, 128, 128]),
    ("NVIDIA_A100-SXM4-80GB", 8, 3584, [16, 16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64, 128, 128, 128]),
    ("NVIDIA_A100-SXM4-80GB", 8, 2048, [16, 16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64, 128, 128, 128]),
    ("NVIDIA_A100-SXM4-80GB", 8, 1792, [16, 16, 16, 16, 16, 32, 16, 16, 32, 32, 16, 64, 64, 64, 64, 64, 128, 128]),
    ("NVIDIA_A100-SXM4-80GB", 128, 192, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 64, 128, 64, 64, 128]),
    ("NVIDIA_A100-SXM4-80GB", 64, 1408, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 128, 64, 64, 64, 128]),
    ("NVIDIA_H200", 8, 14336, [16, 32, 16, 16, 16, 16, 16, 32, 32, 32, 64, 128, 128, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 8, 7168, [16, 16, 16, 32, 16, 16, 16, 32, 32, 64, 64, 128, 128, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 8, 4096, [16, 32, 16, 32, 16, 16, 16, 32, 32, 64, 64, 128, 128, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 8, 3584, [16, 16, 16, 16, 16, 16, 16, 32, 64, 64, 64, 128, 128, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 8, 2048, [16, 16, 16, 16, 16, 16, 16, 64, 64, 64, 64, 128, 128, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 8, 1792, [16, 16, 16, 16, 16, 16, 16, 32, 64, 64, 64, 64, 128, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 128, 768, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 128, 384, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 128, 192, [16, 16, 16, 16, 16, 16, 16, 32, 16, 16, 16, 32, 64, 128, 128, 64, 128, 128]),
    ("NVIDIA_H200", 128, 96, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 64, 128, 128, 128, 128]),
    ("NVIDIA_H200", 16, 2048, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 64, 128, 128, 128, 128, 128]),
    ("NVIDIA_H200", 16, 1024, [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 64, 64, 128, 128, 128, 128, 128]),
];

/// The fused-MoE tile heights one server picks by step size.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum MoeTiles {
    /// A tuned config file vLLM ships for the expert shape and GPU.
    Tuned(&'static TileHeights),
    /// None ships: vLLM's `get_default_config`, 16 rows while a step has at
    /// most `experts` tokens (the experts on one GPU), 64 beyond.
    Untuned {
        /// Experts on one GPU.
        experts: u32,
    },
}

impl MoeTiles {
    /// What a server of `model` on `tp` GPUs of `gpu` picks: the tuned bf16
    /// config for E (the experts on one GPU: all of them, or 1/tp under
    /// expert parallelism) and N (one expert's FFN width on one GPU: 1/tp of
    /// it, or all of it under expert parallelism) on the GPU vLLM names it
    /// after, else the default. 8-bit and 4-bit weights take the default
    /// (their own configs, where vLLM ships any, are not bundled). `None`
    /// for a dense model.
    pub fn of(model: &ModelConfig, gpu: &GpuSpec, tp: u32, expert_parallel: bool) -> Option<MoeTiles> {
        let moe = model.moe.as_ref()?;
        let tp = tp.max(1);
        let (experts, width) = if expert_parallel {
            (moe.num_experts / tp, moe.expert_intermediate_size)
        } else {
            (moe.num_experts, moe.expert_intermediate_size / tp)
        };
        let device = gpu.torch_device_name.as_deref().map(|d| d.replace(' ', "_"));
        let bf16 = model.weights.bytes_per_param(crate::model::WeightClass::RoutedExperts) >= 2.0;
        let tuned = TUNED.iter().find(|(name, e, n, _)| bf16 && device.as_deref() == Some(*name) && *e == experts && *n == width);
        Some(tuned.map_or(MoeTiles::Untuned { experts: experts.max(1) }, |(_, _, _, heights)| MoeTiles::Tuned(heights)))
    }

    /// BLOCK_SIZE_M of a step of `tokens` tokens.
    pub fn rows(&self, tokens: f64) -> f64 {
        match self {
            MoeTiles::Tuned(heights) => f64::from(heights[config_index(tokens)]),
            MoeTiles::Untuned { experts } if tokens <= f64::from(*experts) => 16.0,
            MoeTiles::Untuned { .. } => 64.0,
        }
    }

    /// Rows the fused MoE kernel computes over the rows `tokens` tokens
    /// need, each picking `k` of `experts` experts uniformly:
    /// N·B·E[⌈X/B⌉] / (T·k) with X ~ Binomial(T, k/N), ≥ 1 (1 for an empty
    /// step). E[⌈X/B⌉] = Σ_j P(X > j·B): P(X > 0) = 1 − (1 − p)^T exactly,
    /// the further tiles by the normal approximation with continuity
    /// correction (within 1 % of the exact sum, the test below).
    pub fn padding_factor(&self, experts: f64, k: f64, tokens: f64) -> f64 {
        if tokens < 1.0 || experts < 2.0 || k <= 0.0 {
            return 1.0;
        }
        let p = (k / experts).min(1.0);
        let tile = self.rows(tokens);
        let (mean, sd) = (tokens * p, (tokens * p * (1.0 - p)).sqrt());
        let mut tiles = 1.0 - (1.0 - p).powf(tokens);
        if sd > 0.0 {
            let mut edge = tile;
            while edge <= mean + 8.0 * sd {
                tiles += 1.0 - normal_cdf((edge + 0.5 - mean) / sd);
                edge += tile;
            }
        }
        (experts * tile * tiles / (tokens * k)).max(1.0)
    }
}

/// The tiles of the shared Mixtral runs (E = 8, N = 7168 on H100s).
#[cfg(test)]
pub(crate) const MIXTRAL_H100: MoeTiles = MoeTiles::Tuned(&H100_E8_N7168);

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::warmup::CONFIG_KEYS;

    /// E[⌈X/B⌉] for X ~ Binomial(n, p), summed exactly over the pmf (in
    /// logs: (1 − p)^n underflows at a few thousand tokens).
    fn exact_tiles(n: u32, p: f64, tile: f64) -> f64 {
        let mut log_pmf = f64::from(n) * (1.0 - p).ln();
        let mut sum = 0.0;
        for x in 0..=n {
            if x > 0 {
                log_pmf += (f64::from(n - x + 1) / f64::from(x) * p / (1.0 - p)).ln();
            }
            sum += log_pmf.exp() * (f64::from(x) / tile).ceil();
        }
        sum
    }

    #[test]
    fn padding_matches_the_exact_binomial_sum() {
        for (experts, k) in [(8.0, 2.0), (128.0, 8.0), (64.0, 6.0)] {
            for tokens in [1u32, 3, 16, 40, 41, 100, 113, 302, 500, 768, 769, 2048, 4096] {
                let t = f64::from(tokens);
                let tile = MIXTRAL_H100.rows(t);
                let exact = experts * tile * exact_tiles(tokens, k / experts, tile) / (t * k);
                let got = MIXTRAL_H100.padding_factor(experts, k, t);
                assert!((got - exact.max(1.0)).abs() <= 0.01 * exact, "N {experts} k {k} T {tokens}: {got} vs exact {exact}");
            }
        }
    }

    #[test]
    fn the_nearest_config_key_gives_the_tile_height_and_ties_go_low() {
        for (tokens, key, rows) in [
            (1.0, 1, 16.0),
            (3.0, 2, 16.0),
            (40.0, 32, 16.0),
            (41.0, 48, 32.0),
            (112.0, 96, 32.0),
            (113.0, 128, 64.0),
            (768.0, 512, 64.0),
            (769.0, 1024, 128.0),
            (9000.0, 4096, 128.0),
        ] {
            assert_eq!(CONFIG_KEYS[config_index(tokens)], key, "M {tokens}");
            assert_eq!(MIXTRAL_H100.rows(tokens), rows, "M {tokens}");
        }
    }

    /// A server takes the tuned config vLLM ships for its expert shape (E
    /// experts on one GPU, N of each one's width) and GPU, named as torch
    /// names it, else vLLM's default: 16 rows up to E tokens, 64 beyond.
    #[test]
    fn a_server_takes_the_tuned_config_of_its_shape_and_gpu_else_the_default() {
        use crate::catalog::{find_gpu, find_model};
        let model = |id: &str| ModelConfig::from_hf_json(find_model(id).unwrap().config_json).unwrap();
        let gpu = |name: &str| find_gpu(name).unwrap().spec();
        let (mixtral, qwen, scout) = (
            model("mistralai/Mixtral-8x7B-v0.1"),
            model("Qwen/Qwen3-30B-A3B"),
            model("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"),
        );
        let (h100, h200, a100, l40s) = (gpu("H100"), gpu("H200"), gpu("A100-80GB"), gpu("L40S"));
        assert_eq!(MoeTiles::of(&mixtral, &h100, 2, false), Some(MIXTRAL_H100), "E = 8, N = 7168 on NVIDIA_H100_80GB_HBM3");
        let rows = |tiles: Option<MoeTiles>, tokens: f64| tiles.unwrap().rows(tokens);
        // Mixtral at TP 4 on an A100 (N = 3584): 16 rows up to 48 tokens, 32 to 128, 64 to 1536.
        assert_eq!([40.0, 64.0, 1024.0, 4096.0].map(|t| rows(MoeTiles::of(&mixtral, &a100, 4, false), t)), [16.0, 32.0, 64.0, 128.0]);
        // Qwen3-30B-A3B (E = 128, N = 768): 16 rows up to 128 tokens on an H100 and an H200 ("NVIDIA H200").
        for g in [&h100, &h200] {
            assert_eq!(
                [64.0, 128.0, 256.0, 2048.0].map(|t| rows(MoeTiles::of(&qwen, g, 1, false), t)),
                [16.0, 16.0, 32.0, 128.0],
                "{}",
                g.name
            );
        }
        // No file for it on an A100 or an L40S, nor for whole experts under expert parallelism.
        assert_eq!(MoeTiles::of(&qwen, &a100, 1, false), Some(MoeTiles::Untuned { experts: 128 }));
        assert_eq!(MoeTiles::of(&qwen, &l40s, 2, false), Some(MoeTiles::Untuned { experts: 128 }));
        assert_eq!(MoeTiles::of(&mixtral, &h100, 2, true), Some(MoeTiles::Untuned { experts: 4 }));
        assert_eq!([128.0, 129.0].map(|t| MoeTiles::Untuned { experts: 128 }.rows(t)), [16.0, 64.0]);
        // 8-bit weights: their own configs are not bundled.
        assert_eq!(MoeTiles::of(&scout, &h100, 4, false), Some(MoeTiles::Untuned { experts: 16 }));
        let dense = model("meta-llama/Llama-2-7b-hf");
        assert_eq!(MoeTiles::of(&dense, &h100, 1, false), None);
        // A GPU torch names nothing BLIS knows (a user's spec): no file is found.
        let unnamed = GpuSpec { torch_device_name: None, ..h100.clone() };
        assert_eq!(MoeTiles::of(&mixtral, &unnamed, 2, false), Some(MoeTiles::Untuned { experts: 8 }));
    }

    #[test]
    fn few_tokens_per_expert_pay_whole_tiles_and_many_amortise_them() {
        // One Mixtral token: 2 experts of 16 rows for 2 useful rows.
        let pad = |e: f64, k: f64, t: f64| MIXTRAL_H100.padding_factor(e, k, t);
        assert!((pad(8.0, 2.0, 1.0) - 16.0).abs() < 1e-9);
        let mixed = pad(8.0, 2.0, 302.0);
        assert!((1.5..1.8).contains(&mixed), "{mixed}");
        let big = pad(8.0, 2.0, 2048.0);
        assert!((1.05..1.2).contains(&big), "{big}");
        assert_eq!(pad(8.0, 2.0, 0.0), 1.0);
        assert_eq!(pad(0.0, 0.0, 100.0), 1.0);
    }
}
