//! What a freshly started server pays once: kernels compiled on first use.
//!
//! vLLM runs a mixture-of-experts layer with its Triton `fused_moe` kernel,
//! launched with the tuned config whose key is nearest the step's token
//! count M ([`config_index`]; `blis_physics::latency::moe_tiles` prices the
//! tiles). Triton compiles a kernel the first time it
//! is launched with a new specialization: new constexpr values (the config)
//! or integer arguments of a new divisibility class (Triton specializes every
//! integer argument on whether 16 divides it; the fused-MoE kernel takes two
//! that change with M: the routed rows M·k and the padded rows
//! M·k + E·(BLOCK_SIZE_M − 1)). The compile runs on the serving path and the
//! whole engine waits for it.
//!
//! At startup vLLM runs a profiling step of `--max-num-batched-tokens`
//! tokens and captures CUDA graphs for every step of up to
//! min(2·`--max-num-seqs`, 512, `--max-num-batched-tokens`) tokens, padded
//! to its capture sizes (1, 2, 4, multiples of 8 below 256, of 16 from 256);
//! those launches compile their kernels before the first request. A larger
//! step (a prefill chunk and the batch's decodes) runs outside the graphs
//! at its own M, and the first step of each new specialization stalls.
//!
//! In the shared H100 runs this is the first ~10 s of every Mixtral server:
//! six to eight stalls of about a second each (the engine emits no token for
//! 0.9–1.3 s, then runs normally until the next), which raise the first
//! stage's mean TTFT by 10–15 % and set its p99; a server draining its batch
//! (every step inside the graphs) never stalls, and dense models show no
//! such stalls. `docs/fidelity.md` ("Server warm-up") has the measurement.

use crate::time::Micros;

/// The keys of vLLM's tuned fused-MoE configs: the step token counts M its
/// tuning script (`benchmark_moe.py`) times, and every shipped config file
/// holds.
pub const CONFIG_KEYS: [u32; 18] = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096];

/// BLOCK_SIZE_M of each of [`CONFIG_KEYS`] in one tuned config file.
pub type TileHeights = [u16; 18];

/// vLLM's H100 config for Mixtral-8x7B's expert shape at TP 2 (E = 8,
/// N = 7168): the one the shared Mixtral runs used.
pub const H100_E8_N7168: TileHeights = [16, 16, 16, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128, 128, 128, 128, 128];

/// Which of [`CONFIG_KEYS`] vLLM's fused MoE kernel uses for a step of
/// `tokens` tokens: the nearest key, the lower one on a tie (Python's `min`
/// over the ascending keys keeps the first).
pub fn config_index(tokens: f64) -> usize {
    let mut best = 0;
    for (i, &key) in CONFIG_KEYS.iter().enumerate() {
        if (f64::from(key) - tokens).abs() < (f64::from(CONFIG_KEYS[best]) - tokens).abs() {
            best = i;
        }
    }
    best
}

/// BLOCK_SIZE_M of the config of [`CONFIG_KEYS`]`[index]` in the config the
/// shared Mixtral runs used (the compile stalls' specializations,
/// `warmup.rs`).
fn block_size_m(index: usize) -> u32 {
    u32::from(H100_E8_N7168[index])
}

/// What compiling one fused-MoE kernel specialization stalls a server, as
/// measured on the shared H100 Mixtral runs (`docs/fidelity.md`, "Server
/// warm-up").
pub const MEASURED_MOE_KERNEL_COMPILE: Micros = Micros(950_000);

/// Divisibility classes per config: whether 16 divides the routed rows and
/// whether it divides the padded rows.
const CLASSES: usize = 4;

/// How a server with a cold Triton cache compiles its fused-MoE kernels.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct MoeKernelWarmup {
    /// The stall of one compile.
    pub compile: Micros,
    /// Routed experts E.
    pub experts: u32,
    /// Experts per token k.
    pub experts_per_token: u32,
}

/// The fused-MoE kernel specializations one server has compiled.
///
/// Guarantees: each specialization is charged at most once per server, so a
/// server stalls at most `18 × 4` times in its life and never for a step
/// that runs inside its CUDA graphs; no allocation after construction.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct MoeKernelCache {
    warmup: MoeKernelWarmup,
    /// Steps of up to this many tokens replay a CUDA graph.
    graph_tokens: u64,
    /// Bit `key · CLASSES + class` set: that specialization is compiled.
    compiled: u128,
}

impl MoeKernelCache {
    /// A server just started with these scheduler limits: the kernels of its
    /// profiling step and of its CUDA-graph captures are compiled, nothing
    /// else.
    pub fn after_startup(warmup: MoeKernelWarmup, max_num_seqs: u32, max_num_batched_tokens: u32) -> MoeKernelCache {
        let graph_tokens = cuda_graph_max_tokens(max_num_seqs, max_num_batched_tokens);
        let mut cache = MoeKernelCache { warmup, graph_tokens: u64::from(graph_tokens), compiled: 0 };
        cache.compiled |= cache.specialization(u64::from(max_num_batched_tokens));
        for size in capture_sizes(graph_tokens) {
            cache.compiled |= cache.specialization(u64::from(size));
        }
        cache
    }

