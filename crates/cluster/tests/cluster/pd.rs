//! Prefill/decode disaggregation: the request path, the transfer's cost,
//! conservation across pools, determinism, and the interference it removes.

use std::collections::BTreeSet;
use std::sync::Arc;

use blis_cluster::ClusterConfig;
use blis_cluster::pd::{PdDecider, PdPolicy};
use blis_cluster::policy::PolicyBundle;
use blis_engine::kv::transfer::{KvTransferConfig, LinkConfig};
use blis_engine::latency::LatencyModel;
use blis_engine::request::{Labels, Outcome, Request, RequestId, RequestMeta, TokenSeq};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;
use proptest::prelude::*;

use crate::harness::{Load, always, config, instance, llama_h100, pd_fleet, run, spec_blackbox};

/// `prefill` + `decode` instances of `cfg`/`latency`; the decode side pulls
/// 4 KiB blocks over `link`.
fn pd_config(
    prefill: u32,
    decode: u32,
    cfg: InstanceConfig,
    latency: Arc<dyn LatencyModel>,
    link: LinkConfig,
    decider: PdDecider,
) -> ClusterConfig {
    let mut decode_cfg = cfg.clone();
    decode_cfg.kv_transfer = Some(KvTransferConfig { link, block_bytes: 4096 });
    let policy = PdPolicy { decider, ..always(true) };
    pd_fleet((prefill, cfg), (decode, decode_cfg), latency, policy, (PolicyBundle::default(), Labels::default()))
}

fn one_request(prompt: u32, output: u32) -> Vec<Request> {
    vec![Request {
        id: RequestId(0),
        arrival: Micros(0),
        prompt: TokenSeq::synthetic(7, prompt),
        max_output_tokens: output,
        output_seed: 7,
        meta: RequestMeta::default(),
    }]
}

/// In an idle system the first token comes one decode step (one token
/// computed) after the transfer, which starts when the prefill finishes;
/// a transfer latency of T makes the TTFT later by exactly T.
#[test]
fn ttft_is_prefill_then_transfer_then_one_decode_step() {
    let fast = LinkConfig { bytes_per_s: 1e18, latency: Micros::ZERO };
    let ttft_with = |link| {
        let out = run(pd_config(1, 1, instance(1000, 8, 4096), spec_blackbox(), link, PdDecider::Always), one_request(1024, 8), None);
        let r = out.rec.records[0].clone();
        assert_eq!(r.outcome, Outcome::Completed);
        assert_eq!(r.instance, Some(1), "decoded on the decode instance");
        let p = r.pd.expect("disaggregated");
        assert_eq!(p.prefill_instance, 0);
        // Delivered when the prefill finished, admitted at once, scheduled when the KV landed.
        assert_eq!(r.enqueued, Some(p.prefill_finished));
        assert_eq!(r.first_scheduled, Some(p.prefill_finished + r.kv_load_wait));
        let step = r.first_token.unwrap() - r.first_scheduled.unwrap();
        // One step computing one token: β0 + β1 (6910.42 + 17.67 µs).
        assert_eq!(step, Micros(6928));
        assert_eq!(r.ttft(), Some(p.prefill_finished + r.kv_load_wait + step));
        assert_eq!(r.output_tokens, 8);
        (r.ttft().unwrap(), r.kv_load_wait, out)
    };
    let (ttft0, wait0, out) = ttft_with(fast);
    // 64 blocks of 4 KiB at 1e18 B/s: the link's 1 µs granularity.
    assert_eq!(wait0, Micros(1));
    let pd = out.cluster.pd.as_ref().unwrap();
    assert_eq!((pd.kv_transfer.count, pd.kv_transfer.blocks, pd.kv_transfer.bytes), (1, 64, 64 * 4096));
    assert_eq!((pd.requests.disaggregated, pd.requests.handed_over, pd.requests.local), (1, 1, 0));
    assert_eq!(out.run.requests.injected, 1, "one request, though it reached two instances");
    let t = Micros(5000);
    let (ttft_t, wait_t, _) = ttft_with(LinkConfig { latency: t, ..fast });
    assert_eq!(wait_t, wait0 + t);
    assert_eq!(ttft_t, ttft0 + t);
    // A slow link: 64 × 4 KiB at 1 MB/s takes 262 144 µs more.
    let (ttft_slow, _, _) = ttft_with(LinkConfig { bytes_per_s: 1e6, latency: Micros::ZERO });
    assert_eq!(ttft_slow, ttft0 + Micros(262_144) - wait0);
}

