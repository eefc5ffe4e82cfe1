//! Experiments that cannot be what a real run recorded are refused with one
//! line naming the file and the field, instead of being simulated.

use blis_calibrate::experiment::Experiment;
use blis_calibrate::validate::reproduce::{Definitions, Setup};

use crate::copy_experiment;

const SOURCE: &str = "20260217-162547-llama-2-7b-tp1-roleplay";

/// Fuzzing found that a directory in place of an optional file passed for
/// the file being absent: facts defaulted, the per-request comparison
/// dropped, and `blis validate` succeeded.
#[test]
fn a_directory_in_place_of_an_optional_file_is_refused_naming_it() {
    for file in ["server-facts.yaml", "exp-config.yaml", "requests.csv", "results/summary_lifecycle_metrics.json", "vllm.log"] {
        let copy = copy_experiment(SOURCE, "dir-for-file", |rel, text| (rel != file).then(|| (rel.into(), text)));
        std::fs::create_dir(copy.dir.join(file)).unwrap();
        let e = Experiment::load(&copy.dir).err().unwrap_or_else(|| panic!("{file} as a directory was accepted")).to_string();
        assert!(e.contains(file), "{file}: {e}");
    }
}

/// The error loading a copy of [`SOURCE`] whose `file` has `from` replaced by `to`.
fn load_error(tag: &str, file: &str, from: &str, to: &str) -> String {
    let copy = copy_experiment(SOURCE, tag, |rel, text| {
        if rel != file {
            return Some((rel.into(), text));
        }
        assert!(text.contains(from), "the shipped {file} changed: no {from}");
        Some((rel.into(), text.replacen(from, to, 1)))
    });
    match Experiment::load(&copy.dir) {
        Ok(_) => panic!("{file}: {from} → {to} was accepted"),
        Err(e) => e.to_string(),
    }
}

/// Fuzzing found reports no client can have written validated with absurd
/// errors (and `blis fit` trained on them): percentiles that decrease, a
/// throughput of 1e300 req/s, negative load-summary rates and durations.
#[test]
fn impossible_report_statistics_are_refused_naming_the_field() {
    let cases = [
        ("\"p99\": 2.3993211105307504", "\"p99\": 2.0", "successes.latency.request_latency.p99"),
        ("\"p90\": 2.2599607800997545", "\"p90\": 2.5", "successes.latency.request_latency.p95"),
        ("\"max\": 2.573312750000696", "\"max\": 1.0", "successes.latency.request_latency.max"),
        ("\"requests_per_sec\": 5.992306609005916", "\"requests_per_sec\": 1e300", "successes.throughput.requests_per_sec"),
        ("\"requested_rate\": 6.0", "\"requested_rate\": -6.0", "load_summary.requested_rate"),
        ("\"achieved_rate\": 6.001677137502361", "\"achieved_rate\": -1", "load_summary.achieved_rate"),
        ("\"send_duration\": 1199.6646662330004", "\"send_duration\": -1199.6", "load_summary.send_duration"),
        ("\"count\": 7200", "\"count\": -7200", "load_summary.count"),
    ];
    for (i, (from, to, field)) in cases.into_iter().enumerate() {
        let e = load_error(&format!("stats-{i}"), "results/stage_0_lifecycle_metrics.json", from, to);
        assert!(e.contains("stage_0_lifecycle_metrics.json") && e.contains(field), "{to}: {e}");
    }
}

/// Fuzzing found that `exp-config.yaml` zeros passed with a mismatch
/// warning (the server's facts win) while `tensor_parallelism: 0` was refused.
#[test]
fn zero_server_knobs_in_exp_config_are_refused() {
    for (shipped, field) in [
        ("max_model_len: 4096", "max_model_len"),
        ("max_num_batched_tokens: 2048", "max_num_batched_tokens"),
        ("max_num_seqs: 128", "max_num_seqs"),
        ("tensor_parallelism: 1", "tensor_parallelism"),
    ] {
        let e = load_error("zero-knob", "exp-config.yaml", shipped, &format!("{field}: 0"));
        assert!(e.contains("exp-config.yaml") && e.contains(&format!("`{field}` = 0")), "{e}");
    }
}

/// Fuzzing found that server facts with which the recorded run could not
/// have happened (a KV cache smaller than one request, a model length
/// shorter than the prompts) simulated every request failing, unexplained.
#[test]
fn a_server_that_could_not_have_served_the_run_is_refused_naming_the_fact() {
    let cases = [
        ("num_gpu_blocks: 7462", "num_gpu_blocks: 10", "num_gpu_blocks = 10"),
        ("max_model_len: 4096", "max_model_len: 1", "max_model_len = 1"),
    ];
    for (from, to, named) in cases {
        let copy = copy_experiment(SOURCE, "unservable", |rel, text| {
            Some((rel.into(), if rel == "server-facts.yaml" { text.replacen(from, to, 1) } else { text }))
        });
        let exp = Experiment::load(&copy.dir).unwrap();
        let e = Setup::of(&exp, &Definitions::default()).err().unwrap_or_else(|| panic!("{to} was accepted")).to_string();
        assert!(e.contains("server-facts.yaml") && e.contains(named), "{e}");
    }
}

/// Fuzzing found that a `requests.csv` value of the wrong type was named by
/// the csv crate's column number ("field 6"); the error names the column
/// by its header name, with the value and the line.
#[test]
fn a_malformed_requests_csv_value_is_named_by_its_column() {
    let e = load_error("csv-column", "requests.csv", "0,0,0,794,251,0,2190.385073000016,", "0,0,0,794,251,0,abc,");
    assert!(e.contains("requests.csv:2: field `e2e_ms` = `abc`: "), "{e}");
    assert!(!e.contains("field 6"), "{e}");
}

/// Fuzzing found that NaN or Infinity in an inference-perf report (which
/// Python's json module writes, but JSON has no such numbers) gave serde's
/// bare "expected value" naming only the enclosing object: the error names
/// the file, the field, its line and the token.
#[test]
fn nan_or_infinity_in_a_report_is_refused_naming_the_field() {
    let file = "results/stage_0_lifecycle_metrics.json";
    for (token, tag) in [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "neg-inf")] {
        let e = load_error(tag, file, "\"mean\": 0.0004162728194008499", &format!("\"mean\": {token}"));
        let expected = format!("stage_0_lifecycle_metrics.json: field `load_summary.schedule_delay.mean` = {token} at line 5 column ");
        assert!(e.contains(&expected) && e.contains("no NaN or Infinity"), "{token}: {e}");
    }
}

/// A logged maximum concurrency that cannot be true is refused, naming the
/// file and field, instead of choosing how the cache size was logged.
#[test]
fn a_maximum_concurrency_that_is_no_positive_number_is_refused() {
    for bad in ["-3", "0", ".nan", ".inf"] {
        let e = load_error("concurrency", "server-facts.yaml", "block_size: 16\n", &format!("block_size: 16\nmax_concurrency: {bad}\n"));
        assert!(
            e.contains("server-facts.yaml") && e.contains("`max_concurrency`") && e.contains("must be a positive number"),
            "{bad}: {e}"
        );
    }
}
