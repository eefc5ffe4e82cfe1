//! Admission and priority templates do what they say.

use blis_engine::request::{Request, RequestId, RequestMeta, TokenSeq};
use blis_engine::time::Micros;
use blis_workload::synthetic::ArrivalProcess;
use serde_json::{Value, json};

use crate::harness::{Load, Outcome, bundle, config, instance, run, spec_blackbox};

fn constant(rate: f64, requests: u64, classes: &str, policies: Value) -> Outcome {
    let load = Load { rate, requests, prompt: 64, output: 4, prefix: 0, groups: 1, seed: 1 };
    let mut spec = load.spec();
    spec.arrival = ArrivalProcess::Constant;
    let mix = blis_workload::labels::LabelMix {
        tenants: Some(blis_workload::labels::Mix::parse("tenant-mix", "a:1,b:1").unwrap()),
        slo_classes: Some(blis_workload::labels::Mix::parse("slo-class-mix", classes).unwrap()),
    };
    let mut labels = Default::default();
    mix.name_into(&mut labels);
    let requests = mix.apply(spec.generate(), 1).collect();
    run(config(2, instance(2000, 64, 4096), spec_blackbox(), bundle(policies), labels), requests, None)
}

#[test]
fn token_bucket_admits_its_capacity_plus_the_refill() {
    // 100 req/s for 10 s into a bucket of 10 refilled at 20/s: 10 + 20 · 9.99 ≈ 209.8 tokens.
    let o = constant(100.0, 1000, "x:1", json!({"admission": {"type": "token-bucket", "params": {"capacity": 10, "refill_per_s": 20}}}));
    let admitted = o.cluster.requests.admitted;
    assert!((208..=210).contains(&admitted), "{admitted}");
    assert_eq!(o.cluster.requests.rejected_by_reason["token_bucket_empty"], 1000 - admitted);
}

#[test]
fn rate_limit_admits_at_most_max_requests_per_window() {
    // 100 req/s, 10 ms apart, for 5 s; 30 per sliding second: 30 at the start of each second.
    let o = constant(100.0, 500, "x:1", json!({"admission": {"type": "rate-limit", "params": {"max_requests": 30, "window_ms": 1000}}}));
    assert_eq!(o.cluster.requests.admitted, 150);
    assert_eq!(o.cluster.requests.rejected_by_reason["rate_limited"], 350);
}

/// (arrival, routing time) of every routed request, in arrival order.
fn holds(o: &Outcome) -> Vec<(Micros, Micros)> {
    let arrival: std::collections::BTreeMap<u64, Micros> = o.rec.records.iter().map(|r| (r.id.0, r.arrival)).collect();
    let mut v: Vec<(Micros, Micros)> = o.decisions.routed_at.iter().map(|&(id, t)| (arrival[&id], t)).collect();
    v.sort();
    v
}

#[test]
fn a_shaping_token_bucket_releases_each_request_when_its_token_arrives() {
    // 100 req/s, 10 ms apart, into a bucket of 10 refilled at 20/s, every
    // request held rather than rejected. Reference: the bucket counted in
    // token-microseconds (one token = 50 000), exact in integers; a request
    // that finds less than one token reserves it and leaves when it has
    // refilled, in arrival order.
    let o = constant(
        100.0,
        200,
        "x:1",
        json!({"admission": {"type": "token-bucket", "params": {"capacity": 10, "refill_per_s": 20, "on_limit": "delay"}}}),
    );
    assert_eq!(o.cluster.requests.admitted, 200);
    assert_eq!(o.cluster.requests.rejected, 0);
    let (token, capacity) = (50_000i64, 10 * 50_000i64);
    let (mut tokens, mut last) = (capacity, 0i64);
    let mut delayed = 0;
    for (arrival, routed) in holds(&o) {
        let now = arrival.0 as i64;
        tokens = (tokens + now - last).min(capacity);
        last = now;
        let wait = (token - tokens).max(0);
        tokens -= token;
        assert_eq!(routed.0 as i64, now + wait, "arrival {arrival}");
        delayed += u64::from(wait > 0);
    }
    assert_eq!(o.cluster.requests.delayed, delayed);
    let d = o.cluster.requests.admission_delay_ms.as_ref().unwrap();
    // The last of 200 requests (sent at 1990 ms) leaves at (200 − 10)·50 ms.
    assert!((d.max - (9500.0 - 1990.0)).abs() < 0.01, "{d:?}");
}

