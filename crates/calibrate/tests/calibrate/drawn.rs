//! Experiments whose inference-perf data generator draws lengths (`random`,
//! `synthetic`) reproduce too: a shipped run's directory with its data
//! section rewritten is replayed at the recorded send times and prompt
//! lengths, with `max_tokens` drawn from the configured distribution, and
//! is never compared request by request.

use blis_calibrate::validate::reproduce::Definitions;
use blis_calibrate::validate::suite::Suite;
use blis_engine::request::Outcome;
use blis_physics::coefficients::CoefficientSet;

use crate::{Copied, GENERAL_DATA, copy_general_with_data, simulate_dir};

/// A copy of the shipped run under a fresh directory, its data section
/// replaced by a `kind` generator (outputs normal around 248 in 200..=300);
/// without `csv`, its requests.csv removed.
fn drawn_copy(kind: &str, csv: bool) -> Copied {
    let drawn = format!(
        "  type: {kind}\n  input_distribution:\n    min: 400\n    max: 700\n    mean: 547\n    std_dev: 50\n  \
         output_distribution:\n    min: 200\n    max: 300\n    mean: 248\n    std_dev: 20\n"
    );
    copy_with_data(kind, &drawn, csv)
}

/// A copy of the shipped run with its data section replaced by `data`;
/// without `csv`, its requests.csv removed.
fn copy_with_data(tag: &str, data: &str, csv: bool) -> Copied {
    copy_general_with_data(tag, data, |rel, text| (csv || rel != "requests.csv").then_some(text))
}

#[test]
fn a_random_run_replays_recorded_sends_and_prompt_lengths_with_drawn_outputs() {
    let (exp, sim, records) = simulate_dir(&drawn_copy("random", true).dir);
    let rows = exp.requests.as_ref().unwrap();
    assert_eq!(records.len(), rows.len());
    assert!(!sim.fixed_output);
    let mut outputs = Vec::new();
    for (r, &row) in records.iter().zip(&sim.csv_row_of) {
        let real = &rows[row.expect("no probe: every request replays a row")];
        assert_eq!(r.arrival.as_us(), real.arrival_time_us, "request {}", r.id.0);
        if real.input_tokens > 0 {
            assert_eq!(r.input_tokens, real.input_tokens, "request {}", r.id.0);
        }
        if r.outcome == Outcome::Completed {
            assert!((200..=300).contains(&r.output_tokens), "output {} outside the distribution", r.output_tokens);
            outputs.push(f64::from(r.output_tokens));
        }
    }
    let mean = outputs.iter().sum::<f64>() / outputs.len() as f64;
    assert!((mean - sim.mean_output_tokens).abs() < 2.0, "mean output {mean} vs drawn mean {}", sim.mean_output_tokens);
    assert!((sim.mean_output_tokens - 248.0).abs() < 3.0, "drawn mean {}", sim.mean_output_tokens);
    assert!(outputs.iter().any(|&n| n != outputs[0]), "outputs do not vary");
    // Random prompts share nothing but what a request reuses of itself.
    assert!(sim.prefix_hit_rate < 0.01, "random prompts hit the prefix cache: {}", sim.prefix_hit_rate);
}

#[test]
fn synthetic_prompts_share_prefixes_and_stage_runs_draw_their_own_lengths() {
    let (_, synthetic, _) = simulate_dir(&drawn_copy("synthetic", true).dir);
    assert!(synthetic.prefix_hit_rate > 0.5, "synthetic prompts are prefixes of one text: {}", synthetic.prefix_hit_rate);
    let (_, staged, records) = simulate_dir(&drawn_copy("random", false).dir);
    assert!(staged.csv_row_of.is_empty());
    // Without requests.csv the drawn lengths (400..=700, mean ~547) are
    // scaled to the stages' measured mean prompt length, 575.45 tokens.
    let inputs: Vec<u32> = records.iter().map(|r| r.input_tokens).collect();
    let mean = inputs.iter().map(|&n| f64::from(n)).sum::<f64>() / inputs.len() as f64;
    assert!((mean - 575.45).abs() < 0.01 * 575.45, "mean input {mean}, measured 575.45");
    assert!(inputs.iter().all(|n| (400..=740).contains(n)), "inputs outside the scaled distribution");
    assert!(inputs.iter().any(|&n| n != inputs[0]), "inputs do not vary");
}

#[test]
fn drawn_outputs_are_compared_per_stage_not_per_request() {
    let copied = drawn_copy("random", true);
    let suite = Suite::load(std::slice::from_ref(&copied.dir), &Definitions::default()).unwrap();
    let c = &suite.validate(&CoefficientSet::default_set(), 0).unwrap()[0];
    assert!(c.requests.is_none(), "per-request errors against unknown output lengths");
    assert_eq!(c.request_pairs.len(), 16_800, "every row of requests.csv is still listed");
    assert!(c.rows.iter().any(|r| r.metric == blis_calibrate::validate::compare::Metric::E2eMean));
    assert!(suite.warnings().is_empty(), "{:?}", suite.warnings());
}

/// A multi-turn run replayed from requests.csv cannot rebuild its
/// conversations' context, and says so; replayed from its stage arrival
/// process it can, and does not.
#[test]
fn a_multi_turn_replay_warns_that_its_context_is_missing() {
    let multi_turn = GENERAL_DATA.replace("output_len: 248", "output_len: 248\n    enable_multi_turn_chat: true");
    for csv in [true, false] {
        let copied = copy_with_data("multi-turn", &multi_turn, csv);
        let suite = Suite::load(std::slice::from_ref(&copied.dir), &Definitions::default()).unwrap();
        let warned = suite.warnings().iter().any(|w| w.contains("multi-turn run replayed from its recorded requests"));
        assert_eq!(warned, csv, "{:?}", suite.warnings());
    }
}

/// Newer inference-perf draws shared-prefix lengths from distributions:
/// the run reproduces them (one output length per prompt, so repeated
/// prompts generate alike), warns about nothing, and is compared per stage.
#[test]
fn shared_prefix_length_distributions_are_reproduced() {
    let spread = GENERAL_DATA.replace("output_len: 248", "output_len: {type: normal, mean: 248, std_dev: 25, min: 150, max: 350}");
    let copied = copy_with_data("spread", &spread, false);
    let (_, sim, records) = simulate_dir(&copied.dir);
    assert!(!sim.fixed_output);
    let outputs: Vec<f64> = records.iter().filter(|r| r.outcome == Outcome::Completed).map(|r| f64::from(r.output_tokens)).collect();
    assert!(outputs.iter().all(|n| (150.0..=350.0).contains(n)), "outputs outside the distribution");
    let mean = outputs.iter().sum::<f64>() / outputs.len() as f64;
    let sd = (outputs.iter().map(|n| (n - mean).powi(2)).sum::<f64>() / outputs.len() as f64).sqrt();
    // 100 prompts, each with its own drawn length: the sample mean of 100 draws is within ~3σ/√100 of 248.
    assert!((mean - 248.0).abs() < 8.0 && (sd - 25.0).abs() < 8.0, "outputs {mean} ± {sd}");
    assert!((mean - sim.mean_output_tokens).abs() < 1.0, "{mean} vs {}", sim.mean_output_tokens);
    let suite = Suite::load(std::slice::from_ref(&copied.dir), &Definitions::default()).unwrap();
    assert!(suite.warnings().is_empty(), "{:?}", suite.warnings());
    let c = &suite.validate(&CoefficientSet::default_set(), 0).unwrap()[0];
    assert!(c.rows.iter().any(|r| r.metric == blis_calibrate::validate::compare::Metric::E2eMean));
}
