//! The tiers below the GPU cache (vLLM's native KV offloading, LMCache's
//! CPU and disk tiers), checked against hand-computed timelines. Conservation and the lifecycle under
//! random workloads are in `invariants.rs`.

use std::sync::Arc;

use blis_engine::kv::offload::{LinkConfig, Medium, OffloadConfig, StorePolicy, TierConfig};
use blis_engine::latency::Blackbox;
use blis_engine::request::{Request, RequestId, RequestMeta, TokenSeq};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;

use crate::harness::{Checked, run_checked};

/// 1 MB per block: 1 ms per block at 1 GB/s.
const BLOCK_BYTES: u64 = 1_000_000;

fn tier(cpu_blocks: u64, gb_per_s: f64, latency_us: u64) -> OffloadConfig {
    let link = LinkConfig { bytes_per_s: gb_per_s * 1e9, latency: Micros(latency_us) };
    OffloadConfig::native_cpu(cpu_blocks, BLOCK_BYTES, link)
}

fn req(id: u64, arrival_us: u64, prompt_seed: u64, prompt: u32, out: u32) -> Request {
    Request {
        id: RequestId(id),
        arrival: Micros(arrival_us),
        prompt: TokenSeq::synthetic(prompt_seed, prompt),
        max_output_tokens: out,
        output_seed: 1 << 50 | id,
        meta: RequestMeta::default(),
    }
}

/// Blackbox α = 0, β = [1000 µs per step, 10 µs per prefill token, 100 µs
/// per decode token]; 11 usable GPU blocks of 16 tokens.
fn run(offload: Option<OffloadConfig>, reqs: Vec<Request>) -> Checked {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 10.0, 100.0] });
    let cfg = InstanceConfig { offload, ..InstanceConfig::basic(8, 4096, 10_000, 12) };
    let run = run_checked(cfg, model, reqs, None);
    run.assert_conservation();
    run
}

/// R0 computes prompt P (160 tokens, 10 blocks) at 0–2600 µs and stores
/// its blocks to the CPU; R1 (another 160-token prompt, 10 000–12 600)
/// evicts all of P's GPU blocks but the first (the free queue gives up a
/// request's tail first). R2 sends P again at 20 000: one GPU block hits,
/// the CPU holds the other nine (stored at 2600, landed long before).
///
/// * Recompute (no tier): 144 tokens, 1000 + 1440 = 2440 µs → TTFT 2440.
/// * CPU tier at 1 GB/s, 100 µs latency: 9 MB load = 9000 + 100 → lands at
///   29 100; the whole prompt is then computed but its last token, which one
///   1-token step recomputes (1010 µs) → TTFT 10 110: slower than recompute.
/// * At 100 GB/s: 90 + 100 → lands 20 190, TTFT 1200: faster.
#[test]
fn a_prefix_reloaded_from_cpu_costs_exactly_its_transfer() {
    let reqs = || vec![req(0, 0, 7, 160, 1), req(1, 10_000, 8, 160, 1), req(2, 20_000, 7, 160, 1)];
    let ttft = |r: &Checked| r.rec.records[&RequestId(2)].ttft().unwrap();

    let recompute = run(None, reqs());
    assert_eq!(ttft(&recompute), Micros(2440));

    for (gb_per_s, landing, want_ttft) in [(1.0, 29_100, 10_110), (100.0, 20_190, 1200)] {
        let r = run(Some(tier(100, gb_per_s, 100)), reqs());
        assert_eq!(ttft(&r), Micros(want_ttft), "{gb_per_s} GB/s");
        // Nothing runs while R2 loads: the step after R0's and R1's starts when the load lands.
        let steps: Vec<(u64, u64)> = r.rec.steps.iter().map(|s| (s.0.as_us(), s.3)).collect();
        assert_eq!(steps, [(0, 160), (10_000, 160), (landing, 1)], "{gb_per_s} GB/s");
        let t = r.instance.stats().offload.clone().unwrap();
        assert_eq!((t.loads, t.hit_blocks(), t.load_bytes), (1, 9, 9 * BLOCK_BYTES));
        assert_eq!(t.load_wait, Micros(landing - 20_000));
        // R0's and R1's ten blocks each; R2's are in the tier already.
        assert_eq!(t.tiers[0].stored_blocks, 20);
        // R2's nine blocks were offloaded at 2600, evicted from the GPU and needed back 17 ms later.
        assert_eq!(t.tiers[0].thrashed_blocks, 9);
        // vLLM's num_cached_tokens: what was computed when it was first scheduled.
        assert_eq!(r.rec.records[&RequestId(2)].cached_prompt_tokens, 159);
    }
}