#[test]
fn a_shaping_rate_limit_never_lets_more_than_max_requests_into_a_window() {
    // 100 req/s for 3 s; 30 per sliding second, held up to 2 s.
    let o = constant(
        100.0,
        300,
        "x:1",
        json!({"admission": {"type": "rate-limit", "params": {"max_requests": 30, "window_ms": 1000, "on_limit": "delay", "max_delay_ms": 2000}}}),
    );
    let holds = holds(&o);
    let routed: Vec<Micros> = holds.iter().map(|h| h.1).collect();
    assert!(routed.windows(2).all(|w| w[0] <= w[1]), "released out of arrival order");
    for (k, &t) in routed.iter().enumerate() {
        // Every window (t − 1 s, t] holds at most 30 releases …
        let in_window = routed[..=k].iter().filter(|&&u| u + Micros::from_secs(1) > t).count();
        assert!(in_window <= 30, "{in_window} releases in the second before {t}");
        // … and a held request leaves exactly when the 30th-latest release ages out.
        if t > holds[k].0 {
            assert_eq!(t, routed[k - 30] + Micros::from_secs(1));
        }
    }
    assert!(holds.iter().all(|&(a, r)| r - a <= Micros::from_secs(2)));
    // Admitted: the releases fit in [0, 3 s + 2 s): 30 per second.
    assert_eq!(o.cluster.requests.admitted, 150);
    assert_eq!(o.cluster.requests.rejected_by_reason["rate_limited"], 150);
    assert_eq!(o.cluster.requests.admitted, o.cluster.requests.completed);
}

#[test]
fn a_shaping_limit_rejects_what_it_would_hold_too_long() {
    let o = constant(
        100.0,
        300,
        "x:1",
        json!({"admission": {"type": "token-bucket", "params": {"capacity": 1, "refill_per_s": 10, "on_limit": "delay", "max_delay_ms": 500}}}),
    );
    let r = &o.cluster.requests;
    assert!(r.rejected_by_reason["token_bucket_empty"] > 0 && r.delayed > 0, "{r:?}");
    assert!(holds(&o).iter().all(|&(a, t)| t - a <= Micros::from_ms(500)));
    assert!(r.admission_delay_ms.as_ref().unwrap().max <= 500.0);
}

#[test]
fn tenant_quota_caps_a_tenants_requests_in_flight() {
    let o = constant(400.0, 800, "x:1", json!({"admission": {"type": "tenant-quota", "params": {"max_in_flight": {"a": 2}}}}));
    let a = &o.cluster.tenants["a"];
    assert!(a.rejected > 0 && o.cluster.tenants["b"].rejected == 0);
    // At no instant were more than two of tenant a's requests between admission and finish.
    let mut events: Vec<(Micros, i32)> =
        o.rec.records.iter().filter(|r| r.meta.tenant.0 == 0).flat_map(|r| [(r.arrival, 1), (r.finished, -1)]).collect();
    events.sort();
    let peak = events
        .iter()
        .scan(0, |n, e| {
            *n += e.1;
            Some(*n)
        })
        .max()
        .unwrap();
    assert!(peak <= 2, "peak {peak}");
}

#[test]
fn slo_gated_never_gates_exempt_classes() {
    let o = constant(
        3000.0,
        3000,
        "gold:1,bronze:1",
        json!({"admission": {"type": "slo-gated", "params": {"max_queue_depth": 4, "exempt": ["gold"]}}}),
    );
    let (gold, bronze) = (&o.cluster.slo_classes["gold"], &o.cluster.slo_classes["bronze"]);
    assert_eq!(gold.rejected, 0);
    assert!(bronze.rejected > bronze.arrived / 4, "{bronze:?}");
    assert_eq!(o.cluster.requests.rejected_by_reason["queue_depth_over_threshold"], bronze.rejected);
}

