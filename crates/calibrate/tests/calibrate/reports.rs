//! Result directories of newer inference-perf versions load like the
//! vendored ones: report files named with the configured
//! `report_file_prefix`, prompt lengths under `prompt_tokens` (formerly
//! `prompt_len`), keys BLIS does not read, and inference-perf's own
//! per-request report in place of `requests.csv`.

use blis_calibrate::validate::compare::{Metric, StageLabel};
use blis_calibrate::validate::reproduce::Definitions;
use blis_calibrate::validate::suite::Suite;
use blis_engine::request::Outcome;
use blis_physics::coefficients::CoefficientSet;

use crate::{copy_experiment, simulate_dir};

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

/// inference-perf's `per_request_lifecycle_metrics.json`, written here from
/// the run's `requests.csv` (send times on a monotonic clock that starts at
/// 5000 s, entries newest first), replays exactly as `requests.csv` does:
/// the same rows, and the same per-request agreement up to rounding.
#[test]
fn a_per_request_report_replays_like_requests_csv() {
    let with_csv = copy_experiment(SOURCE, "with-csv", |rel, text| Some((rel.into(), text)));
    let with_json = copy_experiment(SOURCE, "with-json", |rel, text| match rel {
        "requests.csv" => Some(("results/per_request_lifecycle_metrics.json".into(), per_request_report(&text))),
        _ => Some((rel.into(), text)),
    });
    let validate = |dir: &std::path::Path| {
        let suite = Suite::load(&[dir.to_path_buf()], &Definitions::default()).unwrap();
        assert!(suite.cases[0].experiment.requests.is_some());
        suite.validate(&CoefficientSet::default_set(), 0).unwrap().remove(0)
    };
    let (a, b) = (validate(&with_csv.dir), validate(&with_json.dir));
    assert_eq!(a.rows, b.rows);
    let (ra, rb) = (a.requests.unwrap(), b.requests.unwrap());
    assert_eq!(ra.matched, rb.matched);
    assert!(ra.matched > 7000, "{}", ra.matched);
    assert!((ra.e2e_mape - rb.e2e_mape).abs() < 1e-6 && (ra.ttft_mape - rb.ttft_mape).abs() < 1e-6, "{ra:?} vs {rb:?}");
}

/// The per-request report inference-perf would have written for the rows of `csv`.
fn per_request_report(csv: &str) -> String {
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (arrival, input, error, e2e, ttft) = (col("arrival_time_us"), col("input_tokens"), col("has_error"), col("e2e_ms"), col("ttft_ms"));
    let mut entries: Vec<serde_json::Value> = reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            let start = 5000.0 + r[arrival].parse::<f64>().unwrap() / 1e6;
            let info = |first_chunk: Option<f64>| serde_json::json!({"input_tokens": r[input].parse::<u32>().unwrap(), "output_token_times": first_chunk.map(|t| vec![t])});
            if &r[error] == "0" {
                let (e2e, ttft) = (r[e2e].parse::<f64>().unwrap() / 1e3, r[ttft].parse::<f64>().unwrap() / 1e3);
                serde_json::json!({"start_time": start, "end_time": start + e2e, "info": info(Some(start + ttft)), "error": null})
            } else {
                serde_json::json!({"start_time": start, "end_time": start + 300.0, "info": info(None),
                                   "error": {"error_type": "TimeoutError", "error_msg": "Request timed out"}})
            }
        })
        .collect();
    entries.reverse();
    serde_json::to_string_pretty(&entries).unwrap()
}

