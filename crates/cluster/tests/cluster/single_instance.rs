//! `--num-instances 1` with round-robin routing is exactly the single-instance simulation.

use blis_engine::driver::{IterWorkload, run_single};
use blis_engine::instance::Instance;
use blis_engine::metrics::RunSummary;
use blis_engine::time::Micros;

use crate::harness::{Load, Recorder, bundle, config, llama_h100, run};

fn compare(load: Load, client_timeout: Option<Micros>, horizon: Option<Micros>) -> RunSummary {
    let (latency, blocks) = llama_h100();
    let mut inst_cfg = crate::harness::instance(blocks, 256, 2048);
    inst_cfg.client_timeout = client_timeout;
    let (requests, labels) = load.requests(None);

    let single = Instance::new(0, inst_cfg.clone(), latency.clone()).unwrap();
    let mut rec = Recorder::default();
    let mut collector = blis_engine::metrics::Collector::default();
    let (end, single) = {
        let mut both = blis_engine::instance::Fanout::new(vec![&mut rec, &mut collector]);
        run_single(single, &mut IterWorkload::new(requests.clone().into_iter()), horizon, &mut both)
    };
    let single_summary = RunSummary::build(&collector, &[single.stats()], end.end, end.queued, end.running);

    let cluster = run(config(1, inst_cfg, latency, bundle(serde_json::json!({"routing": "round-robin"})), labels), requests, horizon);
    assert_eq!(cluster.end.end, end.end);
    assert_eq!(cluster.rec.records, rec.records, "per-request records differ");
    assert_eq!(cluster.rec.tokens, rec.tokens, "token timelines differ");
    assert_eq!(cluster.run, single_summary);
    assert!(!rec.records.is_empty());
    single_summary
}

#[test]
fn one_instance_round_robin_equals_the_single_instance_run() {
    // Busy enough to queue, preempt nothing in particular, share prefixes.
    let s = compare(Load { rate: 40.0, requests: 600, prompt: 600, output: 200, prefix: 256, groups: 4, seed: 11 }, None, None);
    assert_eq!(s.requests.completed, 600);
    assert!(s.kv_cache.prefix_hit_rate > 0.0);
}

#[test]
fn one_instance_equivalence_holds_with_timeouts_and_a_horizon() {
    let s = compare(
        Load { rate: 120.0, requests: 800, prompt: 1500, output: 300, prefix: 0, groups: 1, seed: 5 },
        Some(Micros::from_secs(4)),
        Some(Micros::from_secs(5)),
    );
    // The paths this test is about were taken.
    assert!(s.requests.timed_out > 0, "{:?}", s.requests);
    assert!(s.requests.queued + s.requests.running > 0, "{:?}", s.requests);
}