/// One seat, four requests queued behind a long one: the order they start in.
fn start_order(policies: Value, metas: [RequestMeta; 4]) -> Vec<u64> {
    let mut requests = vec![Request {
        id: RequestId(0),
        arrival: Micros(0),
        prompt: TokenSeq::synthetic(0, 64),
        max_output_tokens: 50,
        output_seed: 0,
        meta: RequestMeta::default(),
    }];
    for (i, meta) in metas.into_iter().enumerate() {
        let id = i as u64 + 1;
        requests.push(Request {
            id: RequestId(id),
            arrival: Micros(1000 + id),
            prompt: TokenSeq::synthetic(id, 64),
            max_output_tokens: 2,
            output_seed: id,
            meta,
        });
    }
    let labels = blis_engine::request::Labels {
        tenants: vec!["t0".into(), "t1".into()],
        slo_classes: vec!["c0".into(), "c1".into()],
        ..Default::default()
    };
    let o = run(config(1, instance(500, 1, 512), spec_blackbox(), bundle(policies), labels), requests, None);
    let mut started: Vec<_> = o.rec.records.iter().filter(|r| r.id.0 > 0).map(|r| (r.first_scheduled.unwrap(), r.id.0)).collect();
    started.sort();
    started.into_iter().map(|s| s.1).collect()
}

#[test]
fn deadline_aware_priority_serves_the_earliest_deadline_first() {
    let deadline = |ms| RequestMeta { deadline: Some(Micros::from_ms(ms)), ..RequestMeta::default() };
    let order = start_order(
        json!({"priority": "deadline-aware", "scheduler": "priority-fcfs"}),
        [deadline(900), deadline(300), deadline(600), deadline(100)],
    );
    assert_eq!(order, [4, 2, 3, 1]);
    // Without a deadline, arrival + the class's slack: c1 has 50 ms, c0 the 10 s default.
    let class = |c| RequestMeta { slo_class: blis_engine::request::SloClassId(c), ..RequestMeta::default() };
    let doc = json!({"priority": {"type": "deadline-aware", "params": {"slack_ms": {"c1": 50}}}, "scheduler": "priority-fcfs"});
    assert_eq!(start_order(doc, [class(0), class(1), class(0), class(1)]), [2, 4, 1, 3]);
}

#[test]
fn tenant_priority_and_fcfs_order_the_queue_as_configured() {
    let tenant = |t| RequestMeta { tenant: blis_engine::request::TenantId(t), ..RequestMeta::default() };
    let metas = [tenant(0), tenant(1), tenant(0), tenant(1)];
    let doc = json!({"priority": {"type": "tenant-priority", "params": {"scores": {"t1": 5}}}, "scheduler": "priority-fcfs"});
    assert_eq!(start_order(doc, metas), [2, 4, 1, 3]);
    assert_eq!(start_order(json!({"priority": {"type": "tenant-priority", "params": {"scores": {"t1": 5}}}}), metas), [1, 2, 3, 4]);
    assert_eq!(
        start_order(
            json!({"priority": {"type": "tenant-priority", "params": {"scores": {"t1": 5}}}, "scheduler": "reverse-priority"}),
            metas
        ),
        [1, 3, 2, 4]
    );
}

#[test]
fn unknown_labels_in_parameters_are_rejected_with_their_path() {
    let labels = blis_engine::request::Labels { slo_classes: vec!["gold".into()], ..Default::default() };
    let cfg = config(
        1,
        instance(500, 8, 512),
        spec_blackbox(),
        bundle(json!({"priority": {"type": "slo-class", "params": {"scores": {"silver": 1}}}})),
        labels,
    );
    let e = blis_cluster::Cluster::new(cfg).err().unwrap().to_string();
    assert!(e.starts_with("priority.params.scores.silver: unknown SLO class `silver`") && e.contains("gold"), "{e}");
}

