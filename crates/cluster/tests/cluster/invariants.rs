//! Invariants over random clusters (disaggregated or not), policies and
//! workloads: request conservation, one record per request, and determinism.

use blis_engine::kv::transfer::{KvTransferConfig, LinkConfig};
use blis_engine::request::{Labels, Outcome as RequestOutcome};
use blis_engine::time::Micros;
use blis_workload::labels::{LabelMix, Mix};
use proptest::prelude::*;
use serde_json::json;

use crate::harness::{Load, always, bundle, instance, pd_fleet, run, spec_blackbox};

fn policies() -> impl Strategy<Value = serde_json::Value> {
    let admission = prop_oneof![
        Just(json!("always-admit")),
        Just(json!("reject-all")),
        Just(json!({"type": "token-bucket", "params": {"capacity": 5, "refill_per_s": 20, "per_tenant": true}})),
        Just(json!({"type": "rate-limit", "params": {"max_requests": 10, "window_ms": 500}})),
        Just(
            json!({"type": "token-bucket", "params": {"capacity": 3, "refill_per_s": 30, "per_tenant": true, "on_limit": "delay", "max_delay_ms": 300}})
        ),
        Just(json!({"type": "rate-limit", "params": {"max_requests": 10, "window_ms": 200, "on_limit": "delay"}})),
        Just(json!({"type": "tenant-quota", "params": {"default_max_in_flight": 4}})),
        Just(json!({"type": "slo-gated", "params": {"max_queue_depth": 2, "exempt": ["realtime"]}})),
        Just(json!({"type": "predictive-slo", "params": {"exempt": ["realtime"]}})),
    ];
    let priority = prop_oneof![Just("constant"), Just("slo-class"), Just("tenant-priority"), Just("deadline-aware"), Just("inverted-slo")];
    let routing = prop_oneof![
        Just(json!("round-robin")),
        Just(json!("least-loaded")),
        Just(json!("always-busiest")),
        Just(json!("vllm-dp")),
        Just(json!("prefix-affinity")),
        Just(
            json!({"type": "weighted", "params": {"scorers": {"prefix-affinity": 2, "precise-prefix": 1, "queue-depth": 3, "kv-utilization": 1, "load-balance": 1, "active-requests": 1}}})
        ),
    ];
    let scheduler = prop_oneof![Just("fcfs"), Just("priority-fcfs"), Just("sjf"), Just("reverse-priority")];
    let refresh = prop_oneof![Just("immediate"), Just("on-demand"), Just("periodic:3ms"), Just("periodic:40ms")];
    (admission, priority, routing, scheduler, refresh.clone(), refresh).prop_map(|(a, p, r, s, q, kv)| {
        json!({
            "admission": a, "priority": p, "routing": r, "scheduler": s,
            "slo_targets": {"realtime": {"ttft_ms": 100}, "interactive": {"ttft_ms": 1000, "itl_ms": 50}, "batch": {"e2e_ms": 20000}},
            "snapshots": {"queue_depth": q, "batch_size": q, "kv_utilization": kv},
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn requests_are_conserved_and_runs_are_deterministic(
        doc in policies(),
        n in 1u32..=5,
        admission_latency_us in prop_oneof![Just(0u64), 0u64..3_000],
        routing_latency_us in prop_oneof![Just(0u64), 0u64..3_000],
        horizon_ms in prop::option::of(200u64..3_000),
        timeout_ms in prop::option::of(300u64..3_000),
        seed in 0u64..1_000,
        blocks in prop_oneof![Just(60u64), Just(4000u64)],
        async_scheduling in any::<bool>(),
        // Prefill/decode disaggregation: prefill instances, the pull's bytes/s, prefill keeps its cache.
        pd in prop::option::of((1u32..3, 1e5f64..1e10, any::<bool>())),
    ) {
        let load = Load { rate: 80.0, requests: 120, prompt: 200, output: 24, prefix: 64, groups: 3, seed };
        let mix = LabelMix {
            tenants: Some(Mix::parse("tenant-mix", "alice:1,bob:2").unwrap()),
            slo_classes: Some(Mix::parse("slo-class-mix", "realtime:1,interactive:1,batch:1").unwrap()),
        };
        let mut labels = Labels::default();
        mix.name_into(&mut labels);
        let requests: Vec<_> = mix.apply(load.spec().generate(), seed).collect();
        let mut inst = instance(blocks, 4, 256);
        inst.client_timeout = timeout_ms.map(Micros::from_ms);
        inst.scheduler.async_scheduling = async_scheduling;
        let mut decode = inst.clone();
        decode.kv_transfer = pd.map(|(_, bytes_per_s, _)| KvTransferConfig { link: LinkConfig { bytes_per_s, latency: Micros(100) }, block_bytes: 4096 });
        let mut cfg = match pd {
            None => crate::harness::config(n, decode, spec_blackbox(), bundle(doc), labels),
            Some((prefill, _, keep)) => pd_fleet((prefill, inst), (n, decode), spec_blackbox(), always(keep), (bundle(doc), labels)),
        };
        cfg.admission_latency = Micros(admission_latency_us);
        cfg.routing_latency = Micros(routing_latency_us);
        cfg.counterfactual_k = 2;
        let horizon = horizon_ms.map(Micros::from_ms);
        let a = run(cfg.clone(), requests.clone(), horizon);
        let b = run(cfg, requests, horizon);

        let r = &a.cluster.requests;
        prop_assert!(r.arrived <= 120);
        prop_assert_eq!(r.arrived, r.rejected + r.in_control_plane + r.injected, "{:?}", r);
        // In the control plane: awaiting admission, or admitted and awaiting delivery.
        prop_assert!(r.injected <= r.admitted && r.admitted <= r.injected + r.in_control_plane, "{:?}", r);
        prop_assert_eq!(r.injected, r.completed + r.queued + r.running + r.dropped + r.timed_out, "{:?}", r);
        // A disaggregated request reaches a prefill and a decode instance.
        let handed_over = a.cluster.pd.as_ref().map_or(0, |p| p.requests.handed_over);
        prop_assert_eq!(a.cluster.load_balance.requests_per_instance.iter().sum::<u64>(), r.injected + handed_over);
        // One record per request that ended, none twice.
        let mut ids: Vec<u64> = a.rec.records.iter().map(|x| x.id.0).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), a.rec.records.len());
        prop_assert_eq!(a.rec.records.len() as u64, r.completed + r.dropped + r.timed_out + r.rejected);
        // A rejected request's record names no instance, and only it.
        for x in &a.rec.records {
            prop_assert_eq!(matches!(x.outcome, RequestOutcome::Rejected(_)), x.instance.is_none(), "{:?}", x);
        }
        prop_assert!(a.rec.records.iter().all(|x| x.outcome != RequestOutcome::Completed || x.output_tokens >= 1));
        if horizon.is_none() {
            prop_assert_eq!(r.arrived, 120);
            prop_assert_eq!(r.in_control_plane + r.queued + r.running, 0);
            // Every request that arrived ended exactly once.
            prop_assert_eq!(a.rec.records.len(), 120);
        }
        // Per-class counts add up.
        prop_assert_eq!(a.cluster.slo_classes.values().map(|c| c.arrived).sum::<u64>(), r.arrived);
        prop_assert_eq!(a.cluster.tenants.values().map(|c| c.rejected).sum::<u64>(), r.rejected);
        // Same inputs, same everything.
        prop_assert_eq!(serde_json::to_string(&a.cluster).unwrap(), serde_json::to_string(&b.cluster).unwrap());
        prop_assert_eq!(&a.rec.records, &b.rec.records);
        prop_assert_eq!(a.decisions.routed_to, b.decisions.routed_to);
    }
}

#[test]
fn eight_instances_are_deterministic_to_the_byte() {
    let go = || {
        let (requests, labels) =
            Load { rate: 300.0, requests: 2000, prompt: 512, output: 64, prefix: 256, groups: 8, seed: 21 }.requests(Some("a:1,b:1"));
        let doc = json!({"routing": {"type": "weighted", "params": {"scorers": {"prefix-affinity": 4, "queue-depth": 3}}}, "snapshots": {"kv_utilization": "periodic:10ms"}});
        let mut cfg = crate::harness::config(8, instance(3000, 32, 2048), spec_blackbox(), bundle(doc), labels);
        cfg.counterfactual_k = 3;
        cfg.routing_latency = Micros(150);
        let o = run(cfg, requests, None);
        (serde_json::to_string(&o.run).unwrap() + &serde_json::to_string(&o.cluster).unwrap(), o)
    };
    let (a, oa) = go();
    let (b, _) = go();
    assert_eq!(a, b);
    assert_eq!(oa.run.requests.completed, 2000);
    assert!(oa.cluster.load_balance.requests_per_instance.iter().all(|&n| n > 0), "every instance is used");
}