/// An idle decode engine picks a pull up as soon as it lands, async
/// scheduling or not (vLLM polls finished transfers with empty steps): the
/// hand-off, pull and first step take exactly as long either way.
#[test]
fn an_idle_decode_engine_takes_a_landed_pull_at_once_under_async_scheduling() {
    let link = LinkConfig { bytes_per_s: 1e9, latency: Micros(700) };
    let ttft = |async_scheduling: bool| {
        let mut cfg = instance(1000, 8, 4096);
        cfg.scheduler.async_scheduling = async_scheduling;
        let out = run(pd_config(1, 1, cfg, spec_blackbox(), link, PdDecider::Always), one_request(1024, 8), None);
        let r = out.rec.records[0].clone();
        assert_eq!(r.first_scheduled, Some(r.pd.expect("disaggregated").prefill_finished + r.kv_load_wait), "async {async_scheduling}");
        r.ttft().unwrap()
    };
    assert_eq!(ttft(true), ttft(false));
}

fn mixed_load(requests: u64, seed: u64) -> Vec<Request> {
    // Shared 512-token system prompts in 8 groups, so deciders and prefix scorers have something to see.
    Load { rate: 40.0, requests, prompt: 300, output: 40, prefix: 512, groups: 8, seed }.requests(None).0
}

