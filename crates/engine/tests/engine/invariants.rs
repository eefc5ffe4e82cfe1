//! Property tests: random workloads on random instance configurations must
//! keep every invariant (KV conservation after every event — checked by the
//! harness —, batch limits, clock monotonicity, request conservation, each
//! request terminating exactly once with all its tokens), with and without
//! a CPU tier below the GPU cache, and with the hybrid KV cache manager's
//! sliding-window groups.

use std::sync::Arc;

use blis_engine::instance::Instance;
use blis_engine::kv::KvGroups;
use blis_engine::kv::offload::{LinkConfig, Medium, OffloadConfig, StorePolicy, TierConfig};
use blis_engine::kv::transfer::KvTransferConfig;
use blis_engine::latency::Blackbox;
use blis_engine::request::{Outcome, Request, RequestId, RequestMeta, RequestRecord, TokenRun, TokenSeq};
use blis_engine::scheduler::{HybridKv, InstanceConfig, PreemptionVictim, QueuePolicy, SchedulerConfig};
use blis_engine::time::Micros;
use blis_engine::warmup::MoeKernelWarmup;
use proptest::prelude::*;

use crate::harness::{Checked, Recorder, run_checked_with};

fn config() -> impl Strategy<Value = InstanceConfig> {
    config_with(0.3, 1..200)
}

/// [`config`] with vLLM's hybrid KV cache manager (sliding-window groups) on
/// with probability `hybrid`, its window drawn from `window_tokens`.
fn config_with(hybrid: f64, window_tokens: std::ops::Range<u32>) -> impl Strategy<Value = InstanceConfig> {
    (
        (2u64..400, prop::sample::select(vec![1u32, 4, 16])),
        (1u32..32, 1u32..2048, 64u32..5000),
        (any::<bool>(), any::<bool>(), prop::sample::select(vec![0u32, 0, 64, 300])),
        (
            any::<bool>(),
            prop::sample::select(vec![
                QueuePolicy::Fcfs,
                QueuePolicy::Priority,
                QueuePolicy::ShortestJobFirst,
                QueuePolicy::ReversePriority,
            ]),
            prop::sample::select(vec![PreemptionVictim::Tail, PreemptionVictim::LowestPriority]),
        ),
        (prop::option::of(100_000u64..3_000_000), any::<bool>()),
        // CPU blocks, PCIe bytes/s, latency; an optional disk tier (blocks); LMCache's policy (chunk blocks).
        prop::option::of((1u64..300, 1e8f64..1e11, 0u64..2_000, prop::option::of(1u64..500), prop::option::of(1u32..20))),
        // A P/D decode instance's inbound link: bytes/s, latency.
        prop::option::of((1e6f64..1e11, 0u64..2_000)),
        // A MoE server with a cold Triton cache: compile stall, experts, experts per token.
        prop::option::of((1u64..2_000_000, 2u32..64, 1u32..8)),
        // vLLM's hybrid KV cache manager: full-attention and sliding-window groups, the window.
        prop::option::weighted(hybrid, (0u32..3, 1u32..4, window_tokens)),
    )
        .prop_map(
            |(
                (blocks, block_size),
                (seqs, budget, max_len),
                (chunked, caching, threshold),
                (async_scheduling, queue_policy, preemption),
                (timeout, kv_events),
                offload,
                transfer,
                moe,
                hybrid,
            )| {
                let hybrid_kv = hybrid.map(|(full, sliding, window_tokens)| HybridKv {
                    groups: KvGroups { full, sliding, window_tokens },
                    unified_blocks: blocks,
                });
                // vLLM turns the hybrid manager off with KV events or a KV connector.
                let (kv_events, offload, transfer) = if hybrid_kv.is_some() { (false, None, None) } else { (kv_events, offload, transfer) };
                InstanceConfig {
                    scheduler: SchedulerConfig {
                        max_num_seqs: seqs,
                        max_num_batched_tokens: if chunked { budget.max(seqs) } else { budget.max(max_len) },
                        max_model_len: max_len,
                        enable_chunked_prefill: chunked,
                        long_prefill_token_threshold: threshold,
                        async_scheduling,
                        queue_policy,
                        preemption,
                    },
                    num_gpu_blocks: blocks,
                    block_size,
                    enable_prefix_caching: caching,
                    client_timeout: timeout.map(Micros),
                    offload: offload.map(|(cpu_blocks, bytes_per_s, latency_us, disk_blocks, chunk_blocks)| {
                        let link = LinkConfig { bytes_per_s, latency: Micros(latency_us) };
                        let mut cfg = OffloadConfig::native_cpu(cpu_blocks, 1 << 20, link);
                        if let Some(blocks) = disk_blocks {
                            let disk = LinkConfig { bytes_per_s: bytes_per_s / 10.0, latency: Micros(latency_us * 5) };
                            cfg.tiers.push(TierConfig { medium: Medium::Disk, blocks, link: Some(disk) });
                        }
                        if let Some(chunk_blocks) = chunk_blocks {
                            cfg.policy = StorePolicy::PromptChunks { chunk_blocks };
                        }
                        cfg
                    }),
                    kv_transfer: transfer.map(|(bytes_per_s, latency_us)| KvTransferConfig {
                        link: LinkConfig { bytes_per_s, latency: Micros(latency_us) },
                        block_bytes: 1 << 16,
                    }),
                    kv_events,
                    expert_parallel: false,
                    hybrid_kv,
                    moe_kernel_warmup: moe.map(|(compile_us, experts, k)| MoeKernelWarmup {
                        compile: Micros(compile_us),
                        experts,
                        experts_per_token: k.min(experts),
                    }),
                }
            },
        )
}

