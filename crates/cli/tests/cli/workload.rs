//! Workload commands end to end: specs, built-ins, traces, ServeGen import,
//! compose, generate and stats; and their bad-input contract.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{blis, is_empty_dir, scratch, stderr, stdout};

const MODEL: &[&str] = &["--model", "meta-llama/llama-3.1-8b-instruct"];

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name).display().to_string()
}

fn ok(args: &[&str]) -> String {
    let out = blis(args);
    assert!(out.status.success(), "blis {args:?} failed: {}", stderr(&out));
    stdout(&out)
}

fn run_json(extra: &[&str]) -> (String, Value) {
    let mut args = vec!["run", "-q", "--format", "json"];
    args.extend_from_slice(MODEL);
    args.extend_from_slice(extra);
    let text = ok(&args);
    let json = serde_json::from_str(&text).expect("one JSON document");
    (text, json)
}

#[test]
fn a_spec_runs_with_per_group_breakdowns_and_client_side_latency() {
    let spec = example("language.yaml");
    let (a, j) = run_json(&["--workload-spec", &spec, "--num-requests", "300"]);
    assert_eq!(j["requests"]["completed"], 300);
    let b = &j["breakdowns"];
    assert_eq!(b["client"].as_object().unwrap().keys().collect::<Vec<_>>(), ["chat", "dashboard", "pipeline"]);
    // Per tenant and per SLO class live in the cluster report, with SLO attainment.
    assert_eq!(j["cluster"]["tenants"].as_object().unwrap().keys().collect::<Vec<_>>(), ["acme", "globex"]);
    assert_eq!(j["cluster"]["slo_classes"].as_object().unwrap().len(), 3);
    let tenant_completed: u64 = j["cluster"]["tenants"].as_object().unwrap().values().map(|g| g["completed"].as_u64().unwrap()).sum();
    assert_eq!(tenant_completed, 300);
    assert!(b.get("stage").is_none(), "one stage: no stage breakdown");
    let completed: u64 = b["client"].as_object().unwrap().values().map(|g| g["completed"].as_u64().unwrap()).sum();
    assert_eq!(completed, 300);
    // Only `chat` has a network model (40 ms RTT): its client-side TTFT exceeds the server-side one by at least the RTT.
    let c = &j["client_latency_ms"];
    assert_eq!(c["by_client"].as_object().unwrap().keys().collect::<Vec<_>>(), ["chat"]);
    let server = b["client"]["chat"]["latency_ms"]["ttft"]["mean"].as_f64().unwrap();
    assert!(c["ttft"]["mean"].as_f64().unwrap() >= server + 40.0);
    assert_eq!(j["config"]["num-requests"]["source"], "flag");
    assert_eq!(j["config"]["rate"]["value"], 15.0);
    assert_eq!(j["config"]["rate"]["source"], "derived");
    assert!(j["config"].get("prompt-tokens").is_none(), "synthetic knobs do not apply");
    // Deterministic: byte-identical JSON.
    let (again, _) = run_json(&["--workload-spec", &spec, "--num-requests", "300"]);
    assert_eq!(a, again);
}

#[test]
fn presets_take_a_rate() {
    let (_, j) = run_json(&["--workload", "preset:chatbot", "--rate", "20", "--num-requests", "200"]);
    assert_eq!(j["config"]["rate"], serde_json::json!({"value": 20.0, "source": "flag"}));
    assert_eq!(j["requests"]["completed"], 200);
    assert!(j["kv_cache"]["prefix_hit_rate"].as_f64().unwrap() > 0.2, "the shared system prompt is cached");
    // 200 arrivals at 20/s span about 10 s; the run lasts that plus the last answers.
    let duration = j["simulated_duration_s"].as_f64().unwrap();
    assert!((8.0..60.0).contains(&duration), "duration {duration} s");
}