/// A concurrent-load run replays its recorded sends through its
/// concurrency cap: here the roleplay run's 7 200 sends, recast as one
/// stage of 7 200 requests 4 at a time, never have more than 4 in flight,
/// and a request the cap held back goes exactly when another ends.
#[test]
fn a_concurrent_run_replays_through_its_cap() {
    let copied = copy_experiment(SOURCE, "concurrent", |rel, text| match rel {
        "results/config.yaml" => {
            let rate_stage = "  type: constant\n  interval: 1.0\n  stages:\n  - rate: 6.0\n    duration: 1200\n";
            assert!(text.contains(rate_stage), "the shipped config changed");
            let concurrent = "  type: concurrent\n  interval: 1.0\n  stages:\n  - num_requests: 7200\n    concurrency_level: 4\n";
            Some((rel.into(), text.replace(rate_stage, concurrent)))
        }
        _ => Some((rel.into(), text)),
    });
    let (exp, _, records) = simulate_dir(&copied.dir);
    let spans: Vec<(u64, u64)> = records.iter().map(|r| (r.arrival.as_us(), r.finished.as_us())).collect();
    let mut events: Vec<(u64, i32)> = spans.iter().flat_map(|&(a, f)| [(a, 1), (f, -1)]).collect();
    events.sort_by_key(|&(t, d)| (t, d)); // an end before a send at the same instant
    let most = events
        .iter()
        .scan(0, |n, &(_, d)| {
            *n += d;
            Some(*n)
        })
        .max();
    assert_eq!(most, Some(4));
    let rows = exp.requests.as_ref().unwrap();
    let ends: std::collections::BTreeSet<u64> = spans.iter().map(|&(_, f)| f).collect();
    let recorded: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.arrival_time_us).collect();
    let held = spans.iter().filter(|(a, _)| !recorded.contains(a)).count();
    assert!(held > 1000, "only {held} sends held back: 6 req/s of ~1.8 s requests need ~11 slots");
    assert!(spans.iter().all(|(a, _)| recorded.contains(a) || ends.contains(a)), "a held request goes when another ends");
}

/// A run that records each request's generated length (an `output_tokens`
/// column; inference-perf's per-request report has it in `server_usage`)
/// replays exactly those lengths, needs no `ignore_eos`, and is compared
/// request by request.
#[test]
fn recorded_output_lengths_are_generated_exactly() {
    let length_of = |index: u64| 100 + (index * 37 % 151) as u32;
    let copied = copy_experiment(SOURCE, "outputs", |rel, text| match rel {
        "requests.csv" => {
            let mut lines = text.lines();
            let mut out = format!("{},output_tokens\n", lines.next().unwrap());
            for line in lines {
                let index: u64 = line.split(',').next().unwrap().parse().unwrap();
                let failed = line.split(',').nth(5) == Some("1");
                out += &format!("{line},{}\n", if failed { String::new() } else { length_of(index).to_string() });
            }
            Some((rel.into(), out))
        }
        "results/config.yaml" => Some((rel.into(), text.replace("ignore_eos: true", "ignore_eos: false"))),
        _ => Some((rel.into(), text)),
    });
    let (exp, sim, records) = simulate_dir(&copied.dir);
    assert!(exp.warnings().iter().all(|w| !w.contains("ignore_eos")), "{:?}", exp.warnings());
    assert!(sim.fixed_output, "outputs are known per request");
    let rows = exp.requests.as_ref().unwrap();
    let mut checked = 0;
    for r in records.iter().filter(|r| r.outcome == Outcome::Completed) {
        let row = &rows[sim.csv_row_of[r.id.0 as usize].expect("no probe: every request replays a row")];
        assert_eq!(r.output_tokens, length_of(row.index), "request {}", r.id.0);
        checked += 1;
    }
    assert!(checked > 7000, "{checked}");
    let mean = rows.iter().filter(|r| r.has_error == 0).map(|r| f64::from(length_of(r.index))).sum::<f64>()
        / rows.iter().filter(|r| r.has_error == 0).count() as f64;
    assert!((sim.mean_output_tokens - mean).abs() < 1e-9, "{} vs {mean}", sim.mean_output_tokens);
}