fn workload() -> impl Strategy<Value = Vec<Request>> {
    workload_of(1..600, 1..60)
}

/// [`workload`] with own prompt tokens and output tokens drawn from these ranges.
fn workload_of(own_prompt_tokens: std::ops::Range<u32>, output_tokens: std::ops::Range<u32>) -> impl Strategy<Value = Vec<Request>> {
    // Some requests are cancelled by their client (RequestMeta::cancel_at) a while after they are sent.
    prop::collection::vec(
        (0u64..20_000, 0u32..3, own_prompt_tokens, output_tokens, -2i32..3, any::<bool>(), prop::option::weighted(0.2, 0u64..400_000)),
        1..50,
    )
    .prop_map(|rows| {
        let mut t = 0;
        rows.into_iter()
            .enumerate()
            .map(|(i, (gap, group, len, out, prio, own, cancel))| {
                t += gap;
                let mut prompt = TokenSeq::new();
                if group > 0 {
                    prompt.push(TokenRun::synthetic(1000 + u64::from(group), 64));
                }
                let shared = prompt.len();
                // The rest is the request's own (seed `i`, no other request's).
                prompt.push(TokenRun::synthetic(i as u64, len));
                Request {
                    id: RequestId(i as u64),
                    arrival: Micros(t),
                    prompt,
                    max_output_tokens: out,
                    output_seed: 1 << 40 | i as u64,
                    meta: RequestMeta {
                        priority: f64::from(prio),
                        own_prompt_from: own.then_some(shared),
                        cancel_at: cancel.map(|after| Micros(t + after)),
                        ..Default::default()
                    },
                }
            })
            .collect()
    })
}

/// What a run's requests and cache saw, to compare runs that must not
/// differ (records without the workload's `own_prompt_from` claim and
/// session, which only decide what the prefix index holds).
fn outcome(run: &Checked) -> impl PartialEq + std::fmt::Debug + '_ {
    let s = run.instance.stats();
    let records: Vec<_> = run
        .rec
        .records
        .values()
        .map(|r| RequestRecord { meta: RequestMeta { own_prompt_from: None, session: None, ..r.meta }, ..r.clone() })
        .collect();
    (records, &run.rec.tokens, &run.rec.steps, (s.preemptions, s.prefix_query_tokens, s.prefix_hit_tokens), s.offload.clone())
}