/// A load waits for the store it needs: R1 sends R0's prompt while R0's
/// blocks are still on their way to the CPU, so it finds the GPU copy
/// instead (prefix caching), and the CPU tier is not used.
#[test]
fn blocks_still_being_stored_are_not_found() {
    // 0.01 GB/s: 10 blocks take 1 s to store.
    let r = run(Some(tier(100, 0.01, 0)), vec![req(0, 0, 7, 160, 1), req(1, 2600, 7, 160, 1)]);
    let t = r.instance.stats().offload.clone().unwrap();
    assert_eq!(t.loads, 0);
    assert_eq!(r.rec.records[&RequestId(1)].cached_prompt_tokens, 144);
}

/// Prompts that fit in the GPU together are served from it (40-token
/// prompts: their two full blocks are GPU hits, and the CPU tier, offered
/// every block, has nothing past them to load), and nothing thrashes.
/// Prompts that cycle through more than the GPU holds come back from the CPU,
/// offloaded and needed again within a second: thrashing.
#[test]
fn thrashing_is_zero_when_the_working_set_fits_and_positive_when_it_cycles() {
    let cyclic = |prompts: u64, rounds: u64| (0..prompts * rounds).map(|i| req(i, i * 5000, 100 + i % prompts, 40, 1)).collect::<Vec<_>>();
    // Three 3-block prompts fit in 11 GPU blocks.
    let fits = run(Some(tier(100, 10.0, 10)), cyclic(3, 4));
    let t = fits.instance.stats().offload.clone().unwrap();
    assert_eq!((t.tiers[0].thrashed_blocks, t.loads), (0, 0));
    assert_eq!(t.tiers[0].stored_blocks, 6);
    // Eight do not.
    let cycles = run(Some(tier(100, 10.0, 10)), cyclic(8, 4));
    let t = cycles.instance.stats().offload.clone().unwrap();
    assert!(t.tiers[0].thrashed_blocks > 0 && t.tiers[0].thrashed_blocks <= t.hit_blocks(), "{t:?}");
}

/// With a tier the run is still a pure function of its input.
#[test]
fn runs_with_a_tier_are_deterministic() {
    let reqs = || (0..40).map(|i| req(i, i * 700, 100 + i % 7, 40 + (i as u32 * 37) % 120, 1 + (i as u32 * 13) % 30)).collect::<Vec<_>>();
    let a = run(Some(tier(20, 5.0, 20)), reqs());
    let b = run(Some(tier(20, 5.0, 20)), reqs());
    assert_eq!(a.rec.records, b.rec.records);
    assert_eq!(a.rec.steps, b.rec.steps);
    assert_eq!(a.instance.stats(), b.instance.stats());
    assert!(a.instance.stats().offload.as_ref().unwrap().loads > 0, "the workload exercises loads");
}

