//! Online routing: staleness, prefix affinity, tie-breaking, the router's own counts.

use blis_engine::request::{Request, RequestId, RequestMeta, TokenSeq};
use blis_engine::time::Micros;
use serde_json::json;

use blis_cluster::snapshot::InstanceSnapshot;

use crate::harness::{Load, Outcome, bundle, config, instance, llama_h100, run, spec_blackbox};

#[test]
fn stale_snapshots_measurably_change_least_loaded_routing() {
    let load = Load { rate: 250.0, requests: 3000, prompt: 512, output: 128, prefix: 0, groups: 1, seed: 4 };
    let go = |refresh: &str| {
        let (requests, labels) = load.requests(None);
        let doc = json!({"routing": "least-loaded", "snapshots": {"queue_depth": refresh, "batch_size": refresh}});
        run(config(8, instance(8000, 64, 4096), spec_blackbox(), bundle(doc), labels), requests, None)
    };
    let (fresh, stale) = (go("immediate"), go("periodic:100ms"));
    let differ = fresh.decisions.routed_to.iter().zip(&stale.decisions.routed_to).filter(|(a, b)| a != b).count();
    let hol = |o: &Outcome| o.cluster.anomalies.hol_blocking_events;
    let p99 = |o: &Outcome| o.run.latency_ms.ttft.p99;
    eprintln!(
        "decisions that differ: {differ} of 3000; HOL fresh {} stale {}; TTFT p99 fresh {:.1} stale {:.1} ms",
        hol(&fresh),
        hol(&stale),
        p99(&fresh),
        p99(&stale)
    );
    assert!(differ > 1000, "only {differ} of 3000 decisions changed");
    // Between refreshes every request goes to the instance that looked least loaded
    // at the last scrape: herding, so queues form next to idle instances.
    assert!(hol(&stale) > 5 * hol(&fresh).max(1), "HOL fresh {} stale {}", hol(&fresh), hol(&stale));
    assert!(p99(&stale) > 1.5 * p99(&fresh), "TTFT p99 fresh {} stale {}", p99(&fresh), p99(&stale));
}

/// 8 instances, 64 system prompts of 2048 tokens: more than one instance's
/// cache holds, but an eighth of them fits.
fn prefix_heavy(routing: serde_json::Value) -> Outcome {
    let (latency, _) = llama_h100();
    let load = Load { rate: 200.0, requests: 4000, prompt: 128, output: 64, prefix: 2048, groups: 64, seed: 9 };
    let (requests, labels) = load.requests(None);
    run(config(8, instance(6000, 128, 8192), latency, bundle(json!({ "routing": routing })), labels), requests, None)
}

#[test]
fn prefix_affinity_raises_the_cluster_cache_hit_rate_over_round_robin() {
    let rr = prefix_heavy(json!("round-robin"));
    let pa = prefix_heavy(json!("prefix-affinity"));
    let weighted = prefix_heavy(json!({"type": "weighted", "params": {"scorers": {"prefix-affinity": 4, "queue-depth": 3}}}));
    let hit = |o: &Outcome| o.run.kv_cache.prefix_hit_rate;
    eprintln!("hit rate: round-robin {:.3}, prefix-affinity {:.3}, weighted {:.3}", hit(&rr), hit(&pa), hit(&weighted));
    assert!(hit(&pa) > hit(&rr) + 0.2, "round-robin {} prefix-affinity {}", hit(&rr), hit(&pa));
    assert!(hit(&weighted) > hit(&rr) + 0.2, "round-robin {} weighted {}", hit(&rr), hit(&weighted));
    // Fewer prefill tokens make first tokens faster.
    assert!(weighted.run.latency_ms.ttft.p50 < rr.run.latency_ms.ttft.p50);
}

fn burst(n: u64) -> Vec<Request> {
    (0..n)
        .map(|i| Request {
            id: RequestId(i),
            arrival: Micros(1000),
            prompt: TokenSeq::synthetic(i, 64),
            max_output_tokens: 4,
            output_seed: i,
            meta: RequestMeta::default(),
        })
        .collect()
}

#[test]
fn equal_scores_go_to_the_lowest_instance_id() {
    for routing in [
        json!("least-loaded"),
        json!("prefix-affinity"),
        json!({"type": "weighted", "params": {"scorers": {"load-balance": 1, "kv-utilization": 1}}}),
    ] {
        // Requests one at a time, each finished before the next: every decision sees idle, equal instances.
        let requests: Vec<Request> = (0..5)
            .map(|i| Request {
                id: RequestId(i),
                arrival: Micros::from_secs(i),
                prompt: TokenSeq::synthetic(100 + i, 64),
                max_output_tokens: 2,
                output_seed: i,
                meta: RequestMeta::default(),
            })
            .collect();
        let o = run(
            config(4, instance(500, 8, 512), spec_blackbox(), bundle(json!({ "routing": routing.clone() })), Default::default()),
            requests,
            None,
        );
        assert_eq!(o.decisions.routed_to, [0, 0, 0, 0, 0], "{routing}");
    }
}

