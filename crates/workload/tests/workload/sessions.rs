//! Multi-turn rounds are released by the completion of the previous round,
//! and accumulated context hits the prefix cache.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use blis_engine::driver::run_single;
use blis_engine::instance::{Instance, Observer};
use blis_engine::latency::Blackbox;
use blis_engine::request::{Outcome, RequestRecord};
use blis_engine::scheduler::InstanceConfig;
use blis_workload::spec::parse;

#[derive(Default)]
struct Records(Vec<RequestRecord>);

impl Observer for Records {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.0.push(r.clone());
    }
}

fn run(spec: &str) -> Vec<RequestRecord> {
    let plan = parse(spec, "t", Path::new(".")).unwrap().plan().unwrap();
    let cfg = InstanceConfig::basic(64, 4096, 65_536, 40_000);
    let model = Arc::new(Blackbox { alpha: [500.0, 0.1, 1.0], beta: [3000.0, 2.0, 50.0] });
    let inst = Instance::new(0, cfg, model).unwrap();
    let mut records = Records::default();
    run_single(inst, &mut plan.generator(), None, &mut records);
    records.0
}

fn spec(growth: &str, prefix: &str) -> String {
    format!(
        "aggregate_rate: 2\nnum_requests: 40\nclients:\n  - id: chat\n{prefix}    input_distribution: {{type: gaussian, params: {{mean: 300, std_dev: 50}}}}\n    output_distribution: {{type: gaussian, params: {{mean: 120, std_dev: 30}}}}\n    multi_turn: {{max_rounds: 4, think_time_us: 2000000, context_growth: {growth}}}\n"
    )
}

/// Rounds of each session by round index.
fn sessions(records: &[RequestRecord]) -> BTreeMap<u64, BTreeMap<u32, RequestRecord>> {
    let mut s: BTreeMap<u64, BTreeMap<u32, RequestRecord>> = BTreeMap::new();
    for r in records {
        let (id, round) = r.meta.session.expect("every request of a multi-turn client has a session");
        assert!(s.entry(id).or_default().insert(round, r.clone()).is_none(), "round {round} of session {id} twice");
    }
    s
}

#[test]
fn rounds_never_arrive_before_the_previous_round_completes() {
    let records = run(&spec("accumulate", ""));
    let s = sessions(&records);
    assert_eq!(s.len(), 40);
    for rounds in s.values() {
        assert_eq!(rounds.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3], "every session runs all rounds");
        for r in 1..4 {
            let prev = &rounds[&(r - 1)];
            assert_eq!(prev.outcome, Outcome::Completed);
            assert_eq!(
                rounds[&r].arrival,
                prev.finished + blis_engine::time::Micros::from_secs(2),
                "round {r} arrives think time after round {}",
                r - 1
            );
        }
    }
}

#[test]
fn accumulated_context_hits_the_prefix_cache_and_fixed_context_does_not() {
    let by_round = |records: &[RequestRecord]| {
        let mut hit = [0u64; 4];
        let mut prompt = [0u64; 4];
        for r in records {
            let round = r.meta.session.unwrap().1 as usize;
            hit[round] += u64::from(r.cached_prompt_tokens);
            prompt[round] += u64::from(r.input_tokens);
        }
        (hit, prompt)
    };
    let (hit, prompt) = by_round(&run(&spec("accumulate", "")));
    assert_eq!(hit[0], 0, "first rounds share nothing");
    for r in 1..4 {
        // Round r re-sends rounds 0..r: at least half its prompt is cached context.
        assert!(hit[r] as f64 > 0.5 * prompt[r] as f64, "round {r}: {} of {} prompt tokens cached", hit[r], prompt[r]);
        assert!(prompt[r] > prompt[r - 1], "prompts grow");
    }
    let (hit, _) = by_round(&run(&spec("fixed", "")));
    assert_eq!(hit, [0; 4], "independent rounds share no blocks");
    // With a shared prefix, fixed rounds hit only the prefix.
    let (hit, _) = by_round(&run(&spec("fixed", "    prefix_group: sys\n    prefix_length: 160\n")));
    let requests = 40 * 4;
    assert!(hit.iter().sum::<u64>() <= 160 * requests && hit.iter().sum::<u64>() >= 160 * (requests - 1));
}