#[test]
fn a_generated_trace_replays_as_the_spec_runs() {
    let dir = scratch("generate-replay");
    let csv = dir.join("requests.csv");
    let err =
        blis(&["workload", "generate", "--spec", &example("reasoning.yaml"), "--num-requests", "150", "--output", csv.to_str().unwrap()]);
    assert!(err.status.success(), "{}", stderr(&err));
    assert!(stderr(&err).contains("multi-turn"), "later rounds are not in a generated trace: {}", stderr(&err));
    assert!(dir.join("requests.header.yaml").exists());
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 151);
    assert!(text.starts_with("request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message\n"));

    // A single-turn spec: replaying its trace reproduces the run exactly.
    let csv = dir.join("chat.csv");
    ok(&["workload", "generate", "--spec", "preset:multidoc", "--num-requests", "250", "--output", csv.to_str().unwrap()]);
    let (_, replayed) = run_json(&["--trace", csv.to_str().unwrap()]);
    let (_, direct) = run_json(&["--workload", "preset:multidoc", "--num-requests", "250"]);
    for k in ["requests", "tokens", "latency_ms", "kv_cache", "batch", "breakdowns"] {
        assert_eq!(replayed[k], direct[k], "{k}");
    }
    let (_, capped) = run_json(&["--trace", csv.to_str().unwrap(), "--num-requests", "40"]);
    assert_eq!(capped["requests"]["injected"], 40);
    // A name without .csv is a prefix, as `--trace` and `blis replay --trace` read it.
    let prefix = dir.join("run1");
    ok(&["workload", "generate", "--spec", "preset:multidoc", "--num-requests", "250", "--output", prefix.to_str().unwrap()]);
    assert!(dir.join("run1.csv").is_file() && dir.join("run1.header.yaml").is_file() && !prefix.exists());
    let replayed = blis(&["replay", "--trace", prefix.to_str().unwrap(), "--model", "qwen/qwen2.5-7b-instruct", "-q"]);
    assert!(replayed.status.success(), "{}", stderr(&replayed));
}

#[test]
fn mooncake_traces_replay_with_shared_blocks() {
    let (_, j) = run_json(&["--trace", &example("mooncake-sample.jsonl")]);
    assert_eq!(j["requests"]["completed"], 400);
    assert!(j["kv_cache"]["prefix_hit_rate"].as_f64().unwrap() > 0.2, "conversations re-send their hash ids");
}