#[test]
fn the_router_counts_what_it_dispatched_even_before_instances_see_it() {
    // Eight simultaneous requests, 2 ms of routing latency: the instances see
    // nothing until every decision is made, but the router's pending counts
    // spread the burst evenly.
    let mut cfg = config(4, instance(500, 8, 512), spec_blackbox(), bundle(json!({"routing": "least-loaded"})), Default::default());
    cfg.routing_latency = Micros(2000);
    let o = run(cfg, burst(8), None);
    assert_eq!(o.decisions.routed_to, [0, 1, 2, 3, 0, 1, 2, 3]);
    // The first token cannot come before arrival + routing latency + a step.
    assert!(o.rec.records.iter().all(|r| r.first_token.unwrap() > Micros(1000 + 2000 + 6910)));
}

#[test]
fn always_busiest_sends_a_burst_to_one_instance() {
    let o = run(
        config(4, instance(500, 8, 512), spec_blackbox(), bundle(json!({"routing": "always-busiest"})), Default::default()),
        burst(8),
        None,
    );
    assert_eq!(o.decisions.routed_to, [0; 8]);
}

/// vLLM's data-parallel load balancer, re-derived from each decision's
/// trace: the router's unseen counts are the requests it sent each
/// instance after the last 100 ms reading of its queue (the refresh at
/// `k·100 ms`, k ≥ 1, sees everything routed at that instant; the first
/// reading is taken before anything happens), and every decision
/// is the smallest 4·(queue + unseen) + running, the lowest id among
/// equals. Least-loaded on the same stale readings decides differently.
#[test]
fn vllm_dp_balances_on_stale_counts_plus_what_it_sent_since() {
    let load = Load { rate: 250.0, requests: 3000, prompt: 512, output: 128, prefix: 0, groups: 1, seed: 4 };
    let go = |routing: &str| {
        let (requests, labels) = load.requests(None);
        let doc = json!({"routing": routing, "snapshots": {"queue_depth": "periodic:100ms", "batch_size": "periodic:100ms"}});
        run(config(8, instance(8000, 64, 4096), spec_blackbox(), bundle(doc), labels), requests, None)
    };
    let (dp, least) = (go("vllm-dp"), go("least-loaded"));
    let d = &dp.decisions;
    let unseen = |sent: Micros, now: Micros| match (now.0 - 1) / 100_000 * 100_000 {
        0 => true,
        reading => sent.0 > reading,
    };
    for (k, (snaps, &(_, t))) in d.snapshots.iter().zip(&d.routed_at).enumerate() {
        for s in snaps {
            let sent_since = (0..k).filter(|&j| d.routed_to[j] == s.instance && unseen(d.routed_at[j].1, t)).count() as u32;
            assert_eq!(s.routed_unseen, sent_since, "decision {k} at {t:?}, instance {}", s.instance);
        }
        let score = |s: &InstanceSnapshot| 4 * (s.queue_depth + s.routed_unseen) + s.batch_size;
        let best = snaps.iter().min_by_key(|s| (score(s), s.instance)).unwrap();
        assert_eq!(d.routed_to[k], best.instance, "decision {k}");
    }
    let differ = d.routed_to.iter().zip(&least.decisions.routed_to).filter(|(a, b)| a != b).count();
    assert!(differ > 1000, "only {differ} of 3000 decisions differ from least-loaded's");
    // Counting what it sent since the last reading, it does not herd as least-loaded does.
    let hol = |o: &Outcome| o.cluster.anomalies.hol_blocking_events;
    assert!(hol(&dp) * 5 < hol(&least), "HOL vllm-dp {} least-loaded {}", hol(&dp), hol(&least));
}

#[test]
fn vllm_dp_spreads_a_burst_its_stale_readings_do_not_see() {
    let doc = json!({"routing": "vllm-dp", "snapshots": {"queue_depth": "periodic:100ms", "batch_size": "periodic:100ms"}});
    let o = run(config(4, instance(500, 8, 512), spec_blackbox(), bundle(doc), Default::default()), burst(8), None);
    assert_eq!(o.decisions.routed_to, [0, 1, 2, 3, 0, 1, 2, 3]);
}
