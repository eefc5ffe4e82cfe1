//! `blis run` on valid input: report contents, determinism, outputs.

use serde_json::Value;

use crate::{blis, json_of, scratch, stderr, stdout};

const SMALL: &[&str] = &["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "200", "--rate", "20"];

fn run_json(extra: &[&str]) -> (String, Value) {
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["--format", "json"]);
    args.extend_from_slice(extra);
    let out = blis(&args);
    assert!(out.status.success(), "blis failed: {}", stderr(&out));
    let text = stdout(&out);
    let json: Value = serde_json::from_str(&text).expect("stdout is one JSON document");
    (text, json)
}

#[test]
fn the_default_run_works_with_no_files_or_network() {
    // A first run shows the human summary, not a JSON document.
    let out = blis(&["run", "--model", "meta-llama/llama-3.1-8b-instruct"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("=") && stdout(&out).contains("BLIS simulation result"), "{}", stdout(&out));
    assert!(stdout(&out).contains("Requests completed / injected:              1000 / 1000"), "{}", stdout(&out));
    assert!(!stderr(&out).contains("BLIS simulation result"), "the summary is printed once");
    // JSON when asked; the summary then goes to stderr.
    let out = blis(&["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--format", "json"]);
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["requests"]["completed"], 1000);
    assert!(stderr(&out).contains("BLIS simulation result"));
}