/// Every request ends exactly once, on a decode instance or (local or
/// failed prefill) where it ran; the books of both pools balance; no decode
/// step comes before a request's KV landed; same input, same run; with and
/// without async scheduling.
#[test]
fn every_request_ends_once_and_runs_are_deterministic() {
    let link = LinkConfig { bytes_per_s: 2e9, latency: Micros(300) };
    for (decider, async_scheduling) in
        [PdDecider::Always, PdDecider::PrefixThreshold(400), PdDecider::Never].into_iter().flat_map(|d| [(d, false), (d, true)])
    {
        let cfg = || {
            let mut inst = instance(4000, 16, 2048);
            inst.scheduler.async_scheduling = async_scheduling;
            pd_config(2, 3, inst, spec_blackbox(), link, decider)
        };
        let reqs = mixed_load(400, 3);
        let a = run(cfg(), reqs.clone(), None);
        let ids: BTreeSet<u64> = a.rec.records.iter().map(|r| r.id.0).collect();
        assert_eq!((a.rec.records.len(), ids.len()), (400, 400), "{decider:?} async {async_scheduling}: every request ends exactly once");
        assert_eq!(a.run.requests.completed, 400);
        assert_eq!(a.run.requests.injected, 400);
        let pd = a.cluster.pd.as_ref().unwrap();
        assert_eq!(pd.requests.disaggregated + pd.requests.local, 400);
        assert_eq!(pd.requests.handed_over, pd.requests.disaggregated);
        assert!(pd.kv_transfer.count <= pd.requests.disaggregated);
        for r in &a.rec.records {
            assert!(r.instance.unwrap() >= 2, "a request ends on a decode instance");
            match r.pd {
                Some(p) => {
                    assert!(p.prefill_instance < 2);
                    assert!(p.prefill_enqueued <= p.prefill_scheduled && p.prefill_scheduled <= p.prefill_finished);
                    assert!(r.enqueued.unwrap() >= p.prefill_finished);
                    assert!(r.first_scheduled.unwrap() >= r.enqueued.unwrap() + r.kv_load_wait, "decoded before its KV landed");
                }
                None => assert_eq!(r.kv_load_wait, Micros::ZERO),
            }
        }
        match decider {
            PdDecider::Always => assert_eq!(pd.requests.disaggregated, 400),
            PdDecider::Never => assert_eq!((pd.requests.disaggregated, pd.prefill.batch.steps), (0, 0)),
            PdDecider::PrefixThreshold(_) => assert!(pd.requests.local > 0 && pd.requests.disaggregated > 0, "{:?}", pd.requests),
        }
        let b = run(cfg(), reqs, None);
        assert_eq!(a.rec.records, b.rec.records, "{decider:?} async {async_scheduling}: not deterministic");
        assert_eq!(a.cluster, b.cluster);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// On random pools, KV sizes (down to a few prompts' worth on either
    /// side), links, deciders and client timeouts, with and without async
    /// scheduling, every request ends exactly once and nothing is left
    /// queued or running: no pool stalls when blocks come free between its
    /// steps (a pull, a timed-out request), and no block outlives its
    /// request on either side.
    #[test]
    fn every_request_ends_under_kv_pressure(
        (prefill, decode) in (1u32..3, 1u32..4),
        (prefill_blocks, decode_blocks) in (40u64..600, 40u64..600),
        bytes_per_s in 1e5f64..1e10,
        decider in prop_oneof![Just(PdDecider::Always), Just(PdDecider::PrefixThreshold(200))],
        timeout_ms in prop::option::of(50u64..5_000),
        async_scheduling: bool,
        seed in 0u64..1_000,
    ) {
        let link = LinkConfig { bytes_per_s, latency: Micros(100) };
        let side = |blocks| {
            let mut inst = instance(blocks, 8, 2048);
            inst.scheduler.async_scheduling = async_scheduling;
            inst.client_timeout = timeout_ms.map(Micros::from_ms);
            inst
        };
        let mut c = pd_config(prefill, decode, side(decode_blocks), spec_blackbox(), link, decider);
        c.pools[0].instance = side(prefill_blocks);
        let reqs = Load { rate: 200.0, requests: 60, prompt: 300, output: 20, prefix: 256, groups: 3, seed }.requests(None).0;
        let mut cluster = blis_cluster::Cluster::new(c).unwrap();
        let mut rec = crate::harness::Recorder::default();
        let end = cluster.run(&mut blis_engine::driver::IterWorkload::new(reqs.into_iter()), None, &mut rec);
        let r = cluster.summary(&end).requests;
        prop_assert_eq!((r.queued, r.running), (0, 0), "{:?}", r);
        prop_assert_eq!(r.completed + r.dropped + r.timed_out, 60, "{:?}", r);
        let ids: BTreeSet<u64> = rec.records.iter().map(|x| x.id.0).collect();
        prop_assert_eq!((rec.records.len(), ids.len()), (60, 60));
        // No block outlives its request, pulled, timed out or dropped.
        for inst in cluster.instances() {
            prop_assert_eq!((inst.held_kv(), inst.kv().num_used_blocks()), (0, 0), "instance {} keeps blocks", inst.id());
        }
    }
}

/// A request whose prompt cannot fit the prefill instance's KV ends
/// dropped there and never reaches its decode instance.
#[test]
fn a_prefill_that_cannot_run_ends_the_request() {
    let link = LinkConfig { bytes_per_s: 1e9, latency: Micros::ZERO };
    let mut c = pd_config(1, 1, instance(4000, 8, 4096), spec_blackbox(), link, PdDecider::Always);
    c.pools[0].instance = instance(10, 8, 4096);
    let out = run(c, one_request(1024, 8), None);
    let r = &out.rec.records[0];
    assert!(matches!(r.outcome, Outcome::Dropped(_)), "{:?}", r.outcome);
    assert_eq!(r.instance, Some(0));
    let pd = out.cluster.pd.as_ref().unwrap();
    assert_eq!((pd.requests.prefill_failed, pd.requests.handed_over), (1, 0));
}

/// A prefill instance whose blocks are all held for pulls admits its next
/// prompt as soon as a pull frees some, as vLLM's engine loop would: a
/// burst that fits three prompts at a time all ends, with no later arrival
/// to wake the instance. It stalled with the burst's rest queued (until
/// 2026-11-29): a pull freed blocks between steps and no step followed.
#[test]
fn a_prefill_instance_full_of_held_blocks_resumes_when_a_pull_frees_them() {
    // 1 000-token prompts take 63 of the prefill instance's 200 blocks; a slow link holds them.
    let link = LinkConfig { bytes_per_s: 2.5e6, latency: Micros::ZERO };
    let mut c = pd_config(1, 2, instance(4000, 16, 4096), spec_blackbox(), link, PdDecider::Always);
    c.pools[0].instance = instance(200, 16, 4096);
    let burst: Vec<Request> = (0..12)
        .map(|i| Request {
            id: RequestId(i),
            arrival: Micros(0),
            prompt: TokenSeq::synthetic(100 + i, 1000),
            max_output_tokens: 8,
            output_seed: i,
            meta: RequestMeta::default(),
        })
        .collect();
    let out = run(c, burst, None);
    assert_eq!((out.run.requests.completed, out.run.requests.queued), (12, 0), "{:?}", out.run.requests);
    // Each later prefill starts when a pull (not an arrival) freed its blocks.
    let mut starts: Vec<Micros> = out.rec.records.iter().map(|r| r.pd.expect("disaggregated").prefill_scheduled).collect();
    starts.sort();
    assert!(starts[3] > Micros::ZERO && starts[11] < out.rec.records.iter().map(|r| r.finished).max().unwrap());
}

/// Long prompts stall the decodes of a monolithic instance (every prefill
/// chunk lengthens the steps the decodes share); split into a prefill and a
/// decode instance on the same two GPUs, decode ITL p99 drops, as DistServe
/// reports.
#[test]
fn disaggregation_lowers_decode_itl_under_prefill_interference() {
    let (latency, blocks) = llama_h100();
    let cfg = instance(blocks, 64, 2048);
    let reqs = Load { rate: 3.0, requests: 300, prompt: 6000, output: 200, prefix: 0, groups: 1, seed: 11 }.requests(None).0;
    let mono = run(config(2, cfg.clone(), latency.clone(), PolicyBundle::default(), Labels::default()), reqs.clone(), None);
    let link = LinkConfig { bytes_per_s: 50e9, latency: Micros(1000) };
    let pd = run(pd_config(1, 1, cfg, latency, link, PdDecider::Always), reqs, None);
    assert_eq!((mono.run.requests.completed, pd.run.requests.completed), (300, 300));
    let (m, p) = (mono.run.latency_ms.itl.p99, pd.run.latency_ms.itl.p99);
    assert!(p < 0.8 * m, "ITL p99: P/D {p:.2} ms, monolithic {m:.2} ms");
}

/// A prefill instance holds a prompt's blocks from its completion until
/// the decode instance pulled them (vLLM's `delay_free_blocks`), then keeps
/// them cached or, with `drop`, forgets them; every block is free when the
/// run ends.
#[test]
fn prefill_blocks_are_held_until_pulled_then_kept_or_dropped() {
    for keep in [true, false] {
        // A slow link: pulls outlast prefills, so blocks are held meanwhile.
        let link = LinkConfig { bytes_per_s: 1e6, latency: Micros::ZERO };
        let mut c = pd_config(1, 2, instance(4000, 16, 4096), spec_blackbox(), link, PdDecider::Always);
        c.pd.as_mut().unwrap().prefill_keeps_cache = keep;
        let mut cluster = blis_cluster::Cluster::new(c).unwrap();
        let reqs = mixed_load(40, 5);
        let mut rec = crate::harness::Recorder::default();
        // Part way: some prefills completed and are waiting for their pull.
        let mut work = blis_engine::driver::IterWorkload::new(reqs.into_iter());
        cluster.run(&mut work, Some(Micros::from_secs(1)), &mut rec);
        let prefill = &cluster.instances()[0];
        assert!(prefill.held_kv() > 0, "no prefill held its blocks for a pull");
        assert!(prefill.kv().num_used_blocks() > 0);
        cluster.run(&mut work, None, &mut rec);
        assert_eq!(rec.records.len(), 40);
        for inst in cluster.instances() {
            assert_eq!((inst.held_kv(), inst.kv().num_used_blocks()), (0, 0), "instance {} keeps blocks", inst.id());
            inst.assert_consistent();
        }
        // Kept: the prefill instance still finds the prompts it computed; dropped: none.
        let cached = cluster.instances()[0].kv().hashed_blocks();
        assert_eq!(cached > 0, keep, "keep = {keep}: {cached} cached blocks");
    }
}