/// The case above with a 10-block CPU tier and a disk below it (1 GB/s,
/// 1 ms a transfer; PCIe 100 GB/s, 100 µs). R0's store at 2600 crosses
/// PCIe (100 + 100 → in host at 2800) and is written to disk from 2800
/// (10 000 µs, free at 12 800). R1's store at 12 600 evicts all of P from
/// the CPU and is written to disk from 12 800 to 22 800. R2 at 20 000
/// finds P's nine blocks on disk only: their read queues behind R1's write
/// (the disk's link serves both directions), 22 800 + 9000 + 1000 = 32 800
/// in host, then PCIe 90 + 100 → lands at 32 990; its last token's step
/// (1010 µs) gives TTFT 32 990 + 1010 − 20 000 = 14 000.
#[test]
fn a_prefix_evicted_from_cpu_comes_back_from_disk_through_host_memory() {
    let pcie = LinkConfig { bytes_per_s: 100e9, latency: Micros(100) };
    let disk = LinkConfig { bytes_per_s: 1e9, latency: Micros(1000) };
    let mut cfg = OffloadConfig::native_cpu(10, BLOCK_BYTES, pcie);
    cfg.policy = StorePolicy::PromptChunks { chunk_blocks: 16 };
    cfg.tiers.push(TierConfig { medium: Medium::Disk, blocks: 100, link: Some(disk) });
    let r = run(Some(cfg), vec![req(0, 0, 7, 160, 1), req(1, 10_000, 8, 160, 1), req(2, 20_000, 7, 160, 1)]);
    let r2 = &r.rec.records[&RequestId(2)];
    assert_eq!(r2.ttft(), Some(Micros(14_000)));
    assert_eq!((r2.loaded_prompt_tokens, r2.kv_load_wait), (144, Micros(12_990)));
    let steps: Vec<(u64, u64)> = r.rec.steps.iter().map(|s| (s.0.as_us(), s.3)).collect();
    assert_eq!(steps, [(0, 160), (10_000, 160), (32_990, 1)]);
    let t = r.instance.stats().offload.clone().unwrap();
    let per_tier: Vec<(Medium, u64, u64)> = t.tiers.iter().map(|x| (x.medium, x.stored_blocks, x.hit_blocks)).collect();
    // After R2's step its blocks, which the CPU lacks, go down to it again (not to the disk, which holds them).
    assert_eq!(per_tier, [(Medium::Cpu, 30, 0), (Medium::Disk, 20, 9)]);
    // The disk: written twice and read once, 1 ms per MB; PCIe carried 30 blocks down and 9 up.
    assert_eq!(t.tiers[1].write_busy + t.tiers[1].read_busy, Micros(29_000));
    assert_eq!((t.store_bytes, t.load_bytes), (30 * BLOCK_BYTES, 9 * BLOCK_BYTES));
}

/// LMCache saves prompts, not generated tokens (`save_decode_cache` off);
/// vLLM's native offloading saves every full block. R0: a 96-token prompt
/// (6 blocks) and 40 generated tokens, of which 39 are computed: two more
/// full blocks.
#[test]
fn lmcache_stores_prompt_blocks_and_native_offloading_every_full_block() {
    let link = LinkConfig { bytes_per_s: 10e9, latency: Micros(10) };
    let stored = |policy| {
        let mut cfg = OffloadConfig::native_cpu(100, BLOCK_BYTES, link);
        cfg.policy = policy;
        let r = run(Some(cfg), vec![req(0, 0, 7, 96, 40)]);
        r.instance.stats().offload.clone().unwrap().tiers[0].stored_blocks
    };
    assert_eq!(stored(StorePolicy::EveryFullBlock), 8);
    assert_eq!(stored(StorePolicy::PromptChunks { chunk_blocks: 16 }), 6);
}

/// What a precise prefix-aware router sees: after R1 evicted all of P's
/// GPU blocks but the first, the GPU serves 16 of P's tokens and the CPU
/// tier the next 144 (the whole prompt: a tier hit is not capped at
/// `prompt − 1`); an unrelated prompt is served by neither.
#[test]
fn a_router_sees_the_gpu_hit_and_the_tier_run_after_it() {
    let r = run(Some(tier(100, 100.0, 100)), vec![req(0, 0, 7, 160, 1), req(1, 10_000, 8, 160, 1)]);
    let hashes = |seed| {
        let mut h = Vec::new();
        blis_engine::request::extend_block_hashes(&TokenSeq::synthetic(seed, 160), 0, 0, 16, &mut h);
        h
    };
    assert_eq!(r.instance.cached_prefix_by_tier(&hashes(7), 160), (16, [144, 0, 0]));
    assert_eq!(r.instance.cached_prefix_by_tier(&hashes(9), 160), (0, [0, 0, 0]));
    let no_tier = run(None, vec![req(0, 0, 7, 160, 1), req(1, 10_000, 8, 160, 1)]);
    assert_eq!(no_tier.instance.cached_prefix_by_tier(&hashes(7), 160), (16, [0, 0, 0]));
}