/// The predictive-admission experiment (predictive-slo-admission.md, matrix
/// rows 2 and 3). Workload: 8 instances, 2000 req/s (Poisson), 3000 requests,
/// critical/standard/sheddable in equal shares independent of the prefix
/// group (the "orthogonal" workload), a 512-token system prompt from 8 groups
/// plus 256 private tokens (the study's "~11 ms with cache, ~20 ms without"
/// prefill), 128 output tokens. Deployment: the study's Llama-3.1-8B blackbox
/// coefficients (α = 1601.35, 3.51, 1805.54; β = 6910.42, 17.67, 2.84) with
/// 132,139 KV blocks, 256 seats, 2048 tokens per step (BLIS's defaults).
/// Control plane: routing pa:4,qd:3, priority-fcfs, slo-class priority
/// (critical 100, standard 50, sheddable 10); TTFT targets = the spec's
/// budgets (critical 200 ms, standard 500 ms, sheddable 300 ms); critical is
/// never shed. slo-gated uses the reference thresholds (reject standard at a
/// longest queue ≥ 10, sheddable ≥ 5); predictive-slo its defaults (budget =
/// target, headroom 1, estimate calibrated on the latency model).
pub fn spec_experiment(admission: Value, seed: u64) -> Outcome {
    let load = Load { rate: 2000.0, requests: 3000, prompt: 256, output: 128, prefix: 512, groups: 8, seed };
    let (requests, labels) = load.requests(Some("critical:1,standard:1,sheddable:1"));
    let doc = json!({
        "admission": admission,
        "priority": {"type": "slo-class", "params": {"scores": {"critical": 100, "standard": 50, "sheddable": 10}}},
        "routing": {"type": "weighted", "params": {"scorers": {"prefix-affinity": 4, "queue-depth": 3}}},
        "scheduler": "priority-fcfs",
        "slo_targets": {"critical": {"ttft_ms": 200}, "standard": {"ttft_ms": 500}, "sheddable": {"ttft_ms": 300}},
    });
    let latency = std::sync::Arc::new(blis_engine::latency::Blackbox { alpha: [1601.35, 3.51, 1805.54], beta: [6910.42, 17.67, 2.84] });
    run(config(8, instance(132_139, 256, 2048), latency, bundle(doc), labels), requests, None)
}

/// H14-1 of the study: predictive-slo admits more requests than slo-gated
/// *at the same critical p99 TTFT*. With its default headroom (1.0) it
/// admits ~20 % more but at ~8× the critical p99: the wait estimate (one
/// light step per queued request) is blind to the long steps of a saturated
/// instance. So the comparison is made at equal critical p99, as the
/// hypothesis states: the headroom is lowered along a fixed grid until the
/// critical p99 is within 10 % of slo-gated's, and the admitted counts are
/// compared there. Measured (seeds 1–3, numbers printed with `--nocapture`
/// and quoted in docs/cluster.md): +3 %, +3 % and −19 % admitted, with
/// lower goodput every time. The critical p99 has a cliff near ~2,050
/// admitted requests that both policies hit; below it predictive-slo's
/// estimate sheds as much as slo-gated's queue gate. The grid and the 10 %
/// tolerance are the experiment's definition, not tuned to the outcome. The
/// test pins the finding that the hypothesis's "30–40 % more" does not hold
/// here: if a change makes it hold, this fails and the docs need updating.
#[test]
fn predictive_slo_vs_slo_gated_at_the_same_critical_p99_ttft() {
    const HEADROOM_GRID: [f64; 6] = [1.0, 0.25, 0.1, 0.06, 0.04, 0.03];
    let critical_p99 = |o: &Outcome| o.cluster.slo_classes["critical"].latency_ms.ttft.p99;
    let describe = |name: &str, o: &Outcome| {
        let c = &o.cluster;
        format!(
            "{name:>22}: admitted {:>4}/3000, critical TTFT p99 {:>6.1} ms, goodput {:>5.1} req/s",
            c.requests.admitted,
            critical_p99(o),
            c.goodput.requests_per_s
        )
    };
    for seed in [1, 2, 3] {
        let gated = spec_experiment(
            json!({"type": "slo-gated", "params": {"by_class": {"standard": 9, "sheddable": 4}, "exempt": ["critical"]}}),
            seed,
        );
        eprintln!("seed {seed} {}", describe("slo-gated", &gated));
        let target = 1.1 * critical_p99(&gated);
        let mut matched = None;
        for headroom in HEADROOM_GRID {
            let p = spec_experiment(json!({"type": "predictive-slo", "params": {"exempt": ["critical"], "headroom": headroom}}), seed);
            eprintln!("seed {seed} {}", describe(&format!("predictive-slo h={headroom}"), &p));
            if critical_p99(&p) <= target {
                matched = Some(p);
                break;
            }
        }
        let p = matched.expect("some headroom on the grid brings predictive-slo's critical p99 to slo-gated's");
        let gain = p.cluster.requests.admitted as f64 / gated.cluster.requests.admitted as f64 - 1.0;
        eprintln!("seed {seed}: at equal critical p99, predictive-slo admits {:+.1} % vs slo-gated", gain * 100.0);
        assert!(gain < 0.30, "seed {seed}: predictive-slo admitted {:+.1} %: H14-1 now holds, update docs/cluster.md", gain * 100.0);
        assert!(p.cluster.goodput.requests_per_s < gated.cluster.goodput.requests_per_s, "seed {seed}: goodput");
    }
}

