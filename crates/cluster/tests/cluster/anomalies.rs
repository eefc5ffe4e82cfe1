//! Pathological templates trigger their anomalies; sensible ones do not.

use serde_json::{Value, json};

use crate::harness::{Load, Outcome, bundle, config, instance, run, spec_blackbox};

const CLASSES: &str = "realtime:0.2,interactive:0.5,batch:0.3";

fn targets() -> Value {
    json!({"realtime": {"ttft_ms": 200}, "interactive": {"ttft_ms": 1000}, "batch": {"e2e_ms": 60000}})
}

/// Two small instances (8 seats each) near saturation, so queues form and drain.
fn contended(policies: Value) -> Outcome {
    let mut doc = policies;
    doc["slo_targets"] = targets();
    let (requests, labels) =
        Load { rate: 30.0, requests: 1500, prompt: 256, output: 64, prefix: 0, groups: 1, seed: 3 }.requests(Some(CLASSES));
    run(config(2, instance(5000, 8, 2048), spec_blackbox(), bundle(doc), labels), requests, None)
}

#[test]
fn reject_all_rejects_every_request() {
    let o = contended(json!({"admission": "reject-all"}));
    let r = &o.cluster.requests;
    assert_eq!((r.arrived, r.rejected, r.admitted, r.injected), (1500, 1500, 0, 0));
    assert_eq!(r.rejected_by_reason["reject_all"], 1500);
    assert_eq!(o.cluster.anomalies.rejections, 1500);
    assert_eq!(o.run.requests.completed, 0);
    assert_eq!(o.cluster.goodput.slo_attainment, 0.0);
    assert!(o.cluster.slo_classes.values().all(|c| c.rejected == c.arrived));
}

#[test]
fn always_admit_rejects_nothing() {
    let o = contended(json!({"admission": "always-admit"}));
    assert_eq!(o.cluster.anomalies.rejections, 0);
    assert_eq!(o.run.requests.completed, 1500);
}

#[test]
fn urgency_ordered_priorities_cause_no_inversions_and_inverted_ones_cause_many() {
    let sensible = contended(json!({"priority": "slo-class", "scheduler": "priority-fcfs"}));
    let inverted = contended(json!({"priority": "inverted-slo", "scheduler": "priority-fcfs"}));
    let reversed = contended(json!({"priority": "slo-class", "scheduler": "reverse-priority"}));
    let fcfs = contended(json!({}));
    let inv = |o: &Outcome| o.cluster.anomalies.priority_inversions;
    eprintln!(
        "priority inversions: slo-class+priority-fcfs {}, inverted-slo {}, reverse-priority {}, fcfs {}",
        inv(&sensible),
        inv(&inverted),
        inv(&reversed),
        inv(&fcfs)
    );
    assert_eq!(inv(&sensible), 0);
    // Many: at least a fifth of all requests started ahead of a more urgent waiting one.
    assert!(inv(&inverted) >= 300, "inverted-slo: {}", inv(&inverted));
    assert!(inv(&reversed) >= 300, "reverse-priority: {}", inv(&reversed));
    // FCFS ignores classes, so it inverts some, but fewer than a policy that inverts on purpose.
    assert!(inv(&fcfs) > 0 && inv(&fcfs) < inv(&inverted));
    // Inverting priorities hurts the most urgent class.
    let rt_p99 = |o: &Outcome| o.cluster.slo_classes["realtime"].latency_ms.ttft.p99;
    assert!(rt_p99(&inverted) > 2.0 * rt_p99(&sensible), "{} vs {}", rt_p99(&inverted), rt_p99(&sensible));
}

#[test]
fn always_busiest_piles_requests_on_one_instance_and_blocks_the_head_of_the_line() {
    // Four instances, well below saturation when balanced.
    let load = Load { rate: 60.0, requests: 1200, prompt: 256, output: 64, prefix: 0, groups: 1, seed: 8 };
    let go = |routing: &str| {
        let (requests, labels) = load.requests(None);
        run(config(4, instance(5000, 8, 2048), spec_blackbox(), bundle(json!({"routing": routing})), labels), requests, None)
    };
    let (busiest, least) = (go("always-busiest"), go("least-loaded"));
    let (b, l) = (&busiest.cluster, &least.cluster);
    eprintln!(
        "imbalance busiest {:.2} least {:.2}; HOL busiest {} least {}",
        b.load_balance.imbalance_max_over_mean,
        l.load_balance.imbalance_max_over_mean,
        b.anomalies.hol_blocking_events,
        l.anomalies.hol_blocking_events
    );
    assert!(b.load_balance.imbalance_max_over_mean > 3.5, "{:?}", b.load_balance);
    assert!(l.load_balance.imbalance_max_over_mean < 1.1, "{:?}", l.load_balance);
    assert!(b.anomalies.hol_blocking_events >= 600, "{}", b.anomalies.hol_blocking_events);
    assert!(l.anomalies.hol_blocking_events * 20 <= b.anomalies.hol_blocking_events);
    assert!(busiest.run.latency_ms.ttft.p99 > 5.0 * least.run.latency_ms.ttft.p99);
}
