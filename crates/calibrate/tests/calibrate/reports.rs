//! Result directories of newer inference-perf versions load like the
//! vendored ones: report files named with the configured
//! `report_file_prefix`, prompt lengths under `prompt_tokens` (formerly
//! `prompt_len`), and keys BLIS does not read.

use blis_calibrate::coefficients::CoefficientSet;
use blis_calibrate::reproduce::Definitions;
use blis_calibrate::suite::Suite;

use crate::copy_experiment;

const SOURCE: &str = "20260217-162547-llama-2-7b-tp1-roleplay";

/// The copy, rewritten the way a 2026 inference-perf writes its reports,
/// validates to exactly the rows of the original. Both lack requests.csv,
/// so the prompts are scaled to the reports' mean prompt length.
#[test]
fn a_newer_result_directory_validates_like_the_original() {
    let original = copy_experiment(SOURCE, "original", |rel, text| (rel != "requests.csv").then(|| (rel.into(), text)));
    let newer = copy_experiment(SOURCE, "newer", |rel, text| match rel.strip_prefix("results/") {
        None if rel == "requests.csv" => None,
        Some("config.yaml") => {
            assert!(text.contains("report_file_prefix: null"), "the shipped config changed");
            Some((rel.into(), text.replace("report_file_prefix: null", "report_file_prefix: run7_")))
        }
        Some(name) if name.ends_with("lifecycle_metrics.json") => {
            assert!(text.contains("\"prompt_len\""), "the shipped report changed");
            let newer = text.replacen('{', "{\"benchmark_time_seconds\": 1234.5, ", 1).replace("\"prompt_len\"", "\"prompt_tokens\"");
            Some((format!("results/run7_{name}"), newer))
        }
        _ => Some((rel.into(), text)),
    });
    let rows = |dir: &std::path::Path| {
        let suite = Suite::load(&[dir.to_path_buf()], &Definitions::default()).unwrap();
        let c = &suite.validate(&CoefficientSet::default_set(), 0).unwrap()[0];
        c.rows.iter().map(|r| format!("{:?} {:?} {} {}", r.stage, r.metric, r.predicted, r.actual)).collect::<Vec<_>>()
    };
    let want = rows(&original.dir);
    assert!(want.len() > 20, "{want:?}");
    assert_eq!(rows(&newer.dir), want);
    // Without the prefix the files are not found, and the error names the one missing.
    let unprefixed = copy_experiment(SOURCE, "unprefixed", |rel, text| match rel.strip_prefix("results/") {
        Some(name) if name.ends_with("lifecycle_metrics.json") => Some((format!("results/run7_{name}"), text)),
        _ => Some((rel.into(), text)),
    });
    let e = Suite::load(std::slice::from_ref(&unprefixed.dir), &Definitions::default()).err().unwrap().to_string();
    assert!(e.contains("stage_0_lifecycle_metrics.json"), "{e}");
}