/// inference-perf's own output directory (its config.yaml beside the
/// reports, no `results/`), with nothing but the server's `vllm.log` beside
/// it, validates to the rows of the hand-assembled experiment: the model
/// from `server.model_name`, the server's knobs and KV blocks from the log
/// (a vLLM 0.14 or later, which scheduled asynchronously without being
/// told, as the shared runs did). Without a model anywhere, the error names
/// the file to write.
#[test]
fn an_inference_perf_output_directory_with_its_server_log_validates() {
    const LOG: &str = "\
(APIServer pid=7) INFO 02-17 23:10:01 [utils.py:233] non-default args: {'model': 'meta-llama/Llama-2-7b-hf', 'max_model_len': 4096, \
'max_num_seqs': 128, 'max_num_batched_tokens': 2048, 'enable_prefix_caching': True}
(EngineCore_DP0 pid=9) INFO 02-17 23:10:09 [core.py:77] Initializing a V1 LLM engine (v0.15.1) with config: model='meta-llama/Llama-2-7b-hf', \
max_seq_len=4096, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, enable_prefix_caching=True, chunked_prefill_enabled=True
(EngineCore_DP0 pid=9) INFO 02-17 23:11:10 [kv_cache_utils.py:1087] GPU KV cache size: 119,392 tokens
";
    let rows = |dir: &std::path::Path| {
        let suite = Suite::load(&[dir.to_path_buf()], &Definitions::default()).unwrap();
        let c = &suite.validate(&CoefficientSet::default_set(), 0).unwrap()[0];
        c.rows.iter().map(|r| format!("{:?} {:?} {} {}", r.stage, r.metric, r.predicted, r.actual)).collect::<Vec<_>>()
    };
    let assembled = copy_experiment(SOURCE, "assembled", |rel, text| (rel != "requests.csv").then(|| (rel.into(), text)));
    let bare = copy_experiment(SOURCE, "bare", |rel, text| rel.strip_prefix("results/").map(|name| (name.to_string(), text)));
    std::fs::write(bare.dir.join("vllm.log"), LOG).unwrap();
    assert!(!bare.dir.join("results").exists() && !bare.dir.join("exp-config.yaml").exists());
    let want = rows(&assembled.dir);
    assert!(want.len() > 20);
    assert_eq!(rows(&bare.dir), want);
    let exp = blis_calibrate::experiment::Experiment::load(&bare.dir).unwrap();
    assert_eq!((exp.results.as_path(), exp.model_from), (bare.dir.as_path(), blis_calibrate::experiment::ModelFrom::ServerModelName));
    // Found as an experiment below a directory, too; an experiment's own
    // results/ stands for the experiment.
    assert_eq!(blis_calibrate::experiment::discover(bare.dir.parent().unwrap()).unwrap(), vec![bare.dir.clone()]);
    assert_eq!(blis_calibrate::experiment::discover(&assembled.dir.join("results")).unwrap(), vec![assembled.dir.clone()]);

    let unnamed = copy_experiment(SOURCE, "unnamed", |rel, text| {
        let text = if rel == "results/config.yaml" { text.replace("  model_name: meta-llama/Llama-2-7b-hf\n", "") } else { text };
        rel.strip_prefix("results/").map(|name| (name.to_string(), text))
    });
    let e = Suite::load(std::slice::from_ref(&unnamed.dir), &Definitions::default()).err().unwrap().to_string();
    assert!(e.contains("exp-config.yaml") && e.contains("not found") && e.contains("model"), "{e}");
}

/// A run that measured another engine (inference-perf's `server.type`) is
/// simulated as vLLM, and the warning says so; a vLLM run warns of nothing.
#[test]
fn a_run_of_another_engine_is_warned_about() {
    let sglang = copy_experiment(SOURCE, "sglang", |rel, text| match rel {
        "results/config.yaml" => {
            assert!(text.contains("  type: vllm\n"), "the shipped config changed");
            Some((rel.into(), text.replace("  type: vllm\n", "  type: sglang\n")))
        }
        _ => Some((rel.into(), text)),
    });
    let exp = blis_calibrate::experiment::Experiment::load(&sglang.dir).unwrap();
    assert!(exp.warnings().iter().any(|w| w.contains("server.type = sglang")), "{:?}", exp.warnings());
    let vllm =
        blis_calibrate::experiment::Experiment::load(&copy_experiment(SOURCE, "vllm", |rel, text| Some((rel.into(), text))).dir).unwrap();
    assert!(vllm.warnings().iter().all(|w| !w.contains("server.type")), "{:?}", vllm.warnings());
}