#[test]
fn servegen_directories_convert_to_runnable_specs() {
    let dir = scratch("servegen");
    let out = dir.join("sub").join("w.yaml");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let err = blis(&[
        "convert",
        "servegen",
        "--path",
        &example("servegen/language-mini"),
        "--span-end",
        "1800",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(err.status.success(), "{}", stderr(&err));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("horizon: 1800000000") && text.contains("process: weibull") && text.contains("field: input_tokens"), "{text}");
    let (_, j) = run_json(&["--workload-spec", out.to_str().unwrap()]);
    assert_eq!(j["breakdowns"]["client"].as_object().unwrap().len(), 3);
    // The checked-in example is what the command produces.
    let regenerated = dir.join("servegen-language.yaml");
    let examples_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_blis"))
        .current_dir(examples_dir.join(".."))
        .args(["convert", "servegen", "--path", "examples/servegen/language-mini", "--output", regenerated.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(status.status.success());
    // Identical but for where the dataset files are referenced from.
    let strip = |p: &Path| std::fs::read_to_string(p).unwrap().lines().filter(|l| !l.contains("file:")).collect::<Vec<_>>().join("\n");
    assert_eq!(strip(&regenerated), strip(&examples_dir.join("servegen-language.yaml")));
}

/// A spec so slow that nothing arrives within its horizon runs, says so,
/// and reports no latency rather than 0 ms.
#[test]
fn a_run_where_nothing_arrives_warns_and_reports_null_latencies() {
    let spec = scratch("nothing-arrives").join("w.yaml");
    ok(&["convert", "servegen", "--path", &example("servegen/language-mini"), "--rate", "1e-9", "--output", spec.to_str().unwrap()]);
    let mut args = vec!["run", "-q", "--format", "json", "--workload-spec", spec.to_str().unwrap()];
    args.extend_from_slice(MODEL);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: no request arrived within the workload's span"), "{}", stderr(&out));
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["requests"]["injected"], 0);
    for metric in ["ttft", "tpot", "itl", "e2e", "scheduling_delay"] {
        let d = &j["latency_ms"][metric];
        assert_eq!(d["count"], 0, "{metric}");
        for stat in ["mean", "min", "p50", "p90", "p95", "p99", "max"] {
            assert!(d[stat].is_null(), "{metric}.{stat}: {}", d[stat]);
        }
    }
}

#[test]
fn compose_merges_specs_into_a_runnable_one() {
    let dir = scratch("compose");
    let out = dir.join("merged.yaml");
    let err = blis(&["compose", "--from", &example("language.yaml"), "--from", "preset:chatbot", "--output", out.to_str().unwrap()]);
    assert!(err.status.success(), "{}", stderr(&err));
    assert!(stderr(&err).contains("renamed"), "chatbot's client `chat` clashes with language.yaml's: {}", stderr(&err));
    let (_, j) = run_json(&["--workload-spec", out.to_str().unwrap(), "--num-requests", "200"]);
    assert_eq!(j["breakdowns"]["client"].as_object().unwrap().len(), 4);
    assert_eq!(j["config"]["rate"]["value"], 25.0);
}

#[test]
fn stats_print_a_table_and_write_a_plot() {
    let dir = scratch("stats");
    let plot = dir.join("p.svg");
    let text = ok(&["workload", "stats", "--spec", "scenario:unfair-tenants", "--plot", plot.to_str().unwrap()]);
    assert!(text.contains("bulk") && text.contains("premium") && text.contains("gap CV") && text.contains("Input length"), "{text}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("Arrival rate by client") && svg.contains("premium"));
    let list = ok(&["workload", "list"]);
    for name in [
        "preset:chatbot",
        "preset:contentgen",
        "preset:summarization",
        "preset:multidoc",
        "scenario:bursty-traffic",
        "scenario:diurnal-cycle",
        "scenario:unfair-tenants",
        "scenario:prefix-heavy",
        "scenario:mixed-slo",
    ] {
        assert!(list.contains(name), "{name}");
    }
    assert!(ok(&["workload", "show", "preset:chatbot"]).contains("prefix_group: chat-system-prompt"));
}

/// Runs `args` with `--output`/`-o` into a fresh directory and checks the
/// bad-input contract: exit 2, one line naming the problem, no files.
fn rejected(name: &str, args: &[&str], output_flag: &str, output_name: &str) -> String {
    let dir = scratch(name);
    let out_path: PathBuf = dir.join(output_name);
    let mut full = args.to_vec();
    full.extend_from_slice(&[output_flag, out_path.to_str().unwrap()]);
    let out = blis(&full);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{name}: expected exit code 2, stderr: {err}");
    assert!(!err.contains("panicked"), "{name}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{name}: expected one line, got: {err}");
    assert!(err.starts_with("error: "), "{name}: {err}");
    assert!(is_empty_dir(&dir), "{name}: left a file behind");
    err
}

#[test]
fn bad_workload_input_gives_one_clear_line_and_no_output() {
    let dir = scratch("bad-specs");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let unknown_key = write("unknown.yaml", "aggregate_rate: 5\nnum_requests: 10\nclients:\n  - id: a\n    arival: {process: poisson}\n");
    let nan_rate = write("nan.yaml", "aggregate_rate: .nan\nnum_requests: 10\nclients: [{id: a}]\n");
    let bad_trace = write("bad.csv", "request_id,client_id\n0,a\n");
    let run = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["run", "--model", "meta-llama/llama-3.1-8b-instruct"].iter().map(|s| s.to_string()).collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    for (name, args, needle) in [
        ("unknown-key", run(&["--workload-spec", &unknown_key]), "clients[0].arival: unknown field `arival`"),
        ("nan-rate", run(&["--workload-spec", &nan_rate]), "aggregate_rate: NaN must be in (0"),
        ("missing-spec", run(&["--workload-spec", "/nonexistent/w.yaml"]), "cannot read /nonexistent/w.yaml"),
        ("unknown-preset", run(&["--workload", "preset:nope"]), "allowed: preset:chatbot"),
        ("not-builtin", run(&["--workload", "w.yaml"]), "expected preset:NAME or scenario:NAME"),
        ("two-workloads", run(&["--workload", "preset:chatbot", "--trace", "x.csv"]), "--workload and --trace are alternatives"),
        (
            "synthetic-flag",
            run(&["--workload", "preset:chatbot", "--prompt-tokens", "9"]),
            "--prompt-tokens does not apply with --workload",
        ),
        ("trace-rate", run(&["--trace", &bad_trace, "--rate", "3"]), "--rate does not apply with --trace"),
        ("trace-columns", run(&["--trace", &bad_trace]), "bad.csv:1: missing column"),
        ("trace-format", run(&["--trace", "x.parquet"]), "allowed: .csv (trace v2), .jsonl (Mooncake)"),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let e = rejected(name, &args, "--output", "out.json");
        assert!(e.contains(needle), "{name}: {e}");
    }
    let e = rejected("generate-bad", &["workload", "generate", "--spec", &unknown_key], "--output", "t.csv");
    assert!(e.contains("arival"), "{e}");
    let e = rejected("convert-bad", &["convert", "servegen", "--path", dir.to_str().unwrap()], "--output", "w.yaml");
    assert!(e.contains("no chunk-<id>-trace.csv"), "{e}");
    let reasoning = example("reasoning.yaml");
    let e = rejected("compose-bad", &["compose", "--from", &example("language.yaml"), "--from", &reasoning], "--output", "m.yaml");
    assert!(e.contains("category: is reasoning but"), "{e}");
    let e = rejected("stats-bad", &["workload", "stats", "--spec", &nan_rate], "--plot", "p.svg");
    assert!(e.contains("aggregate_rate"), "{e}");
    let e = rejected(
        "generate-negative-seed",
        &["workload", "generate", "--spec", &example("language.yaml"), "--seed", "-1"],
        "--output",
        "t.csv",
    );
    assert!(e.contains("'--seed <N>': `-1` is negative: a count is 0 or more"), "{e}");
    let e = rejected(
        "convert-negative-start",
        &["convert", "servegen", "--path", &example("servegen/language-mini"), "--span-start", "-5"],
        "--output",
        "w.yaml",
    );
    assert!(e.contains("'--span-start <SECONDS>': `-5` is negative: a count is 0 or more"), "{e}");
}

/// An inference-perf profile works as-is as a workload spec: each stage
/// sends rate × duration requests (here the profile of a real H100 run:
/// 8/s × 600 s then 20/s × 600 s), and the client's 300 s timeout applies.
#[test]
fn an_inference_perf_profile_runs_as_a_workload_spec_with_its_stage_counts() {
    let profile = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/vllm-h100/20260217-231439-llama-2-7b-tp1-general/profile.yaml");
    let out = blis(&[
        "run",
        "-q",
        "--format",
        "json",
        "--model",
        "meta-llama/Llama-2-7b-hf",
        "--workload-spec",
        profile,
        "--max-num-seqs",
        "128",
        "--max-num-batched-tokens",
        "2048",
        "--max-model-len",
        "4096",
        "--num-gpu-blocks",
        "7462",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(j["requests"]["injected"], 16_800);
    let stages = j["breakdowns"]["stage"].as_object().unwrap();
    let sent = |s: &str| ["completed", "dropped", "timed_out"].iter().map(|k| stages[s][k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sent("0"), sent("1")), (4800, 12_000));
    assert_eq!(j["config"]["client-timeout"], serde_json::json!({"value": 300.0, "source": "derived"}));
    // --rate and --num-requests do not apply: the stages set them.
    let e = blis(&["run", "--model", "meta-llama/Llama-2-7b-hf", "--workload-spec", profile, "--rate", "3"]);
    assert_eq!(e.status.code(), Some(2));
    assert!(stderr(&e).contains("--rate does not apply"), "{}", stderr(&e));
}

/// inference-perf's `synthetic` and `random` data generators: lengths drawn
/// from their distributions (means within 3 % over 1 200 requests), prompts
/// that share prefixes (synthetic) or nothing (random).
#[test]
fn inference_perf_synthetic_and_random_configs_run_with_their_length_distributions() {
    let dir = scratch("inference-perf-drawn");
    let synthetic = example("inference-perf-synthetic.yaml");
    let random = dir.join("random.yaml");
    std::fs::write(&random, std::fs::read_to_string(&synthetic).unwrap().replace("type: synthetic", "type: random")).unwrap();
    for (spec, shares) in [(synthetic.clone(), true), (random.to_str().unwrap().to_string(), false)] {
        let out = blis(&["run", "-q", "--format", "json", "--model", "meta-llama/llama-3.1-8b-instruct", "--workload-spec", &spec]);
        assert!(out.status.success(), "{}", stderr(&out));
        let j: Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
        assert_eq!(j["requests"]["injected"], 1200, "5/s × 60 s + 15/s × 60 s");
        let per_request = |k: &str| j["tokens"][k].as_f64().unwrap() / 1200.0;
        assert!((per_request("input_total") / 1024.0 - 1.0).abs() < 0.03, "{}", per_request("input_total"));
        assert!((per_request("output_total") / 192.0 - 1.0).abs() < 0.03, "{}", per_request("output_total"));
        let hit = j["kv_cache"]["prefix_hit_rate"].as_f64().unwrap();
        assert_eq!(hit > 0.5, shares, "prefix hit rate {hit}");
        // Two 60 s stages, 1 s apart, each drained before the next: the run
        // ends seconds after the last send, not at the 300 s client deadline
        // of a request that finished long before.
        let duration_s = j["simulated_duration_s"].as_f64().unwrap();
        assert!((121.0..140.0).contains(&duration_s), "simulated duration {duration_s} s");
    }
}

/// A dataset configuration (`shareGPT`) says nothing of its lengths, so
/// `blis run` refuses it in one line that says where it does work.
#[test]
fn an_inference_perf_dataset_config_is_refused_with_what_to_do_instead() {
    let dir = scratch("inference-perf-dataset");
    let spec = dir.join("sharegpt.yaml");
    let synthetic = std::fs::read_to_string(example("inference-perf-synthetic.yaml")).unwrap();
    std::fs::write(&spec, synthetic.replace("type: synthetic", "type: shareGPT")).unwrap();
    let out = blis(&["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--workload-spec", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains("sharegpt.yaml") && e.contains("`data.type` = shareGPT") && e.contains("blis validate"), "{e}");
}

/// inference-perf's `shared_prefix` generator with its lengths drawn from
/// distributions (the newer spelling): outputs follow theirs (the mean of
/// 320 prompts' draws within 3 %, about three standard errors), every
/// prompt lies within the bounds, and the shared system prompts hit the
/// prefix cache.
#[test]
fn an_inference_perf_shared_prefix_config_draws_its_lengths() {
    let spec = example("inference-perf-shared-prefix.yaml");
    let out = blis(&["run", "-q", "--format", "json", "--model", "meta-llama/llama-3.1-8b-instruct", "--workload-spec", &spec]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(j["requests"]["injected"], 1200);
    let per_request = |k: &str| j["tokens"][k].as_f64().unwrap() / 1200.0;
    assert!((per_request("output_total") / 256.0 - 1.0).abs() < 0.03, "{}", per_request("output_total"));
    // System prompts 500..=1500 tokens, questions 10..=1000 (mean ≈ 194).
    assert!((600.0..1400.0).contains(&per_request("input_total")), "{}", per_request("input_total"));
    let hit = j["kv_cache"]["prefix_hit_rate"].as_f64().unwrap();
    assert!(hit > 0.5, "prefix hit rate {hit}");
}

/// A request the admission policy refuses ends there, as a 429 does for
/// inference-perf: its stage still drains, so the next stage starts; it gets
/// a row in --requests-csv (no instance, the policy's reason) and counts in
/// the per-stage breakdown.
#[test]
fn rejected_requests_end_and_let_the_next_stage_start() {
    let dir = scratch("inference-perf-rejected");
    let policy = dir.join("bucket.yaml");
    std::fs::write(&policy, "admission:\n  type: token-bucket\n  params:\n    capacity: 5\n    refill_per_s: 2\n").unwrap();
    let csv = dir.join("requests.csv");
    let spec = example("inference-perf-synthetic.yaml");
    let (_, j) =
        run_json(&["--workload-spec", &spec, "--policy-config", policy.to_str().unwrap(), "--requests-csv", csv.to_str().unwrap()]);
    let cluster = &j["cluster"]["requests"];
    assert_eq!(cluster["arrived"], 1200, "both stages sent everything");
    let rejected = cluster["rejected"].as_u64().unwrap();
    assert!(rejected > 0 && cluster["rejected_by_reason"]["token_bucket_empty"] == rejected, "{cluster}");
    let by_stage = j["breakdowns"]["stage"].as_object().unwrap();
    assert_eq!(by_stage.values().map(|g| g["rejected"].as_u64().unwrap()).sum::<u64>(), rejected);
    assert!(by_stage.values().all(|g| g["rejected"].as_u64().unwrap() > 0), "{by_stage:?}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 1200, "one row per request");
    let refused: Vec<&Vec<&str>> = rows.iter().filter(|r| r[2] == "token_bucket_empty").collect();
    assert_eq!(refused.len() as u64, rejected);
    assert!(refused.iter().all(|r| r[1].is_empty() && r[5] == "0"), "no instance, no output");
    assert!(rows.iter().filter(|r| r[2] != "token_bucket_empty").all(|r| r[1] == "0" && r[2] == "completed"));
}
