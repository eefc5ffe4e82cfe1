//! Experiments that sent a dataset's prompts (`shareGPT`, …) reproduce
//! from what the run recorded: each request's prompt length and generated
//! (or re-tokenised) length from `requests.csv`, and without it lengths
//! drawn from the reports' percentiles.

use blis_calibrate::experiment::Experiment;
use blis_calibrate::validate::reproduce::{Definitions, Setup};
use blis_calibrate::validate::suite::Suite;
use blis_engine::request::Outcome;
use blis_physics::coefficients::CoefficientSet;

use crate::{copy_general_with_data as copy_as, simulate_dir};

const SHAREGPT_DATA: &str =
    "  type: shareGPT\n  path: /data/ShareGPT_V3_unfiltered_cleaned_split.json\n  input_distribution: null\n  output_distribution: null\n";

/// `requests.csv` with an `output_tokens` column of `n` on every success.
fn with_output_column(text: &str, n: u32) -> String {
    let mut lines = text.lines();
    let mut out = format!("{},output_tokens\n", lines.next().unwrap());
    for line in lines {
        let failed = line.split(',').nth(5) == Some("1");
        out += &format!("{line},{}\n", if failed { String::new() } else { n.to_string() });
    }
    out
}

/// A shareGPT run and a `random` run that sent the same prompt lengths at
/// the same times and generated the same outputs are the same workload to
/// the server: every prompt fresh, nothing shared. They validate to
/// exactly the same rows.
#[test]
fn a_dataset_run_reproduces_like_a_random_run_of_the_same_lengths() {
    let random = "  type: random\n  input_distribution: {min: 400, max: 700, mean: 547, std_dev: 50}\n  \
                  output_distribution: {min: 248, max: 248, mean: 248, std_dev: 0}\n";
    let outputs = |rel: &str, text: String| Some(if rel == "requests.csv" { with_output_column(&text, 248) } else { text });
    let (as_random, as_dataset) = (copy_as("random", random, outputs), copy_as("sharegpt", SHAREGPT_DATA, outputs));
    let validate = |dir: &std::path::Path| {
        let suite = Suite::load(&[dir.to_path_buf()], &Definitions::default()).unwrap();
        assert!(suite.warnings().is_empty(), "{:?}", suite.warnings());
        suite.validate(&CoefficientSet::default_set(), 0).unwrap().remove(0)
    };
    let (a, b) = (validate(&as_random.dir), validate(&as_dataset.dir));
    assert!(a.rows.len() > 20);
    assert_eq!(a.rows, b.rows);
    assert!(b.requests.is_some(), "recorded outputs: compared request by request");
    assert!(b.prefix_hit_rate < 0.01, "dataset prompts share nothing: {}", b.prefix_hit_rate);
}

/// Without the server's counts a dataset run generates each answer's
/// re-tokenised length, and where none was recorded (here the rows whose
/// re-tokenised answer is empty) one drawn from the reports' output
/// percentiles; the warning says so.
#[test]
fn a_dataset_run_generates_its_re_tokenised_answers() {
    let copied = copy_as("retokenised", SHAREGPT_DATA, |_, text| Some(text));
    let (exp, sim, records) = simulate_dir(&copied.dir);
    assert!(exp.warnings().iter().any(|w| w.contains("output_tokens_retokenized")), "{:?}", exp.warnings());
    let rows = exp.requests.as_ref().unwrap();
    let (mut exact, mut drawn) = (0, 0);
    for r in records.iter().filter(|r| r.outcome == Outcome::Completed) {
        let row = &rows[sim.csv_row_of[r.id.0 as usize].expect("no probe: every request replays a row")];
        assert_eq!(r.input_tokens, row.input_tokens);
        match row.output_tokens_retokenized {
            Some(n) if n > 0 => {
                assert_eq!(r.output_tokens, n, "request {}", r.id.0);
                exact += 1;
            }
            _ => {
                assert!((1..=252).contains(&r.output_tokens), "drawn within the reported 0..=252: {}", r.output_tokens);
                drawn += 1;
            }
        }
    }
    assert!(exact > 16_000 && drawn > 10, "{exact} exact, {drawn} drawn");
    assert!(!sim.fixed_output, "some lengths are drawn: no per-request comparison");
}

/// Without any per-request record, every request's lengths are drawn from
/// the summary's percentiles: their means come out at the reported means,
/// every length within the reported range.
#[test]
fn a_dataset_run_without_records_draws_from_the_report_percentiles() {
    let copied = copy_as("unrecorded", SHAREGPT_DATA, |rel, text| (rel != "requests.csv").then_some(text));
    let (exp, sim, records) = simulate_dir(&copied.dir);
    assert!(
        exp.warnings().iter().any(|w| w.contains("without per-request records") && w.contains("summary_lifecycle_metrics.json")),
        "{:?}",
        exp.warnings()
    );
    assert_eq!(records.len(), 16_800);
    let mean =
        |f: fn(&blis_engine::request::RequestRecord) -> u32| records.iter().map(|r| f64::from(f(r))).sum::<f64>() / records.len() as f64;
    // Reported (summary): prompts 559..=592, mean 575.6; answers 0..=252, mean 209.0.
    assert!(records.iter().all(|r| (559..=592).contains(&r.input_tokens) && (1..=252).contains(&r.output_tokens)));
    assert!((mean(|r| r.input_tokens) - 575.6).abs() < 1.5, "mean prompt {}", mean(|r| r.input_tokens));
    assert!((mean(|r| r.output_tokens) - 209.0).abs() < 0.03 * 209.0, "mean output {}", mean(|r| r.output_tokens));
    assert!(
        (mean(|r| r.output_tokens) - sim.mean_output_tokens).abs() < 2.0,
        "{} vs {}",
        mean(|r| r.output_tokens),
        sim.mean_output_tokens
    );
}

/// A dataset run whose reports do not give the lengths cannot be
/// reproduced; the error names the report and the field.
#[test]
fn a_dataset_run_without_lengths_names_the_missing_field() {
    let strip = |rel: &str, text: String| match rel {
        "requests.csv" => None,
        r if r.ends_with("lifecycle_metrics.json") => {
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            v["successes"].as_object_mut().unwrap().remove("output_len");
            Some(v.to_string())
        }
        _ => Some(text),
    };
    let copied = copy_as("no-lengths", SHAREGPT_DATA, strip);
    let exp = Experiment::load(&copied.dir).unwrap();
    let e = Setup::of(&exp, &Definitions::default()).err().unwrap().to_string();
    assert!(e.contains("summary_lifecycle_metrics.json") && e.contains("successes.output_len") && e.contains("missing"), "{e}");
}