#[test]
fn same_seed_gives_byte_identical_json_and_different_seeds_differ() {
    let (a, _) = run_json(&["--seed", "7"]);
    let (b, _) = run_json(&["--seed", "7"]);
    let (c, _) = run_json(&["--seed", "8"]);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn report_has_metadata_counts_latencies_and_sources() {
    let (_, j) = run_json(&["--seed", "3", "--max-num-seqs", "64", "--prefix-tokens", "128", "--prefix-groups", "2"]);
    assert_eq!(j["schema_version"], 1);
    assert_eq!(j["simulator"]["name"], "blis");
    assert!(j["simulator"]["version"].is_string());
    assert_eq!(j["seed"], 3);
    assert_eq!(j["deployment"]["model"], "meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(j["deployment"]["hardware"], "H100");
    assert_eq!(j["config"]["max-num-seqs"]["source"], "flag");
    assert_eq!(j["config"]["max-num-seqs"]["value"], 64);
    assert_eq!(j["config"]["max-num-batched-tokens"]["source"], "default");
    assert_eq!(j["config"]["num-gpu-blocks"]["source"], "derived");
    // The derived count is what fits in the memory left for the KV cache:
    // Llama-3.1-8B stores 2 MiB per 16-token block.
    let kv = &j["deployment"]["kv_memory_per_gpu"];
    let gib = |k: &str| kv[k].as_f64().unwrap();
    let left = gib("requested_gib") - gib("weights_gib") - gib("activation_peak_gib") - gib("non_torch_gib");
    assert!((left - gib("kv_cache_gib")).abs() < 1e-9, "{kv}");
    let blocks = j["deployment"]["num_gpu_blocks"].as_f64().unwrap();
    assert_eq!(blocks, (gib("kv_cache_gib") * 512.0).floor(), "{kv}");
    let (_, given) = run_json(&["--num-gpu-blocks", "5000"]);
    assert!(given["deployment"].get("kv_memory_per_gpu").is_none(), "{}", given["deployment"]);
    let r = &j["requests"];
    let sum = ["completed", "queued", "running", "dropped", "timed_out"].iter().map(|k| r[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(r["injected"].as_u64().unwrap(), sum);
    for metric in ["ttft", "tpot", "itl", "e2e", "scheduling_delay"] {
        for stat in ["mean", "p50", "p90", "p95", "p99"] {
            assert!(j["latency_ms"][metric][stat].as_f64().is_some(), "{metric}.{stat}");
        }
    }
    assert!(j["kv_cache"]["prefix_hit_rate"].as_f64().unwrap() > 0.0, "shared prefixes hit the cache");
    for key in ["utilization_peak", "utilization_mean"] {
        assert!(j["kv_cache"][key].as_f64().is_some());
    }
    assert!(j["batch"]["mean_batch_size"].as_f64().unwrap() > 0.0);
    assert_eq!(j["batch"]["steps_clamped"], 0, "the bundled coefficients time every step");
    assert!(j["throughput"]["output_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(j["tokens"]["output_total"], 200 * 256);
}

/// Coefficients that predict a negative or absurdly long step time are
/// clamped to [1 µs, 1 h], and the report counts and flags every such step.
#[test]
fn step_times_outside_one_microsecond_to_one_hour_are_clamped_counted_and_flagged() {
    let args = ["--latency-model", "blackbox", "--alpha-coeffs", "0,0,0", "--beta-coeffs", "-5000,0,1"];
    let (_, j) = run_json(&args);
    let steps = j["batch"]["steps"].as_u64().unwrap();
    assert!(steps > 0);
    // β0 = −5000 µs, 1 µs per decode: only batches of 5001+ decodes would be positive.
    assert_eq!(j["batch"]["steps_clamped"].as_u64(), Some(steps));
    let mut all = SMALL.to_vec();
    all.extend_from_slice(&args);
    assert!(stdout(&blis(&all)).contains("WARNING: step times clamped:"), "the summary flags it");
    // β0 = 1e300 µs: every step at the one-hour ceiling, the clock far from its end.
    let (_, j) = run_json(&["--latency-model", "blackbox", "--alpha-coeffs", "0,0,0", "--beta-coeffs", "1e300,0,0"]);
    let steps = j["batch"]["steps"].as_u64().unwrap();
    assert_eq!(j["batch"]["steps_clamped"].as_u64(), Some(steps));
    assert_eq!(j["simulated_duration_s"].as_f64().map(|d| (d / 3600.0).round() as u64), Some(steps), "{j}");
    assert_eq!(j["batch"]["overheads_clamped"], 0);
}

/// A negative α cannot make time run backwards: overheads below 0 are 0,
/// and the run says so when the flag gave one.
#[test]
fn negative_alpha_flags_and_files_are_named_in_a_warning() {
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["-q", "--latency-model", "blackbox", "--alpha-coeffs=-100,0.5,0", "--beta-coeffs", "5000,0,1"]);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: --alpha-coeffs: α0 = -100 negative;"), "{}", stderr(&out));
    args.truncate(args.len() - 3);
    args.extend_from_slice(&["--alpha-coeffs", "100,0.5,0", "--beta-coeffs", "5000,0,1"]);
    assert!(!stderr(&blis(&args)).contains("warning"), "no warning without a negative α");
    // A trained-physics file with negative terms says so too (blis fit keeps them ≥ 0), in exponent form.
    let dir = crate::scratch("negative-file");
    let bundled =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/coefficients/trained-physics-h100.yaml")).unwrap();
    let mut set: serde_json::Value = serde_yaml_ng::from_str(&bundled).unwrap();
    set["alpha"][0] = (-1e30).into();
    set["beta"][1] = (-2.0).into();
    let file = dir.join("negative.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&set).unwrap()).unwrap();
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["-q", "--coefficients", file.to_str().unwrap()]);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("negative.yaml: α0 = -1e30, β1 = -2 negative; trained-physics's terms"), "{}", stderr(&out));
    // roofline times steps from the GPU's peaks: coefficients given to it are refused, not ignored.
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["--latency-model", "roofline", "--alpha-coeffs", "1,2,3", "--beta-coeffs", "1,2,3"]);
    let out = blis(&args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("roofline takes no coefficients"), "{}", stderr(&out));
}

/// An α of 1e300 µs of queueing delay is clamped to one hour per request,
/// counted and flagged; the bundled coefficients clamp nothing.
#[test]
fn overheads_at_the_one_hour_ceiling_are_counted_and_flagged() {
    let args = ["--latency-model", "blackbox", "--alpha-coeffs", "1e300,0,0", "--beta-coeffs", "5000,0,1"];
    let (_, j) = run_json(&args);
    assert_eq!(j["batch"]["overheads_clamped"], 200, "one per request");
    let mut all = SMALL.to_vec();
    all.extend_from_slice(&args);
    assert!(stdout(&blis(&all)).contains("WARNING: overheads clamped:"), "the summary flags it");
    assert_eq!(run_json(&[]).1["batch"]["overheads_clamped"], 0);
}

/// trained-physics's `--alpha-coeffs` takes the published layout's three
/// values (a queueing delay flat in the running batch, the same run as four
/// with α3 = 0) or BLIS's four; α3 > 0 lengthens every TTFT by α3 per
/// request running at arrival, so more at a higher rate.
#[test]
fn trained_physics_alpha_flag_reads_three_or_four_values() {
    let ttft = |alpha: &str, rate: &str| {
        let base = ["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "200", "--format", "json"];
        crate::json_of(&base, &["--alpha-coeffs", alpha, "--rate", rate]).1["latency_ms"]["ttft"]["mean"].as_f64().unwrap()
    };
    assert_eq!(ttft("3000,500,3000", "20"), ttft("3000,500,3000,0", "20"));
    let [low, high] = [5, 40].map(|r| ttft("3000,500,3000,100", &r.to_string()) - ttft("3000,500,3000", &r.to_string()));
    assert!(0.0 < low && low < high, "TTFT growth {low} ms at 5 req/s, {high} ms at 40");
}

/// The published formula's vectors given as flags (three α, eleven β) read
/// as the published file does: the same run, byte for byte.
#[test]
fn published_layout_flags_read_as_the_published_file() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/coefficients/trained-physics-published.yaml");
    let (from_file, _) = run_json(&["--coefficients", file]);
    let (from_flags, _) = run_json(&[
        "--latency-model",
        "trained-physics",
        "--alpha-coeffs",
        "15563.199579,777.3455,45.907545",
        "--beta-coeffs",
        "0.152128,0.0,1.36252915,0.752037,32.09546717,4.41684444,126.024825,481.8613888,0.0,1.94710771,0.752037",
    ]);
    let latency = |text: &str| serde_json::from_str::<Value>(text).unwrap()["latency_ms"].clone();
    assert_eq!(latency(&from_file), latency(&from_flags));
}

#[test]
fn config_file_values_have_source_file_and_flags_override_them() {
    let dir = scratch("config-file");
    let cfg = dir.join("run.yaml");
    std::fs::write(&cfg, "max-num-seqs: 32\nmax_num_batched_tokens: 1024\nseed: 5\n").unwrap();
    let (_, j) = run_json(&["--config", cfg.to_str().unwrap(), "--seed", "9"]);
    assert_eq!(j["config"]["max-num-seqs"]["source"], "file");
    assert_eq!(j["config"]["max-num-seqs"]["value"], 32);
    assert_eq!(j["config"]["max-num-batched-tokens"]["value"], 1024);
    assert_eq!(j["config"]["seed"]["source"], "flag");
    assert_eq!(j["seed"], 9);
}

/// A run stopped by SIGTERM while writing its outputs removes them: no
/// `.NAME.blis-tmp` is left, and the exit code is 130. The run reads its
/// trace from a FIFO, so it is stopped exactly while blocked reading,
/// after its outputs were opened (opening the FIFO's write end returns
/// once the run has opened the read end).
#[cfg(unix)]
#[test]
fn a_run_stopped_by_a_signal_leaves_no_partial_output() {
    let dir = scratch("sigterm");
    let fifo = dir.join("t.csv");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_blis"))
        .args([
            "run",
            "-q",
            "--model",
            "meta-llama/llama-3.1-8b-instruct",
            "--trace",
            "t.csv",
            "--output",
            "out.json",
            "--requests-csv",
            "r.csv",
        ])
        .current_dir(&dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    assert!(dir.join(".out.json.blis-tmp").exists(), "the output is open");
    // SAFETY: kill(2) on the pid of a child not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    drop(writer);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(stderr(&out).contains("stopped by a signal"), "{}", stderr(&out));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("t.csv")], "only the FIFO remains");
}

/// A checkpoint quantized by a method whose width BLIS cannot read runs in
/// half precision, and the run says so; a method it reads does not warn.
#[test]
fn a_quantization_method_of_unknown_width_is_named_in_a_warning() {
    let dir = scratch("unknown-quant");
    let config =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/models/meta-llama/Llama-3.1-8B-Instruct.json")).unwrap();
    let warns = |method: &str| {
        let path = dir.join(format!("{method}.json"));
        std::fs::write(&path, config.replacen('{', &format!(r#"{{"quantization_config": {{"quant_method": "{method}"}},"#), 1)).unwrap();
        let out = blis(&["run", "-q", "--model-config", path.to_str().unwrap(), "--num-requests", "20"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out).contains(&format!("quant_method `{method}` gives no weight width BLIS knows"))
    };
    assert!(warns("hqq"));
    assert!(!warns("fp8"));
    assert!(!warns("mxfp4"));
}

/// A ModelOpt checkpoint that quantises its KV cache to FP8 is served with
/// an FP8 cache under `--kv-cache-dtype auto`, as vLLM resolves it: the
/// report says so, and the cache holds the blocks of an explicit `fp8`
/// cache, twice those of a `bfloat16` one less a block's rounding; a
/// dtype given wins.
#[test]
fn a_checkpoint_quantising_its_kv_cache_to_fp8_sizes_the_auto_cache_in_fp8() {
    let dir = scratch("modelopt-kv");
    let config =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/models/meta-llama/Llama-3.1-8B-Instruct.json")).unwrap();
    let write = |name: &str, kv_algo: &str| {
        let path = dir.join(name);
        let q = format!(
            r#"{{"quantization_config": {{"quant_method": "modelopt", "quant_algo": "FP8"{kv_algo}, "exclude_modules": ["lm_head"]}},"#
        );
        std::fs::write(&path, config.replacen('{', &q, 1)).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (fp8_kv, half_kv) = (write("fp8-kv.json", r#", "kv_cache_quant_algo": "FP8""#), write("half-kv.json", ""));
    let run = |path: &str, extra: &[&str]| {
        let mut args = vec!["run", "-q", "--model-config", path, "--num-requests", "20", "--format", "json"];
        args.extend_from_slice(extra);
        let out = blis(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()
    };
    let blocks = |j: &Value| j["deployment"]["num_gpu_blocks"].as_u64().unwrap();
    let auto = run(&fp8_kv, &[]);
    assert_eq!(auto["config"]["kv-cache-dtype"], serde_json::json!({ "value": "fp8_e4m3", "source": "derived" }));
    assert_eq!(blocks(&auto), blocks(&run(&half_kv, &["--kv-cache-dtype", "fp8"])));
    let half = run(&fp8_kv, &["--kv-cache-dtype", "bfloat16"]);
    assert_eq!(half["config"]["kv-cache-dtype"]["value"], "bfloat16");
    assert_eq!(blocks(&half), blocks(&run(&half_kv, &[])));
    assert!(blocks(&auto).abs_diff(2 * blocks(&half)) <= 1, "{} vs 2 × {}", blocks(&auto), blocks(&half));
}

/// `--hardware` and `--hardware-config` at different levels: the flag wins
/// over the config file, whichever of the two the flag is.
#[test]
fn a_gpu_flag_overrides_a_gpu_in_the_config_file_either_way() {
    let dir = scratch("gpu-precedence");
    let a40 = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/hardware/A40.json");
    let named = dir.join("named.yaml");
    std::fs::write(&named, "hardware: L40S\n").unwrap();
    let (_, j) = run_json(&["--config", named.to_str().unwrap(), "--hardware-config", a40]);
    assert_eq!(j["deployment"]["hardware"], "NVIDIA A40 48GB");
    let file = dir.join("file.yaml");
    std::fs::write(&file, format!("hardware-config: {a40}\n")).unwrap();
    let (_, j) = run_json(&["--config", file.to_str().unwrap(), "--hardware", "L40S"]);
    assert_eq!(j["deployment"]["hardware"], "L40S");
}

/// Counts may be written as vLLM reads them (32k, 16Ki) or as 1e3, in a
/// flag and in a config file; the ambiguous M is refused with the fix.
#[test]
fn counts_take_vllm_human_readable_forms_and_scientific_notation() {
    let dir = scratch("config-counts");
    let cfg = dir.join("run.yaml");
    std::fs::write(&cfg, "max-num-batched-tokens: 16Ki\n").unwrap();
    let (_, j) = run_json(&["--config", cfg.to_str().unwrap(), "--max-model-len", "32k", "--seed", "1e3"]);
    assert_eq!(j["config"]["max-model-len"]["value"], 32_000);
    assert_eq!(j["config"]["max-num-batched-tokens"], serde_json::json!({"value": 16_384, "source": "file"}));
    assert_eq!(j["seed"], 1000);
    let out = blis(&["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--max-model-len", "32M"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("ambiguous") && stderr(&out).contains("32m or 32Mi"), "{}", stderr(&out));
}

/// Paths inside a `--config` file are relative to the file, wherever blis
/// is run from (the test runs from the crate folder, not the file's).
#[test]
fn paths_in_a_config_file_are_relative_to_the_file() {
    let dir = scratch("config-paths");
    let bundled = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/coefficients/unified-5-h100.yaml");
    std::fs::copy(bundled, dir.join("coefficients.yaml")).unwrap();
    std::fs::write(dir.join("run.yaml"), "latency-model: unified-5\ncoefficients: coefficients.yaml\n").unwrap();
    let (_, j) = run_json(&["--config", dir.join("run.yaml").to_str().unwrap()]);
    assert_eq!(j["config"]["coefficients"]["value"], dir.join("coefficients.yaml").to_str().unwrap(), "{}", j["config"]);
}

#[test]
fn vllm_negative_flags_turn_features_off_and_the_budget_follows_the_model_length() {
    let (_, j) = run_json(&["--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--max-model-len", "4096"]);
    assert_eq!(j["config"]["enable-prefix-caching"]["value"], false);
    assert_eq!(j["config"]["enable-chunked-prefill"]["value"], false);
    assert_eq!(j["config"]["enable-chunked-prefill"]["source"], "flag");
    // vLLM grows the default budget to max-model-len when prompts cannot be chunked.
    assert_eq!(j["config"]["max-num-batched-tokens"]["value"], 8192);
    let (_, j) = run_json(&["--no-enable-chunked-prefill", "--max-model-len", "16384"]);
    assert_eq!(j["config"]["max-num-batched-tokens"]["value"], 16384);
    assert_eq!(j["config"]["max-num-batched-tokens"]["source"], "derived");
}

#[test]
fn output_file_and_per_request_csv_agree_with_the_report() {
    let dir = scratch("outputs");
    let json_path = dir.join("results.json");
    let csv_path = dir.join("per_request.csv");
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["--output", json_path.to_str().unwrap(), "--requests-csv", csv_path.to_str().unwrap(), "--quiet"]);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).is_empty() && stderr(&out).is_empty(), "--output and --quiet keep stdout and stderr clean");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let mut reader = csv::Reader::from_path(&csv_path).unwrap();
    let headers = reader.headers().unwrap().clone();
    let ttft_col = headers.iter().position(|h| h == "ttft_ms").unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 200);
    let mean_ttft = rows.iter().map(|r| r[ttft_col].parse::<f64>().unwrap()).sum::<f64>() / rows.len() as f64;
    let reported = j["latency_ms"]["ttft"]["mean"].as_f64().unwrap();
    assert!((mean_ttft - reported).abs() < 1e-3, "{mean_ttft} vs {reported}");
    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// `--max-concurrency N` makes the client hold N connections: never more
/// than N requests between arrival and finish, each waiting request sent
/// the moment another finishes, so 20 req/s of ~1.7 s requests run closed-loop.
#[test]
fn max_concurrency_caps_the_requests_in_flight() {
    let dir = scratch("max-concurrency");
    let csv_path = dir.join("per_request.csv");
    let (_, j) = run_json(&["--max-concurrency", "4", "--requests-csv", csv_path.to_str().unwrap()]);
    assert_eq!(j["config"]["max-concurrency"], serde_json::json!({"value": 4, "source": "flag"}));
    let mut reader = csv::Reader::from_path(&csv_path).unwrap();
    let headers = reader.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (arrival, finished) = (col("arrival_ms"), col("finished_ms"));
    let spans: Vec<(f64, f64)> =
        reader.records().map(Result::unwrap).map(|r| (r[arrival].parse().unwrap(), r[finished].parse().unwrap())).collect();
    assert_eq!(spans.len(), 200);
    let in_flight_at = |t: f64| spans.iter().filter(|&&(a, f)| a <= t && t < f).count();
    assert_eq!(spans.iter().map(|&(a, _)| in_flight_at(a)).max(), Some(4));
    let finishes: Vec<f64> = spans.iter().map(|&(_, f)| f).collect();
    let at_a_finish = spans.iter().filter(|(a, _)| finishes.contains(a)).count();
    assert!(at_a_finish >= 190, "only {at_a_finish} of 200 sent as another finished");
    let e = blis(&["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--max-concurrency", "0"]);
    assert_eq!(e.status.code(), Some(2));
    assert!(stderr(&e).contains("--max-concurrency 0: must be at least 1"), "{}", stderr(&e));
}

#[test]
fn help_documents_every_flag_in_groups() {
    let out = blis(&["run", "--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    for heading in ["Model and hardware:", "Server (vLLM flags):", "Latency model:", "Workload:", "Run:", "Output:"] {
        assert!(help.contains(heading), "missing heading {heading}");
    }
    for flag in [
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enable-chunked-prefill",
        "--enable-prefix-caching",
        "--long-prefill-token-threshold",
        "--num-gpu-blocks",
        "--gpu-memory-utilization",
        "--prefix-groups",
        "--requests-csv",
        "--alpha-coeffs",
        "--seed",
    ] {
        assert!(help.contains(flag), "missing flag {flag}");
    }
}

/// Async scheduling is on by default, as in vLLM since 0.14: the
/// default run is the run with `--async-scheduling` (all but the knob's
/// source), and
/// `--no-async-scheduling` lets a request that arrives during a step join
/// the next step instead of the one after, so its TTFT is shorter.
#[test]
fn async_scheduling_is_on_by_default_and_can_be_turned_off() {
    let (_, d) = run_json(&[]);
    let (_, given) = run_json(&["--async-scheduling"]);
    let (_, off) = run_json(&["--no-async-scheduling"]);
    let without_config = |j: &Value| {
        j.as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| *k != "config")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<serde_json::Map<_, _>>()
    };
    assert_eq!(without_config(&d), without_config(&given));
    assert_eq!(given["config"]["async-scheduling"]["source"], "flag");
    assert_eq!(
        (&d["config"]["async-scheduling"]["value"], &d["config"]["async-scheduling"]["source"]),
        (&Value::Bool(true), &Value::from("default"))
    );
    assert_eq!(off["config"]["async-scheduling"]["value"], false);
    let ttft = |j: &Value| j["latency_ms"]["ttft"]["mean"].as_f64().unwrap();
    assert!(ttft(&off) < ttft(&d), "sync {} ms, async {} ms", ttft(&off), ttft(&d));
}

#[test]
fn caching_and_chunking_can_be_switched_off() {
    let (_, on) = run_json(&["--prefix-tokens", "256"]);
    let (_, off) = run_json(&[
        "--prefix-tokens",
        "256",
        "--enable-prefix-caching",
        "false",
        "--enable-chunked-prefill",
        "false",
        "--max-model-len",
        "4096",
        "--max-num-batched-tokens",
        "4096",
    ]);
    assert!(on["kv_cache"]["prefix_hit_rate"].as_f64().unwrap() > 0.2);
    assert_eq!(off["kv_cache"]["prefix_hit_rate"].as_f64().unwrap(), 0.0);
    assert_eq!(off["config"]["enable-chunked-prefill"]["value"], false);
}

#[test]
fn coefficients_from_another_gpu_are_flagged_and_the_fitted_one_is_not() {
    let warnings = |flag: &str, gpu: &str| {
        let mut args = SMALL.to_vec();
        args.extend_from_slice(&[flag, gpu]);
        let out = blis(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out).lines().filter(|l| l.starts_with("warning: coefficients")).map(str::to_owned).collect::<Vec<_>>()
    };
    let on = |gpu: &str| warnings("--hardware", gpu);
    let on_config = |path: &std::path::Path| warnings("--hardware-config", path.to_str().unwrap());
    assert!(on("H100").is_empty());
    assert!(on("h100-sxm-80gb").is_empty(), "an alias of the GPU the set was fitted on");
    let h200 = on("H200");
    assert_eq!(h200.len(), 1, "{h200:?}");
    assert!(h200[0].contains("fitted on H100") && h200[0].contains("H200"), "{}", h200[0]);
    // Carried by measured kernel efficiencies to a profiled GPU, by their mean to one nobody profiled.
    let a100 = on("A100-80GB");
    assert!(a100[0].contains("kernel efficiencies") && a100[0].contains("A100-80GB's measured"), "{}", a100[0]);
    assert!(!a100[0].contains("all-reduces cross"), "one GPU has no collectives: {}", a100[0]);
    // At TP > 1 the warning names the link the all-reduces cross: NVLink on an A100 board, PCIe on L40S cards.
    let tp2 = |gpu: &str| {
        let mut args = SMALL.to_vec();
        args.extend_from_slice(&["--hardware", gpu, "--tp", "2"]);
        stderr(&blis(&args)).lines().find(|l| l.starts_with("warning: coefficients")).map(str::to_owned).unwrap_or_default()
    };
    assert!(
        tp2("A100-80GB").contains("its TP 2 all-reduces cross NVLink at 341 GB/s of bus bandwidth (H100: NVLink at 694 GB/s)"),
        "{}",
        tp2("A100-80GB")
    );
    assert!(tp2("L40S").contains("cross PCIe at 49 GB/s"), "{}", tp2("L40S"));
    // `--gpu` is another name of `--hardware`.
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["--gpu", "L40S", "--tp", "2"]);
    let out = blis(&args);
    assert!(stdout(&out).contains("2 × L40S (TP 2)") && stderr(&out).contains(&tp2("L40S")), "{}", stderr(&out));
    let dir = scratch("unprofiled-gpu");
    let sheet = dir.join("b300.json");
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/hardware/A100-80GB.json")).unwrap();
    let mut spec: serde_json::Value = serde_json::from_str(&spec).unwrap();
    spec["name"] = "NVIDIA B300".into();
    spec.as_object_mut().unwrap().remove("kernels");
    std::fs::write(&sheet, spec.to_string()).unwrap();
    let unprofiled = on_config(&sheet);
    assert!(
        unprofiled[0].contains("NVIDIA B300 has no kernel profile") && unprofiled[0].contains("mean efficiencies"),
        "{}",
        unprofiled[0]
    );
    // Roofline has no fitted coefficients, so nothing to extrapolate.
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["--hardware", "A100-80GB", "--latency-model", "roofline"]);
    assert!(!stderr(&blis(&args)).contains("warning: coefficients"));
}

/// `blis models` sizes each bundled model as vLLM loads it: Llama-2-7B's
/// 6.74 B half-precision parameters are 12.6 GiB; Llama-4-Scout FP8's experts
/// take one byte each, its attention, embeddings and LM head two.
#[test]
fn models_lists_sizes_as_vllm_loads_them() {
    let out = blis(&["models"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = |id: &str| {
        text.lines().find(|l| l.trim_start().starts_with(&format!("{id} "))).unwrap_or_else(|| panic!("{id}: {text}")).to_string()
    };
    let llama = row("meta-llama/Llama-2-7b-hf");
    assert!(llama.contains("6.7 B") && llama.contains("12.6 GiB") && llama.contains("none") && llama.contains("dense"), "{llama}");
    let scout = row("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic");
    assert!(
        scout.contains("107.8 B")
            && scout.contains("105.1 GiB")
            && scout.contains("compressed-tensors")
            && scout.contains("MoE, 16 experts, 1 per token, chunked attention of 8192 in 36 of 48 layers"),
        "{scout}"
    );
    assert!(row("deepseek-ai/DeepSeek-V2-Lite").ends_with("latent attention"));
}

/// `blis models | head -1` panicked in `println!` ("failed printing to
/// stdout: Broken pipe"); `blis workload list | head` printed an error. A
/// closed pipe now ends the process quietly by SIGPIPE, as for any Unix
/// filter (exit status 141 in a shell).
#[cfg(unix)]
#[test]
fn writing_into_a_closed_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    for args in [&["models"][..], &["workload", "list"], &["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "20"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_blis")).args(args).stdout(writer).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        assert_eq!(out.status.signal(), Some(13), "{args:?}: {:?} {err}", out.status);
    }
}

/// A stdout that cannot be written (a full disk: `/dev/full`) made
/// `blis models` and `blis convert vllm-log` panic in `println!`; every
/// command now ends with one line naming stdout, exit status 1.
#[cfg(target_os = "linux")]
#[test]
fn a_full_stdout_is_an_error_not_a_panic() {
    let dir = scratch("full-stdout");
    let log = dir.join("vllm.log");
    std::fs::write(&log, "INFO 05-01 12:00:00 [core.py:75] Initializing a V1 LLM engine (v0.11.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', tensor_parallel_size=1\n").unwrap();
    for args in [&["models"][..], &["convert", "vllm-log", "--path", log.to_str().unwrap()], &["workload", "list"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_blis")).args(args).stdout(full).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && err.contains("stdout") && err.trim_end().lines().count() == 1, "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    }
}

/// CPU and disk tiers through the CLI: the report's per-tier section adds up,
/// the per-request CSV gains the load columns and agrees with the report,
/// and the KV events file is byte-identical across runs and balances: a
/// block is removed only after it was stored.
#[test]
fn tiers_report_per_tier_and_kv_events_are_deterministic_and_balanced() {
    let dir = scratch("tiers-events");
    let tiered = ["--num-gpu-blocks", "400", "--prefix-tokens", "1500", "--kv-offloading-size", "0.5", "--kv-tiers", "disk:50"];
    let outputs = |tag: &str| {
        let (csv, events) = (dir.join(format!("{tag}.csv")), dir.join(format!("{tag}.jsonl")));
        let mut extra = tiered.to_vec();
        extra.extend_from_slice(&["--requests-csv", csv.to_str().unwrap(), "--kv-events-output", events.to_str().unwrap()]);
        let (_, json) = run_json(&extra);
        (json, std::fs::read_to_string(csv).unwrap(), std::fs::read_to_string(events).unwrap())
    };
    let (json, csv, events) = outputs("a");
    let offload = &json["kv_cache"]["offload"];
    let tiers = offload["tiers"].as_array().unwrap();
    assert_eq!((tiers[0]["medium"].as_str(), tiers[1]["medium"].as_str()), (Some("cpu"), Some("disk")));
    let loaded: u64 = tiers.iter().map(|t| t["loaded_blocks"].as_u64().unwrap()).sum();
    assert_eq!(loaded, offload["loaded_blocks"].as_u64().unwrap());
    assert!(offload["loads"].as_u64().unwrap() > 0, "the workload reloads prefixes: {offload}");
    assert_eq!(json["config"]["kv-offloading-backend"]["value"], "lmcache", "disk tiers are LMCache's");

    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(header[header.len() - 2..], ["loaded_prompt_tokens", "kv_load_wait_ms"]);
    let loaded_tokens: u64 = csv.lines().skip(1).map(|l| l.split(',').nth_back(1).unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(loaded_tokens, loaded * 16, "every loaded block is some request's 16 loaded tokens");

    let (_, csv_b, events_b) = outputs("b");
    assert_eq!((&csv, &events), (&csv_b, &events_b), "same seed, same bytes");
    let mut held: std::collections::BTreeMap<(String, u64), i64> = Default::default();
    for line in events.lines() {
        let batch: Value = serde_json::from_str(line).unwrap();
        for e in batch["events"].as_array().unwrap() {
            let delta = match e["type"].as_str().unwrap() {
                "BlockStored" => 1,
                "BlockRemoved" => -1,
                other => panic!("unexpected {other}"),
            };
            for h in e["block_hashes"].as_array().unwrap() {
                let n = held.entry((e["medium"].as_str().unwrap().to_string(), h.as_u64().unwrap())).or_default();
                *n += delta;
                assert!(*n >= 0, "{e} removes a block never stored");
            }
        }
    }
    for medium in ["GPU", "CPU", "DISK"] {
        assert!(held.keys().any(|(m, _)| m == medium), "no {medium} events");
    }
    // Without tiers the CSV keeps its columns.
    let plain = dir.join("plain.csv");
    run_json(&["--requests-csv", plain.to_str().unwrap()]);
    assert!(!std::fs::read_to_string(plain).unwrap().contains("kv_load_wait_ms"));
}

/// A MoE server started with a cold Triton cache stalls once per fused-MoE
/// kernel specialization its steps outside the CUDA graphs need: the
/// report counts the compiles and their seconds, which are a whole number of
/// `--moe-kernel-compile`s, and the first requests wait for them. A warm
/// cache (0) and a dense model never stall.
#[test]
fn a_cold_moe_server_stalls_to_compile_its_kernels() {
    let run = |extra: &[&str]| {
        let mut args =
            vec!["run", "--model", "mistralai/Mixtral-8x7B-v0.1", "--tp", "2", "--num-requests", "200", "--rate", "8", "--format", "json"];
        args.extend_from_slice(extra);
        let out = blis(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()
    };
    let cold = run(&["--moe-kernel-compile", "500ms"]);
    let compiles = cold["batch"]["moe_kernel_compiles"].as_u64().unwrap();
    assert!((1..=72).contains(&compiles), "{compiles} compiles");
    assert!((cold["batch"]["moe_compile_stall_s"].as_f64().unwrap() - 0.5 * compiles as f64).abs() < 1e-9);
    let default = run(&[]);
    assert_eq!(default["config"]["moe-kernel-compile"], serde_json::json!({"value": "950ms", "source": "derived"}));
    assert!(default["batch"]["moe_kernel_compiles"].as_u64().unwrap() > 0);
    let warm = run(&["--moe-kernel-compile", "0"]);
    assert_eq!(warm["batch"]["moe_kernel_compiles"], 0);
    let p99 = |j: &Value| j["latency_ms"]["ttft"]["p99"].as_f64().unwrap();
    assert!(p99(&cold) > p99(&warm) + 400.0, "cold TTFT p99 {} vs warm {}", p99(&cold), p99(&warm));
    assert_eq!(run_json(&[]).1["batch"]["moe_kernel_compiles"], 0, "a dense model compiles nothing at run time");
}

/// `--kv-cache-dtype fp8` stores a byte per cached element: vLLM's memory
/// profiler fits twice the blocks in the same memory, and every decode step
/// reads half the KV bytes; `bfloat16` is what `auto` gives a bf16 model.
#[test]
fn an_fp8_kv_cache_holds_twice_the_blocks_and_decodes_faster() {
    let (_, auto) = run_json(&[]);
    let (_, fp8) = run_json(&["--kv-cache-dtype", "fp8"]);
    let blocks = |j: &Value| j["deployment"]["num_gpu_blocks"].as_u64().unwrap();
    assert!(blocks(&fp8).abs_diff(2 * blocks(&auto)) <= 1, "{} fp8 blocks vs {} auto", blocks(&fp8), blocks(&auto));
    assert_eq!(fp8["config"]["kv-cache-dtype"]["value"], "fp8");
    let itl = |j: &Value| j["latency_ms"]["itl"]["mean"].as_f64().unwrap();
    assert!(itl(&fp8) < itl(&auto), "fp8 ITL {} ms vs auto {} ms", itl(&fp8), itl(&auto));
    let (_, half) = run_json(&["--kv-cache-dtype", "bfloat16"]);
    assert_eq!((&half["latency_ms"], blocks(&half)), (&auto["latency_ms"], blocks(&auto)));
}

/// `--quantization fp8` loads a half-precision checkpoint as one-byte
/// weights, as an FP8 checkpoint of the same model would be: half the
/// memory of every linear layer (so more KV blocks) and fewer bytes for
/// each decode step to stream. The embeddings and LM head stay in BF16, as
/// vLLM loads them (Llama-3.1-8B's, 2 × 128 256 × 4 096 × 2 bytes, are
/// 1.957 GiB).
#[test]
fn fp8_quantization_at_load_halves_the_linear_weights() {
    let (_, bf16) = run_json(&[]);
    let (_, fp8) = run_json(&["--quantization", "fp8"]);
    let weights = |j: &Value| j["deployment"]["kv_memory_per_gpu"]["weights_gib"].as_f64().unwrap();
    let embeddings_gib = 2.0 * 128_256.0 * 4096.0 * 2.0 / f64::from(1u32 << 30);
    let expected = embeddings_gib + (weights(&bf16) - embeddings_gib) / 2.0;
    assert!((weights(&fp8) - expected).abs() < 0.01, "{} GiB vs {expected} GiB", weights(&fp8));
    let blocks = |j: &Value| j["deployment"]["num_gpu_blocks"].as_u64().unwrap();
    assert!(blocks(&fp8) > blocks(&bf16));
    let itl = |j: &Value| j["latency_ms"]["itl"]["mean"].as_f64().unwrap();
    assert!(itl(&fp8) < itl(&bf16), "fp8 ITL {} ms vs bf16 {} ms", itl(&fp8), itl(&bf16));
    // A checkpoint quantized already runs with its own method, unchanged.
    let scout = [
        "run",
        "--model",
        "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
        "--tp",
        "2",
        "--max-model-len",
        "8192",
        "--num-requests",
        "5",
        "--format",
        "json",
    ];
    let json = |args: &[&str]| {
        let out = blis(args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()
    };
    let (own, plain) = (json(&[&scout[..], &["--quantization", "compressed-tensors"]].concat()), json(&scout));
    assert_eq!((&own["deployment"], &own["latency_ms"]), (&plain["deployment"], &plain["latency_ms"]));
}

/// Issue 26: `--enable-expert-parallel` spreads a MoE model's experts over
/// its TP GPUs: its MoE layers trade their all-reduce for an all-to-all that
/// moves each token to its k = 2 experts and back, so the bundled set (whose
/// βEP is its all-reduce coefficient: no EP run was fitted) times a slower
/// Mixtral step at TP 2. On a dense model it changes nothing, and says so.
/// The servers start with their MoE kernels compiled, so that a hundred
/// requests compare steps, not the compile stalls of a cold start; their
/// prompts are short, so that the steps compared are decode steps (whole
/// experts take vLLM's default kernel tiles, which pad a long prefill less
/// than the tuned ones of the sharded experts).
#[test]
fn expert_parallel_trades_the_moe_all_reduce_for_an_all_to_all() {
    let mixtral = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--model",
            "mistralai/Mixtral-8x7B-v0.1",
            "--tp",
            "2",
            "--num-requests",
            "100",
            "--rate",
            "10",
            "--format",
            "json",
            "--moe-kernel-compile",
            "0",
        ];
        args.extend_from_slice(&["--prompt-tokens", "32"]);
        args.extend_from_slice(extra);
        let out = blis(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
        (json["latency_ms"]["itl"]["mean"].as_f64().unwrap(), json["config"]["enable-expert-parallel"]["value"].clone())
    };
    let (tp_itl, tp_flag) = mixtral(&[]);
    let (ep_itl, ep_flag) = mixtral(&["--enable-expert-parallel"]);
    assert_eq!((tp_flag, ep_flag), (Value::Bool(false), Value::Bool(true)));
    assert!(ep_itl > tp_itl, "expert-parallel ITL {ep_itl} ms vs tensor-parallel {tp_itl} ms");
    let out = blis(&[
        "run",
        "--model",
        "mistralai/Mixtral-8x7B-v0.1",
        "--tp",
        "2",
        "--num-requests",
        "20",
        "--latency-model",
        "unified-5",
        "--enable-expert-parallel",
    ]);
    assert!(stderr(&out).contains("the unified-5 latency model has no expert-dispatch term"), "{}", stderr(&out));
    let (tp_roofline, _) = mixtral(&["--latency-model", "roofline"]);
    let (ep_roofline, _) = mixtral(&["--latency-model", "roofline", "--enable-expert-parallel"]);
    assert!(ep_roofline > tp_roofline, "roofline: expert-parallel ITL {ep_roofline} ms vs tensor-parallel {tp_roofline} ms");
    let (_, plain) = run_json(&[]);
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["--format", "json", "--enable-expert-parallel", "--tp", "2"]);
    let out = blis(&args);
    assert!(
        stderr(&out).contains("warning: --enable-expert-parallel has no effect: meta-llama/Llama-3.1-8B-Instruct has no experts"),
        "{}",
        stderr(&out)
    );
    let dense: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let (_, tp2) = run_json(&["--tp", "2"]);
    assert_eq!(dense["latency_ms"], tp2["latency_ms"]);
    assert_ne!(plain["latency_ms"], tp2["latency_ms"]);
}

/// vLLM's hybrid KV cache manager: gpt-oss-20b's 12 sliding-window layers
/// (128 tokens) form one group and its 12 full-attention layers another, so
/// a block holds 12 layers, not 24: twice the blocks, of which a long
/// request's sliding group keeps only its window's. At 24 requests of
/// 20 000 tokens in flight in 15 GiB of KV memory the hybrid cache holds
/// them all; with the manager off (the flag, KV offloading, KV events, P/D,
/// as in vLLM) the cache is the one-group cache and they are preempted.
#[test]
fn sliding_window_layers_keep_only_their_window_under_the_hybrid_kv_manager() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../physics/tests/fixtures/gpt-oss-20b.json");
    let base = [
        "run",
        "--model",
        "openai/gpt-oss-20b",
        "--model-config",
        config,
        "--prompt-tokens",
        "20000",
        "--output-tokens",
        "500",
        "--rate",
        "100",
        "--max-concurrency",
        "24",
        "--num-requests",
        "48",
        "--gpu-memory-utilization",
        "0.4",
        "--format",
        "json",
    ];
    let (_, hybrid) = json_of(&base, &[]);
    let (_, off) = json_of(&base, &["--disable-hybrid-kv-cache-manager"]);
    let blocks = |j: &Value| j["deployment"]["num_gpu_blocks"].as_u64().unwrap();
    let preemptions = |j: &Value| j["kv_cache"]["preemptions"].as_u64().unwrap();
    assert!(blocks(&hybrid).abs_diff(2 * blocks(&off)) <= 1, "{} vs {}", blocks(&hybrid), blocks(&off));
    assert_eq!(hybrid["config"]["kv-cache-groups"]["value"], "1 full-attention + 1 sliding-window (128 tokens), 12 layers each");
    assert!(off["config"].get("kv-cache-groups").is_none());
    let table = stdout(&blis(&base[..base.len() - 2]));
    assert!(table.contains("KV blocks; KV cache groups: 1 full-attention + 1 sliding-window (128 tokens), 12 layers each"), "{table}");
    // 24 × (1 282 full + ≤ 9 window blocks) fit in the hybrid cache: no preemption, and a peak under 80 %.
    assert_eq!(preemptions(&hybrid), 0);
    assert!(hybrid["kv_cache"]["utilization_peak"].as_f64().unwrap() < 0.8, "{}", hybrid["kv_cache"]);
    assert!(preemptions(&off) > 0, "{}", off["kv_cache"]);
    let ttft = |j: &Value| j["latency_ms"]["ttft"]["mean"].as_f64().unwrap();
    assert!(ttft(&hybrid) < ttft(&off), "hybrid TTFT {} ms vs {} ms", ttft(&hybrid), ttft(&off));
    // vLLM turns the manager off with a KV connector or KV events.
    let dir = scratch("hybrid-kv-events");
    let events = dir.join("events.jsonl");
    for extra in [&["--kv-offloading-size", "4"][..], &["--kv-events-output", events.to_str().unwrap()]] {
        let (_, j) = json_of(&base, extra);
        assert_eq!(
            (blocks(&j), &j["config"]["num-gpu-blocks"]["value"]),
            (blocks(&off), &off["config"]["num-gpu-blocks"]["value"]),
            "{extra:?}"
        );
        assert!(j["config"].get("kv-cache-groups").is_none(), "{extra:?}");
    }
    let (_, pd) = json_of(&base, &["--prefill-instances", "1", "--decode-instances", "1"]);
    for pool in ["prefill-pool", "decode-pool"] {
        assert_eq!(pd["config"][pool]["value"]["num_gpu_blocks"].as_u64(), Some(blocks(&off)), "{pool}");
    }
    assert_eq!(blocks(&pd), blocks(&off), "the deployment's instances are the pools'");
    // A dense model is unchanged by the flag.
    let (_, dense) = run_json(&[]);
    let (_, dense_off) = run_json(&["--disable-hybrid-kv-cache-manager"]);
    assert_eq!((&dense["deployment"], &dense["latency_ms"]), (&dense_off["deployment"], &dense_off["latency_ms"]));
}

/// `--num-gpu-blocks` overrides the memory model, as vLLM's
/// `--num-gpu-blocks-override` does; one far beyond what the GPU's memory
/// leaves for the cache is simulated, with a warning naming that room.
#[test]
fn a_block_override_beyond_the_memory_is_warned_about() {
    let warned = |blocks: &str| {
        let mut args = SMALL.to_vec();
        args.extend_from_slice(&["-q", "--num-gpu-blocks", blocks]);
        let out = blis(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    let err = warned("4294967294");
    assert!(err.contains("--num-gpu-blocks 4294967294: more than 2 × the 27517 blocks") && err.contains("run out of memory"), "{err}");
    assert!(!warned("50000").contains("warning"));
}
