//! Tile padding of vLLM's fused MoE kernel.
//!
//! vLLM's fused MoE kernel (Triton `fused_moe`) sorts a step's token–expert
//! assignments by expert and pads each expert's rows up to a multiple of the
//! kernel's tile height BLOCK_SIZE_M (`moe_align_block_size`): an expert that
//! receives m tokens computes ⌈m/B⌉·B rows, the padding included. B comes
//! from a tuned config chosen by the step's token count M (vLLM takes the
//! config whose key is nearest M). BLIS uses the H100 config vLLM ships for
//! Mixtral-8x7B's expert shape at TP 2 (E = 8, N = 7168): B = 16 up to
//! M = 40, 32 up to 112, 64 up to 768 and 128 beyond; other shapes' tuned
//! configs grow B with M the same way.
//!
//! With tokens routed uniformly, an expert's count is X ~ Binomial(T, k/N)
//! and a step computes N·B·E[⌈X/B⌉] rows against T·k useful ones. A few
//! tokens per expert pay a whole tile: 302 Mixtral tokens (75 per expert at
//! B = 64) compute 1.6 times the rows they need, 2 048 tokens (512 per
//! expert at B = 128) 1.1 times.

use super::expert_load::normal_cdf;

/// The keys of vLLM's tuned fused-MoE configs: the step token counts M its
/// tuning script (`benchmark_moe.py`) times, and every shipped config file
/// holds.
pub(crate) const CONFIG_KEYS: [u32; 18] = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096];

/// BLOCK_SIZE_M of each of [`CONFIG_KEYS`] in vLLM's H100 config for
/// Mixtral-8x7B's expert shape at TP 2 (E = 8, N = 7168).
const BLOCK_SIZE_M: [u8; 18] = [16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128, 128, 128, 128, 128];

/// Which of [`CONFIG_KEYS`] vLLM's fused MoE kernel uses for a step of
/// `tokens` tokens: the nearest key, the lower one on a tie (Python's `min`
/// over the ascending keys keeps the first).
pub(crate) fn config_index(tokens: f64) -> usize {
    let mut best = 0;
    for (i, &key) in CONFIG_KEYS.iter().enumerate() {
        if (f64::from(key) - tokens).abs() < (f64::from(CONFIG_KEYS[best]) - tokens).abs() {
            best = i;
        }
    }
    best
}

/// BLOCK_SIZE_M of the config of [`CONFIG_KEYS`]`[index]`.
pub(crate) fn block_size_m(index: usize) -> u32 {
    u32::from(BLOCK_SIZE_M[index])
}

/// BLOCK_SIZE_M of vLLM's H100 fused-MoE config (E = 8, N = 7168) for a
/// step of `tokens` tokens.
pub(crate) fn tile_rows(tokens: f64) -> f64 {
    f64::from(block_size_m(config_index(tokens)))
}

/// Rows the fused MoE kernel computes over the rows `tokens` tokens need,
/// each picking `k` of `experts` experts uniformly: N·B·E[⌈X/B⌉] / (T·k)
/// with X ~ Binomial(T, k/N), ≥ 1 (1 for an empty step or a dense model).
/// E[⌈X/B⌉] = Σ_j P(X > j·B): P(X > 0) = 1 − (1 − p)^T exactly, the
/// further tiles by the normal approximation with continuity correction
/// (within 1 % of the exact sum, the test below).
pub(crate) fn padding_factor(experts: f64, k: f64, tokens: f64) -> f64 {
    if tokens < 1.0 || experts < 2.0 || k <= 0.0 {
        return 1.0;
    }
    let p = (k / experts).min(1.0);
    let tile = tile_rows(tokens);
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

#[cfg(test)]
mod tests {
    use super::*;

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
                let exact = experts * tile_rows(t) * exact_tiles(tokens, k / experts, tile_rows(t)) / (t * k);
                let got = padding_factor(experts, k, t);
                assert!((got - exact.max(1.0)).abs() <= 0.01 * exact, "N {experts} k {k} T {tokens}: {got} vs exact {exact}");
            }
        }
    }

    #[test]
    fn the_nearest_config_key_gives_the_tile_height_and_ties_go_low() {
        for (tokens, key, rows) in [(1.0, 1, 16.0), (3.0, 2, 16.0), (40.0, 32, 16.0), (41.0, 48, 32.0), (112.0, 96, 32.0), (113.0, 128, 64.0), (768.0, 512, 64.0), (769.0, 1024, 128.0), (9000.0, 4096, 128.0)] {
            assert_eq!(CONFIG_KEYS[config_index(tokens)], key, "M {tokens}");
            assert_eq!(tile_rows(tokens), rows, "M {tokens}");
        }
    }

    #[test]
    fn few_tokens_per_expert_pay_whole_tiles_and_many_amortise_them() {
        // One Mixtral token: 2 experts of 16 rows for 2 useful rows.
        assert!((padding_factor(8.0, 2.0, 1.0) - 16.0).abs() < 1e-9);
        let mixed = padding_factor(8.0, 2.0, 302.0);
        assert!((1.5..1.8).contains(&mixed), "{mixed}");
        let big = padding_factor(8.0, 2.0, 2048.0);
        assert!((1.05..1.2).contains(&big), "{big}");
        assert_eq!(padding_factor(8.0, 2.0, 0.0), 1.0);
        assert_eq!(padding_factor(0.0, 0.0, 100.0), 1.0);
    }
}