/// The runs of the two tests below (their timelines are in their
/// comments): R0 stores P, R1 evicts it from the GPU, R3 (a 16-token
/// prompt, `r3_out` tokens out) keeps the server stepping, and R2 sends P
/// again at 20 000, loading it from a 17-block GPU's CPU tier.
fn landing_during_r3(async_scheduling: bool, r3_out: u32) -> Checked {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 10.0, 100.0] });
    let mut cfg = InstanceConfig { offload: Some(tier(100, 100.0, 100)), ..InstanceConfig::basic(8, 4096, 10_000, 17) };
    cfg.scheduler.async_scheduling = async_scheduling;
    let reqs = vec![req(0, 0, 7, 160, 1), req(1, 10_000, 8, 240, 1), req(3, 19_000, 9, 16, r3_out), req(2, 20_000, 7, 160, 1)];
    let run = run_checked(cfg, model, reqs, None);
    run.assert_conservation();
    run
}

/// When a landed load joins a step. R0 stores P (160 tokens) at 2600; R1
/// (240 tokens, 10 000–13 400) evicts P's GPU blocks; R3 (a 16-token
/// prompt, 40 tokens out) runs from 19 000 (a 1160 µs prefill, then
/// 1100 µs decode steps), and R2 sends P at 20 000, while R3's prefill
/// runs. P's ten blocks load from the CPU in 200 µs, and R2's step then
/// computes its last token (1110 µs with R3's decode).
///
/// * Synchronous scheduling: R2 is seen at 20 160 and loads until 20 360,
///   during R3's decode step 20 160–21 260, whose output reports the load:
///   R2 runs 21 260–22 370, TTFT 2370.
/// * Async scheduling: R2 arrived while a step ran, so the step formed at
///   20 160 cannot see it; it is seen at 21 260 and loads until 21 460,
///   during the step 21 260–22 360. The step after it (22 360–23 460) was
///   formed before that step's output arrived, so R2 runs 23 460–24 570,
///   TTFT 4570: vLLM's scheduler learns of a finished load only from the
///   output of the step it finished in.
#[test]
fn a_landed_load_joins_the_first_step_formed_after_the_step_it_landed_in() {
    let ttft = |async_scheduling: bool| {
        let run = landing_during_r3(async_scheduling, 40);
        let r2 = &run.rec.records[&RequestId(2)];
        assert_eq!(r2.loaded_prompt_tokens, 160, "async {async_scheduling}");
        r2.ttft().unwrap()
    };
    assert_eq!(ttft(false), Micros(2370));
    assert_eq!(ttft(true), Micros(4570));
}

/// The case above with async scheduling, R3 generating 3 tokens: its last
/// decode step (21 260–22 360) is the one R2's load lands in (21 460). The
/// step after it has nothing else to run, so R2 need not wait for another
/// step's output (vLLM's engine runs an empty step, whose output reports
/// the load): it runs at once, 22 360–23 370 (a 1-token step, 1010 µs),
/// TTFT 3370.
#[test]
fn a_load_that_lands_in_the_last_step_runs_right_after_it() {
    let run = landing_during_r3(true, 3);
    assert_eq!(run.rec.records[&RequestId(3)].finished, Micros(22_360));
    let r2 = &run.rec.records[&RequestId(2)];
    assert_eq!((r2.loaded_prompt_tokens, r2.first_scheduled, r2.ttft()), (160, Some(Micros(22_360)), Some(Micros(3370))));
}