    /// The stall a step of `tokens` tokens pays before it runs: the compile
    /// time when it runs outside the CUDA graphs with a specialization new
    /// to this server (which is then compiled), else zero.
    pub fn launch(&mut self, tokens: u64) -> Micros {
        if tokens <= self.graph_tokens {
            return Micros::ZERO;
        }
        let bit = self.specialization(tokens);
        if self.compiled & bit != 0 {
            return Micros::ZERO;
        }
        self.compiled |= bit;
        self.warmup.compile
    }

    /// The bit of the specialization a step of `tokens` tokens launches.
    fn specialization(&self, tokens: u64) -> u128 {
        let config = config_index(tokens as f64);
        let routed = tokens * u64::from(self.warmup.experts_per_token);
        let padded = routed + u64::from(self.warmup.experts) * u64::from(block_size_m(config) - 1);
        let class = usize::from(routed.is_multiple_of(16)) * 2 + usize::from(padded.is_multiple_of(16));
        1u128 << (config * CLASSES + class)
    }
}

// The bitset holds every specialization.
const _: () = assert!(CONFIG_KEYS.len() * CLASSES <= 128);

/// The largest step vLLM captures a CUDA graph for by default:
/// min(2·max_num_seqs, 512), and no more than the step budget.
pub fn cuda_graph_max_tokens(max_num_seqs: u32, max_num_batched_tokens: u32) -> u32 {
    max_num_seqs.saturating_mul(2).min(512).min(max_num_batched_tokens)
}

/// vLLM's default CUDA-graph capture sizes up to `max_tokens`: 1, 2, 4, the
/// multiples of 8 below 256, the multiples of 16 from 256.
fn capture_sizes(max_tokens: u32) -> impl Iterator<Item = u32> {
    [1, 2, 4].into_iter().chain((8..256).step_by(8)).chain((256..=512).step_by(16)).filter(move |&s| s <= max_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIXTRAL: MoeKernelWarmup = MoeKernelWarmup { compile: Micros(950_000), experts: 8, experts_per_token: 2 };

    #[test]
    fn graph_limit_follows_vllm_defaults() {
        assert_eq!(cuda_graph_max_tokens(128, 2048), 256);
        assert_eq!(cuda_graph_max_tokens(1024, 8192), 512);
        assert_eq!(cuda_graph_max_tokens(256, 300), 300);
        let sizes: Vec<u32> = capture_sizes(256).collect();
        assert_eq!(sizes.len(), 3 + 31 + 1);
        assert_eq!(sizes.last(), Some(&256));
    }

    #[test]
    fn only_steps_outside_the_graphs_with_a_new_specialization_stall() {
        let mut cache = MoeKernelCache::after_startup(MIXTRAL, 128, 2048);
        let c = MIXTRAL.compile.as_us();
        // Inside the graphs: never. The profiling step's own size: compiled.
        assert_eq!(cache.launch(1).as_us() + cache.launch(200).as_us() + cache.launch(256).as_us(), 0);
        assert_eq!(cache.launch(2048), Micros::ZERO);
        // 577 tokens: key 512, 16 divides neither 1154 nor 1154 + 8·63.
        assert_eq!(cache.launch(577).as_us(), c);
        assert_eq!(cache.launch(601).as_us(), 0, "same key, same class");
        // 580 = 4 mod 8: the padded rows 1160 + 504 are a multiple of 16.
        assert_eq!(cache.launch(580).as_us(), c);
        // 584 = 0 mod 8: the routed rows are.
        assert_eq!(cache.launch(584).as_us(), c);
        assert_eq!(cache.launch(1300).as_us(), c, "key 1536");
        assert_eq!(cache.launch(1301).as_us(), c, "key 1536, another class");
        assert_eq!(cache.launch(1303).as_us(), 0);
    }

    proptest! {
        /// Whatever the steps, the total stall is the compile time times the
        /// distinct specializations of the steps outside the graphs that
        /// startup did not compile, and a server never stalls more often
        /// than there are specializations.
        #[test]
        fn stalls_are_one_per_new_specialization(seqs in 1u32..600, budget in 600u32..8192, steps in proptest::collection::vec(1u64..8192, 0..300)) {
            let w = MoeKernelWarmup { compile: Micros(7), experts: 64, experts_per_token: 6 };
            let mut cache = MoeKernelCache::after_startup(w, seqs, budget);
            let started = cache;
            let total: u64 = steps.iter().map(|&m| cache.launch(m).as_us()).sum();
            let mut new: Vec<u128> = steps
                .iter()
                .filter(|&&m| m > u64::from(cuda_graph_max_tokens(seqs, budget)))
                .map(|&m| started.specialization(m))
                .filter(|&bit| started.compiled & bit == 0)
                .collect();
            new.sort_unstable();
            new.dedup();
            prop_assert_eq!(total, 7 * new.len() as u64);
            prop_assert!(cache.compiled.count_ones() as usize <= CONFIG_KEYS.len() * CLASSES);
        }
    }
}