/// On an instance that receives KV (a P/D decode instance), every other
/// request arrives with its prompt computed elsewhere, to be pulled.
fn inject_some_prefilled(inst: &mut Instance, req: Request, t: Micros, rec: &mut Recorder) {
    if inst.config().kv_transfer.is_some() && req.id.0.is_multiple_of(2) {
        inst.inject_prefilled(req, t, rec);
    } else {
        inst.inject(req, t, rec);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_on_random_workloads_and_caches(cfg in config(), reqs in workload(), beta in (1.0f64..3000.0, 0.0f64..20.0, 0.0f64..200.0)) {
        let model = Arc::new(Blackbox { alpha: [10.0, 0.1, 2.0], beta: [beta.0, beta.1, beta.2] });
        let n = reqs.len();
        let wanted: Vec<u32> = reqs.iter().map(|r| r.max_output_tokens).collect();
        let run = run_checked_with(cfg, model, reqs, None, inject_some_prefilled);
        // Without a horizon every request ends.
        prop_assert_eq!(run.rec.records.len(), n, "every request terminates");
        prop_assert_eq!(run.queued + run.running, 0);
        run.assert_conservation();
        prop_assert!(run.instance.is_idle());
        prop_assert_eq!(run.instance.kv().num_used_blocks(), 0, "all blocks released");
        for r in run.rec.records.values() {
            let tokens = run.rec.tokens.get(&r.id).map_or(0, Vec::len) as u32;
            prop_assert_eq!(tokens, r.output_tokens);
            match r.outcome {
                Outcome::Completed => {
                    prop_assert_eq!(r.output_tokens, wanted[r.id.0 as usize]);
                    prop_assert!(r.first_token.unwrap() >= r.arrival && r.finished >= r.first_token.unwrap());
                }
                Outcome::TimedOut => prop_assert!(r.output_tokens < wanted[r.id.0 as usize]),
                Outcome::Dropped(_) => prop_assert_eq!(r.output_tokens, 0),
                Outcome::Rejected(_) => prop_assert!(false, "an instance never rejects: {:?}", r),
            }
        }
    }

    #[test]
    fn conservation_holds_when_cut_at_a_horizon(cfg in config(), reqs in workload(), horizon in 1u64..200_000) {
        let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [500.0, 2.0, 50.0] });
        let run = run_checked_with(cfg, model, reqs, Some(Micros(horizon)), inject_some_prefilled);
        run.assert_conservation();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    /// A request's own blocks (generated, and its prompt's own) are stored
    /// in the tiers unindexed (private) unless KV events are recorded,
    /// which name every block: the two ways give the same requests,
    /// tokens, steps, prefix hits and tier counters, preemptions included.
    #[test]
    fn private_tier_blocks_change_no_result(cfg in config(), reqs in workload(), beta in (1.0f64..3000.0, 0.0f64..20.0)) {
        prop_assume!(cfg.offload.is_some());
        let model = Arc::new(Blackbox { alpha: [10.0, 0.1, 2.0], beta: [beta.0, beta.1, 50.0] });
        let run = |kv_events| {
            let cfg = InstanceConfig { kv_events, ..cfg.clone() };
            run_checked_with(cfg, model.clone(), reqs.clone(), None, inject_some_prefilled)
        };
        let (private, indexed) = (run(false), run(true));
        prop_assert_eq!(outcome(&private), outcome(&indexed));
    }

    /// A prompt's own tokens (`RequestMeta::own_prompt_from`) stay out of
    /// the GPU prefix index and are stored in the tiers unindexed: the
    /// same requests without the claim give the same requests, tokens,
    /// steps, prefix hits and tier counters, preemptions included.
    #[test]
    fn own_prompt_blocks_change_no_result(cfg in config(), reqs in workload(), beta in (1.0f64..3000.0, 0.0f64..20.0)) {
        prop_assume!(reqs.iter().any(|r| r.meta.own_prompt_from.is_some()));
        let model = Arc::new(Blackbox { alpha: [10.0, 0.1, 2.0], beta: [beta.0, beta.1, 50.0] });
        let unclaimed = reqs.iter().cloned().map(|r| Request { meta: RequestMeta { own_prompt_from: None, ..r.meta }, ..r }).collect();
        let run = |reqs| run_checked_with(cfg.clone(), model.clone(), reqs, None, inject_some_prefilled);
        let (claimed, unclaimed) = (run(reqs), run(unclaimed));
        prop_assert_eq!(outcome(&claimed), outcome(&unclaimed));
    }
}

proptest! {
    // Generated blocks matter only where requests are preempted after
    // generating: long outputs, small caches, and sliding windows often.
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// A request's generated tokens stay out of the GPU prefix index until
    /// it is preempted (`Live::cacheable_tokens`): the same requests each in
    /// a session of its own, whose generated blocks are indexed as they are
    /// allocated (as vLLM indexes every full block), give the same
    /// requests, tokens, steps, prefix hits and tier counters. Outputs long
    /// against their prompts, so that requests are preempted and recompute
    /// generated tokens. It failed (2026-11-29) until a sliding-window
    /// group entered generated blocks as they slid out, a preemption entered
    /// the blocks its step had allocated for generated tokens, and a content
    /// could be held by several blocks, as in vLLM (a recomputation meets
    /// its own old blocks).
    #[test]
    fn generated_blocks_change_no_result(cfg in config_with(0.9, 1..64), reqs in workload_of(1..60, 1..300), beta in (1.0f64..3000.0, 0.0f64..20.0)) {
        let model = Arc::new(Blackbox { alpha: [10.0, 0.1, 2.0], beta: [beta.0, beta.1, 50.0] });
        let held: Vec<Request> = reqs.into_iter().map(|r| Request { meta: RequestMeta { own_prompt_from: None, ..r.meta }, ..r }).collect();
        let indexed = held.iter().cloned().map(|r| Request { meta: RequestMeta { session: Some((r.id.0, 0)), ..r.meta }, ..r }).collect();
        let run = |reqs| run_checked_with(cfg.clone(), model.clone(), reqs, None, inject_some_prefilled);
        let (held, indexed) = (run(held), run(indexed));
        prop_assert_eq!(outcome(&held), outcome(&indexed));
    }
}
