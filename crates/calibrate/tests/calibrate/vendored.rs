//! The vendored real experiments: they load, resolve to the deployment the
//! groundtruth README documents, and the bundled default coefficients keep
//! reproducing one of them within the accuracy targets.

use std::path::PathBuf;

use blis_calibrate::experiment::Status;
use blis_calibrate::validate::compare::Metric;
use blis_calibrate::validate::suite::Suite;
use blis_physics::coefficients::CoefficientSet;
use blis_workload::inference_perf::Length;

fn vendored(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../validation/vllm-h100").join(name)
}

#[test]
fn all_twelve_experiments_load_with_the_documented_deployments() {
    let suite = Suite::load(&[vendored("")], &Default::default()).unwrap();
    assert_eq!(suite.cases.len(), 12);
    let overloaded: Vec<&str> =
        suite.cases.iter().filter(|c| c.experiment.status() == Status::OverloadExcluded).map(|c| c.experiment.name.as_str()).collect();
    assert_eq!(overloaded.len(), 3);
    assert!(overloaded.iter().all(|n| n.ends_with("reasoning")));
    for c in &suite.cases {
        let (s, e) = (&c.setup.server, &c.experiment);
        let expected_blocks = match (s.model_name.as_str(), s.tp) {
            ("meta-llama/Llama-2-7b-hf", 1) => 7462,
            ("meta-llama/Llama-2-70b-hf", 4) => 31356,
            ("mistralai/Mixtral-8x7B-v0.1", 2) => 27510,
            other => panic!("{}: unexpected deployment {other:?}", e.name),
        };
        assert_eq!(s.instance.num_gpu_blocks, expected_blocks, "{}", e.name);
        assert!(c.setup.blocks_from_server);
        let k = &s.instance.scheduler;
        assert_eq!((k.max_num_seqs, k.max_num_batched_tokens, k.max_model_len), (128, 2048, 4096));
        assert_eq!(s.instance.client_timeout, Some(blis_engine::time::Micros::from_secs(300)));
        // What actually ran: 10 groups × 10 prompts, outputs of the configured length.
        let sp = e.workload.shared_prefix().unwrap();
        assert_eq!((sp.num_groups, sp.num_prompts_per_group), (10, 10));
        let fixed = |l: &Length| match l {
            Length::Fixed(n) => *n,
            Length::Drawn(d) => panic!("{}: a drawn length {d:?}", e.name),
        };
        assert!([247, 248, 251, 1448].contains(&fixed(&sp.output_len)), "{}", e.name);
        // Prompts ~5 % longer than configured after re-tokenisation.
        let nominal = f64::from(fixed(&sp.system_prompt_len) + fixed(&sp.question_len));
        let real = c.setup.measured.prompt_mean_tokens.unwrap();
        assert!(real > nominal && real < 1.1 * nominal, "{}: {real} vs {nominal}", e.name);
        assert!(e.requests.as_ref().is_some_and(|r| r.len() as u64 == e.stages.iter().map(|s| s.sent()).sum::<u64>()));
    }
}

/// Llama-2-7B roleplay (one stage of 7 200 requests at 6 req/s) with the
/// bundled default coefficients: within the targets, the prefix
/// cache hitting the recycled prompts, nothing lost.
#[test]
fn the_default_set_reproduces_a_real_run() {
    let suite = Suite::load(&[vendored("20260217-162547-llama-2-7b-tp1-roleplay")], &Default::default()).unwrap();
    let c = &suite.validate(&CoefficientSet::default_set(), 0).unwrap()[0];
    let ape = |m: Metric| c.stage_apes(m).next().unwrap();
    assert!(ape(Metric::E2eMean) < 8.0, "E2E {}", ape(Metric::E2eMean));
    assert!(ape(Metric::ItlMean) < 8.0, "ITL {}", ape(Metric::ItlMean));
    assert!(ape(Metric::TtftMean) < 15.0, "TTFT {}", ape(Metric::TtftMean));
    assert!(ape(Metric::E2eP90) < 12.0, "E2E p90 {}", ape(Metric::E2eP90));
    assert!(c.prefix_hit_rate > 0.9, "prefix hit rate {}", c.prefix_hit_rate);
    assert_eq!(c.predicted_stages[0].failure_fraction, 0.0);
    let r = c.requests.unwrap();
    assert_eq!(r.matched, 7200);
}

/// Llama-2-7B reasoning (4 req/s of 1 448-token outputs, KV-bound): BLIS
/// predicts the overload, and the cliff within the 20 % the saturation check
/// of `unified-step-time-formula.md` allows.
#[test]
fn the_kv_bound_overload_and_its_cliff_are_predicted() {
    let suite = Suite::load(&[vendored("20260217-170634-llama-2-7b-tp1-reasoning")], &Default::default()).unwrap();
    let c = &suite.validate(&CoefficientSet::default_set(), 0).unwrap()[0];
    assert!(c.predicted_overloaded(), "simulated failures {}", c.predicted_stages[0].failure_fraction);
    let r = c.saturated.expect("a saturated service rate from the recorded requests");
    assert!(r.window_s[0] > 100.0 && r.window_s[1] <= 1500.0, "{r:?}");
    assert!((r.predicted_rps - r.real_rps).abs() / r.real_rps < 0.2, "{r:?}");
    let row = c.rows.iter().find(|row| row.metric == Metric::SaturatedServiceRps).unwrap();
    assert_eq!((row.predicted, row.actual), (r.predicted_rps, r.real_rps));
}