/// One seat held by a long request; queued requests wait one light step
/// (6913 µs) each; a 64-token prefill costs ≈ 8042 µs; every budget is 20 ms,
/// so an estimate admits with at most one request ahead (≈ 14.96 ms) and
/// rejects with two (≈ 21.87 ms). Queued requests of lower priority do not
/// count (the reviewers' fix).
#[test]
fn predictive_slo_counts_only_queued_requests_of_the_same_or_higher_priority() {
    let labels = blis_engine::request::Labels { slo_classes: vec!["std".into(), "shed".into()], ..Default::default() };
    let class = |c| RequestMeta { slo_class: blis_engine::request::SloClassId(c), ..RequestMeta::default() };
    let req = |id: u64, ms: u64, c: u16, out: u32| Request {
        id: RequestId(id),
        arrival: Micros::from_ms(ms),
        prompt: TokenSeq::synthetic(id, 64),
        max_output_tokens: out,
        output_seed: id,
        meta: class(c),
    };
    // R0 takes the seat; R1–R5 (shed) queue behind it; R6–R8 (std) arrive later.
    let mut requests = vec![req(0, 0, 1, 500)];
    requests.extend((1..=5).map(|i| req(i, i, 1, 2)));
    requests.extend((6..=8).map(|i| req(i, 4 + i, 0, 2)));
    let doc = json!({
        "admission": {"type": "predictive-slo", "params": {"ttft_budget_ms": {"std": 20, "shed": 20}}},
        "priority": {"type": "slo-class", "params": {"scores": {"std": 50, "shed": 10}}},
        "scheduler": "priority-fcfs",
    });
    let o = run(config(1, instance(500, 1, 512), spec_blackbox(), bundle(doc), labels), requests, None);
    let (mut admitted, mut rejected) = (Vec::new(), Vec::new());
    for r in &o.rec.records {
        match r.outcome {
            blis_engine::request::Outcome::Rejected(reason) => rejected.push((r.id.0, reason)),
            _ => admitted.push(r.id.0),
        }
    }
    admitted.sort_unstable();
    rejected.sort_unstable();
    // Shed: R0 (nothing ahead), R1 (0 ahead), R2 (1 ahead) in; R3–R5 (2 ahead) out.
    // Std: R6 sees two shed queued but none of its priority: in; R7 (1 ahead) in; R8 (2 ahead) out.
    assert_eq!(admitted, [0, 1, 2, 6, 7]);
    assert_eq!(rejected, [3, 4, 5, 8].map(|id| (id, "predicted_ttft_over_budget")));
    assert_eq!(o.cluster.requests.rejected_by_reason["predicted_ttft_over_budget"], 4);
}