/// A sweep (`load.sweep`, no stages in the configuration) is reproduced
/// with the stages its reports record: here the roleplay run recast as a
/// one-stage sweep. Without a probe (`num_requests: 0`) it validates to the
/// original's rows. With one, the probe is simulated first: its requests
/// are in no row, and the stage's are compared as before, on a server the
/// probe warmed. Its per-request report, holding the probe's requests
/// before the stage's (as its `stage_-1` report counts them), replays the
/// stage's.
#[test]
fn a_sweep_replays_the_stages_its_reports_record() {
    let as_sweep = |probe: &'static str| {
        move |rel: &str, text: String| match rel {
            "results/config.yaml" => {
                let stages = "  stages:\n  - rate: 6.0\n    duration: 1200\n  sweep: null\n";
                assert!(text.contains(stages), "the shipped config changed");
                let sweep = format!("  stages: []\n  sweep:\n    type: linear\n    {probe}\n    num_stages: 3\n    stage_duration: 1200\n");
                Some(text.replace(stages, &sweep))
            }
            _ => Some(text),
        }
    };
    let (no_probe, probe) = (as_sweep("num_requests: 0"), as_sweep("num_requests: 30\n    timeout: 60"));
    let original = copy_experiment(SOURCE, "original", |rel, text| Some((rel.into(), text)));
    let sweep = copy_experiment(SOURCE, "sweep", |rel, text| no_probe(rel, text).map(|t| (rel.into(), t)));
    let validate = |dir: &std::path::Path| {
        let suite = Suite::load(&[dir.to_path_buf()], &Definitions::default()).unwrap();
        suite.validate(&CoefficientSet::default_set(), 0).unwrap().remove(0)
    };
    let want = validate(&original.dir);
    assert_eq!(validate(&sweep.dir).rows, want.rows);
    let exp = blis_calibrate::experiment::Experiment::load(&sweep.dir).unwrap();
    assert_eq!(exp.workload.load.stages.len(), 1, "one stage report of the three the sweep asked for");
    assert!(exp.warnings().iter().all(|w| !w.contains("sweep")), "the burst probe is simulated: {:?}", exp.warnings());

    // inference-perf's per-request report, the probe's 30 entries first.
    let probed = copy_experiment(SOURCE, "probed", |rel, text| match rel {
        "requests.csv" => {
            let mut entries: Vec<serde_json::Value> = serde_json::from_str(&per_request_report(&text)).unwrap();
            entries.extend((0..30).map(|k| {
                let start = 4990.0 + f64::from(k) * 0.1;
                serde_json::json!({"start_time": start, "end_time": start + 1.0, "info": {"input_tokens": 700, "output_token_times": [start + 0.05]}, "error": null})
            }));
            Some(("results/per_request_lifecycle_metrics.json".into(), serde_json::to_string(&entries).unwrap()))
        }
        "results/stage_0_lifecycle_metrics.json" => Some((rel.into(), text)),
        _ => probe(rel, text).map(|t| (rel.into(), t)),
    });
    let stage0 = std::fs::read_to_string(probed.dir.join("results/stage_0_lifecycle_metrics.json")).unwrap();
    let mut probe_report: serde_json::Value = serde_json::from_str(&stage0).unwrap();
    probe_report["successes"]["count"] = 30.into();
    probe_report["failures"]["count"] = 0.into();
    std::fs::write(probed.dir.join("results/stage_-1_lifecycle_metrics.json"), probe_report.to_string()).unwrap();
    let replayed = validate(&probed.dir);
    let measured =
        |rows: &[blis_calibrate::validate::compare::MetricRow]| rows.iter().map(|r| (r.stage, r.metric, r.actual)).collect::<Vec<_>>();
    assert_eq!(measured(&replayed.rows), measured(&want.rows), "the same stage, compared to the same measurements");
    assert_eq!(replayed.requests.map(|r| r.matched), want.requests.map(|r| r.matched));
    let ttft =
        |rows: &[blis_calibrate::validate::compare::MetricRow]| rows.iter().find(|r| r.metric == Metric::TtftMean).unwrap().predicted;
    assert!(ttft(&replayed.rows) < ttft(&want.rows), "the probe's prompts are cached when the stage sends them again");
    // Without the probe's report, its entries are one too many.
    std::fs::remove_file(probed.dir.join("results/stage_-1_lifecycle_metrics.json")).unwrap();
    let e = Suite::load(std::slice::from_ref(&probed.dir), &Definitions::default()).err().unwrap().to_string();
    assert!(e.contains("per_request_lifecycle_metrics.json") && e.contains("entries"), "{e}");

    // Without per-request records, the probe and the stage are what an
    // explicit first stage of 30 requests in 5 s, then the stage, would be.
    let unrecorded = copy_experiment(SOURCE, "unrecorded", |rel, text| {
        (rel != "requests.csv").then(|| probe(rel, text).map(|t| (rel.into(), t))).flatten()
    });
    let explicit = copy_experiment(SOURCE, "explicit", |rel, text| match rel {
        "requests.csv" => None,
        "results/config.yaml" => Some((
            rel.into(),
            text.replace("  interval: 1.0\n", "  interval: 0.0\n")
                .replace("  stages:\n  - rate: 6.0", "  stages:\n  - rate: 6.0\n    duration: 5\n  - rate: 6.0"),
        )),
        "results/stage_0_lifecycle_metrics.json" => Some(("results/stage_1_lifecycle_metrics.json".into(), text)),
        _ => Some((rel.into(), text)),
    });
    std::fs::copy(explicit.dir.join("results/stage_1_lifecycle_metrics.json"), explicit.dir.join("results/stage_0_lifecycle_metrics.json"))
        .unwrap();
    let predicted = |rows: &[blis_calibrate::validate::compare::MetricRow], stage: u32| {
        rows.iter().filter(|r| r.stage == StageLabel::Stage(stage)).map(|r| (r.metric, r.predicted)).collect::<Vec<_>>()
    };
    let (unrecorded, explicit) = (validate(&unrecorded.dir), validate(&explicit.dir));
    assert!(!predicted(&unrecorded.rows, 0).is_empty());
    assert_eq!(predicted(&unrecorded.rows, 0), predicted(&explicit.rows, 1));

    // A harness's requests.csv with the probe's rows (stage -1) first, every
    // send time counted from the probe's first: the stage's rows alone.
    let with_probe_rows = |text: &str| {
        let (header, rows) = text.split_once('\n').unwrap();
        let probe: String = (0..30).map(|k| format!("{k},-1,{},700,250,0,900.0,40.0\n", k * 100_000)).collect();
        let shifted: String = rows
            .lines()
            .map(|line| {
                let mut f: Vec<String> = line.split(',').map(str::to_string).collect();
                f[0] = (f[0].parse::<u64>().unwrap() + 30).to_string();
                f[2] = (f[2].parse::<u64>().unwrap() + 65_000_000).to_string();
                f.join(",") + "\n"
            })
            .collect();
        format!("{header}\n{probe}{shifted}")
    };
    let csv_probed = copy_experiment(SOURCE, "csv-probed", |rel, text| match rel {
        "requests.csv" => Some((rel.into(), with_probe_rows(&text))),
        _ => no_probe(rel, text).map(|t| (rel.into(), t)),
    });
    let replayed = validate(&csv_probed.dir);
    assert_eq!(replayed.rows, want.rows);
    assert_eq!(replayed.requests.map(|r| r.matched), want.requests.map(|r| r.matched));
    // A run that was no sweep has no stage -1.
    let not_sweep = copy_experiment(SOURCE, "csv-not-sweep", |rel, text| match rel {
        "requests.csv" => Some((rel.into(), with_probe_rows(&text))),
        _ => Some((rel.into(), text)),
    });
    let e = Suite::load(std::slice::from_ref(&not_sweep.dir), &Definitions::default()).err().unwrap().to_string();
    assert!(e.contains("requests.csv:2:") && e.contains("stage` = -1") && e.contains("load.sweep"), "{e}");
}
