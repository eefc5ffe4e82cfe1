//! `blis validate` end to end.

use crate::experiment_dir::{TempDir, blis, edit_server_facts, stage_json, stderr, stdout, write_experiment};

#[test]
fn validates_a_directory_of_experiments_and_writes_every_output() {
    let tmp = TempDir::new("validate-ok");
    write_experiment(&tmp.0, "exp-a", true);
    write_experiment(&tmp.0, "exp-b", false);
    let (report, csv, plots) = (tmp.0.join("r.md"), tmp.0.join("e.csv"), tmp.0.join("plots"));
    let requests = tmp.0.join("requests.csv");
    let out = blis(&[
        "validate",
        tmp.0.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
        "--requests-csv",
        requests.to_str().unwrap(),
        "--plots",
        plots.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in ["== exp-a", "== exp-b", "e2e_mean_ms", "Aggregate over active stages", "2 experiments simulated"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // No run was overloaded, so nothing judges one (an empty table did).
    assert!(!text.contains("Overload-excluded") && !std::fs::read_to_string(&report).unwrap().contains("Overload-excluded"), "{text}");
    edit_server_facts(&tmp.0.join("exp-b"), |facts| facts.replace("status: active", "status: overload-excluded"));
    let out = blis(&["validate", tmp.0.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let overloaded = stdout(&out);
    let judged =
        overloaded.split_once("== Overload-excluded runs: is the overload predicted? ==").map(|(_, tail)| tail).unwrap_or_default();
    assert!(judged.lines().skip_while(|l| !l.starts_with("---")).nth(1).is_some_and(|row| row.starts_with("exp-b ")), "{overloaded}");
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = csv_text.lines();
    assert_eq!(lines.next(), Some("experiment,model,status,stage,metric,predicted,actual,ape"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 8));
    for metric in
        ["e2e_mean_ms", "e2e_p90_ms", "e2e_p99_ms", "ttft_mean_ms", "itl_mean_ms", "inference_perf_itl_mean_ms", "failure_fraction"]
    {
        assert!(rows.iter().any(|r| r[0] == "exp-a" && r[3] == "0" && r[4] == metric), "no {metric} row");
    }
    // APE is |predicted − actual| / actual · 100 on every row that has one.
    for r in rows.iter().filter(|r| !r[7].is_empty()) {
        let (p, a, ape): (f64, f64, f64) = (r[5].parse().unwrap(), r[6].parse().unwrap(), r[7].parse().unwrap());
        assert!((ape - (p - a).abs() / a.abs() * 100.0).abs() < 1e-6 * ape.max(1.0), "{r:?}");
    }
    assert!(std::fs::read_to_string(&report).unwrap().starts_with("# BLIS validation report"));
    assert!(plots.join("parity_e2e_mean_ms.svg").is_file());
    assert!(plots.join("e2e_cdf_exp-a.svg").is_file());
    assert!(plots.join("timeline_exp-a.svg").is_file());
    check_request_rows(&std::fs::read_to_string(&requests).unwrap(), &text);
}

/// The per-request CSV holds exactly exp-a's 20 requests (exp-b has no
/// requests.csv), the measured side as `write_experiment` wrote it, and a
/// simulated side whose E2E MAPE is the one the per-request table prints.
fn check_request_rows(csv: &str, stdout: &str) {
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "experiment,request,stage,send_s,input_tokens,actual_ok,actual_ttft_ms,actual_e2e_ms,predicted_ok,predicted_ttft_ms,predicted_e2e_ms"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 20);
    let mut apes = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let stage = i as u64 / 10;
        let f = |k: usize| r[k].parse::<f64>().unwrap();
        assert_eq!(r[..3], ["exp-a", &i.to_string(), &stage.to_string()]);
        assert_eq!(f(3), (i as u64 * 450_000 + stage * 2_000_000) as f64 / 1e6);
        assert_eq!((f(4), f(5), f(6), f(7)), ((60 + i % 4) as f64, 1.0, 25.0 + (i % 3) as f64, 80.0 + i as f64));
        assert_eq!(r[8], "1", "{r:?}");
        assert!(0.0 < f(9) && f(9) < f(10), "{r:?}");
        apes.push((f(10) - f(7)).abs() / f(7) * 100.0);
    }
    let mape = apes.iter().sum::<f64>() / apes.len() as f64;
    let row = stdout.lines().find(|l| l.contains("exp-a") && l.contains(" 20 ")).expect("per-request table row");
    assert!(row.contains(&format!("{mape:.1}%")), "E2E MAPE {mape:.1}% not in {row:?}");
}

#[test]
fn same_seed_same_csv() {
    let tmp = TempDir::new("validate-determinism");
    write_experiment(&tmp.0, "exp", true);
    let run = |name: &str| {
        let p = tmp.0.join(name);
        let out = blis(&["validate", tmp.0.join("exp").to_str().unwrap(), "--csv", p.to_str().unwrap(), "-q"]);
        assert!(out.status.success(), "{}", stderr(&out));
        std::fs::read_to_string(p).unwrap()
    };
    assert_eq!(run("a.csv"), run("b.csv"));
}

#[test]
fn bad_inputs_exit_2_with_one_line_naming_the_file_and_leave_no_outputs() {
    let tmp = TempDir::new("validate-bad");
    let csv = tmp.0.join("out.csv");
    let dir = write_experiment(&tmp.0, "exp", true);
    let check = |what: &str, needle: &str| {
        let out = blis(&["validate", dir.to_str().unwrap(), "--csv", csv.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err} lacks {needle}");
        assert!(!csv.exists(), "{what}: a partial --csv was left behind");
    };
    let stage0 = dir.join("results/stage_0_lifecycle_metrics.json");
    let good = std::fs::read_to_string(&stage0).unwrap();
    std::fs::write(&stage0, "{ not json").unwrap();
    check("malformed JSON", "stage_0_lifecycle_metrics.json");
    std::fs::write(&stage0, good.replace("\"mean\": 0.08", "\"mean\": \"slow\"")).unwrap();
    check("wrong type", "mean");
    // Values a client cannot have measured, in any latency field; 1e308 s would overflow to inf in ms.
    std::fs::write(&stage0, good.replacen(&format!("\"p99\": {}", 0.08 * 1.2), "\"p99\": 1e308", 1)).unwrap();
    check("huge percentile", "field `successes.latency.request_latency.p99` = 1e308: must be a number in [0, 1e8]");
    std::fs::write(&stage0, good.replacen("\"mean\": 0.004", "\"mean\": -0.004", 1)).unwrap();
    check("negative ITL", "successes.latency.inter_token_latency.mean");
    std::fs::write(&stage0, good.replace("\"mean\": 0.025", "\"mean\": 0.5")).unwrap();
    check("TTFT after E2E", "longer than the request latency mean");
    std::fs::write(&stage0, good.replace("\"requests_per_sec\": 1.9", "\"requests_per_sec\": -3")).unwrap();
    check("negative rate", "requests_per_sec");
    std::fs::write(&stage0, good.replace("\"failures\": {\"count\": 0", "\"failures\": {\"count\": 18446744073709551615")).unwrap();
    check("count overflow", "failures.count");
    // A length percentile that is no number (fuzzing: ignored silently).
    std::fs::write(&stage0, good.replace("\"prompt_len\": {\"mean\": 63.0}", "\"prompt_len\": {\"mean\": 63.0, \"p99\": \"xyz\"}"))
        .unwrap();
    check("length percentile", "field `successes.prompt_len`: `p99` = \"xyz\": not a number of tokens");
    std::fs::write(&stage0, good).unwrap();
    let summary = dir.join("results/summary_lifecycle_metrics.json");
    std::fs::write(&summary, stage_json(-0.08, 0.025, 20)).unwrap();
    check("negative summary", "summary_lifecycle_metrics.json");
    std::fs::remove_file(&summary).unwrap();

    let requests = dir.join("requests.csv");
    let good = std::fs::read_to_string(&requests).unwrap();
    for (from, to, what, needle) in [
        (",0,80", ",0,NaN", "NaN latency", "requests.csv:2"),
        ("\n0,0,", "\n0,7,", "stage out of range", "stage"),
        ("\n0,0,0,", "\n0,0,18446744073709551615,", "send time past the horizon", "arrival_time_us"),
        (",0,80,25", ",5,80,25", "has_error 5", "has_error"),
        (",0,80,25", ",0,80,", "success without TTFT", "needs both"),
        (",0,80,25", ",0,80,95", "TTFT after E2E", "later than `e2e_ms`"),
    ] {
        let broken = good.replacen(from, to, 1);
        assert_ne!(broken, good, "{what}: the edit did not apply");
        std::fs::write(&requests, broken).unwrap();
        check(what, needle);
    }
    let without_ttft: String = good.lines().map(|l| format!("{}\n", l.rsplit_once(',').unwrap().0)).collect();
    std::fs::write(&requests, without_ttft).unwrap();
    check("missing ttft_ms column", "needs both");
    let truncated: String = good.lines().take(15).map(|l| format!("{l}\n")).collect();
    std::fs::write(&requests, truncated).unwrap();
    check("truncated", "4 rows for stage 1, but results/stage_1_lifecycle_metrics.json counts 10 requests");
    std::fs::write(&requests, good.replacen(",0,80,25", ",1,80,25", 1)).unwrap();
    check(
        "errors the report does not count",
        "stage 0: 1 of its rows with has_error = 1, but results/stage_0_lifecycle_metrics.json counts 0 failures",
    );
    std::fs::write(&requests, good).unwrap();

    let exp = dir.join("exp-config.yaml");
    let good = std::fs::read_to_string(&exp).unwrap();
    std::fs::write(&exp, good.replace("meta-llama/Llama-2-7b-hf", "acme/unknown-model")).unwrap();
    check("unknown model", "acme/unknown-model");
    std::fs::write(&exp, good).unwrap();
    let facts = dir.join("server-facts.yaml");
    let good = std::fs::read_to_string(&facts).unwrap();
    std::fs::write(&facts, good.replace("block_size: 16", "block_size: 7")).unwrap();
    check("block size vLLM refuses", "server-facts.yaml: block-size 7: vLLM accepts");
    std::fs::write(&facts, format!("{good}max_num_seqs: 0\n")).unwrap();
    check("zero seats", "server-facts.yaml: max-num-seqs must be at least 1");
    std::fs::write(&facts, format!("{good}cpu_offload: maybe\n")).unwrap();
    check("cpu_offload neither true, false nor unknown", "is not true, false or unknown");
    std::fs::write(&facts, good).unwrap();
    let out = blis(&["validate", dir.to_str().unwrap(), "--kv-offloading-size", "-1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--kv-offloading-size -1: must be a positive number of GiB"), "{}", stderr(&out));
    // Fuzzing: 1e30 GiB passed and gave a saturated CPU block count; a PiB is the most any host offloads to.
    for command in ["validate", "fit"] {
        let out = blis(&[command, dir.to_str().unwrap(), "--kv-offloading-size", "1e30"]);
        crate::assert_refused(&out, command, "--kv-offloading-size 1e30: must be at most 1e6 GiB");
    }

    let out = blis(&["validate", tmp.0.join("nowhere").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = blis(&["validate", dir.to_str().unwrap(), "--coefficients", tmp.0.join("missing.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("missing.yaml"));
}

#[test]
fn a_broken_experiment_is_reported_without_hiding_the_others() {
    let tmp = TempDir::new("validate-partial");
    let csv = tmp.0.join("out.csv");
    write_experiment(&tmp.0, "a-good", true);
    let broken = write_experiment(&tmp.0, "b-broken", true);
    std::fs::write(broken.join("results/stage_1_lifecycle_metrics.json"), "{ not json").unwrap();
    let out = blis(&["validate", tmp.0.to_str().unwrap(), "--csv", csv.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(text.contains("== a-good") && !text.contains("== b-broken"), "{text}");
    assert!(text.contains("1 experiment could not be validated"), "{text}");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("b-broken/results/stage_1_lifecycle_metrics.json"), "{err}");
    assert!(lines[1].contains("1 of 2 experiments could not be validated"), "{err}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.lines().skip(1).all(|r| r.starts_with("a-good,")) && rows.lines().count() > 1, "{rows}");
}

#[test]
fn threshold_flag_turns_the_table_into_a_gate() {
    let tmp = TempDir::new("validate-gate");
    let dir = write_experiment(&tmp.0, "exp", false);
    let out = blis(&["validate", dir.to_str().unwrap(), "-q", "--max-e2e-mape", "0"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--max-e2e-mape"));
    let out = blis(&["validate", dir.to_str().unwrap(), "-q", "--max-e2e-mape", "100000"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Writes the experiment of [`write_experiment`] under `root/name`, naming `model` in its exp-config.yaml.
fn experiment_of(root: &std::path::Path, name: &str, model: &str) -> std::path::PathBuf {
    let dir = write_experiment(root, name, true);
    let cfg = dir.join("exp-config.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("meta-llama/Llama-2-7b-hf", model);
    std::fs::write(cfg, text).unwrap();
    dir
}

/// The CSV `blis validate` writes for `dir` with `extra` flags, without the experiment and model columns.
fn predictions(dir: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let csv = dir.with_extension("csv");
    let mut args = vec!["validate", dir.to_str().unwrap(), "--quiet", "--csv", csv.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::read_to_string(csv).unwrap().lines().map(|l| l.splitn(3, ',').nth(2).unwrap().to_string()).collect()
}

#[test]
fn unbundled_models_and_gpus_come_from_model_configs_or_flags() {
    let tmp = TempDir::new("validate-definitions");
    let llama2_7b = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/models/meta-llama/Llama-2-7b-hf.json");
    let bundled = predictions(&write_experiment(&tmp.0.join("bundled"), "exp", true), &[]);

    // An unknown model with nothing to describe it is refused, naming both ways out.
    let clone = experiment_of(&tmp.0.join("runs/h100"), "exp", "acme/Llama-2-7b-Clone");
    let out = blis(&["validate", clone.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("acme/Llama-2-7b-Clone") && err.contains("model_configs/<name>/config.json") && err.contains("--model-config"),
        "{err}"
    );

    // The ground truth's layout: model_configs/<name>/config.json beside the experiments' directory.
    let configs = tmp.0.join("runs/model_configs/llama-2-7b-clone");
    std::fs::create_dir_all(&configs).unwrap();
    std::fs::copy(llama2_7b, configs.join("config.json")).unwrap();
    assert_eq!(predictions(&clone, &[]), bundled, "same architecture, same predictions");
    std::fs::remove_dir_all(&configs).unwrap();
    // Under the model's current HuggingFace name when the run records a former one (Meta-Llama-3.1-* is now Llama-3.1-*).
    let renamed = experiment_of(&tmp.0.join("runs/h100-renamed"), "exp", "acme/Meta-Llama-3.1-7b-Clone");
    let configs = tmp.0.join("runs/model_configs/llama-3.1-7b-clone");
    std::fs::create_dir_all(&configs).unwrap();
    std::fs::copy(llama2_7b, configs.join("config.json")).unwrap();
    assert_eq!(predictions(&renamed, &[]), bundled);
    std::fs::remove_dir_all(&configs).unwrap();
    // Under the directory a normalized.json beside the run names (its config_json_dir).
    let configs = tmp.0.join("runs/model_configs/clone-7b");
    std::fs::create_dir_all(&configs).unwrap();
    std::fs::copy(llama2_7b, configs.join("config.json")).unwrap();
    assert!(!blis(&["validate", clone.to_str().unwrap(), "-q"]).status.success(), "no name matches clone-7b");
    std::fs::write(clone.join("normalized.json"), r#"{"config_json_dir": "Clone-7B"}"#).unwrap();
    assert_eq!(predictions(&clone, &[]), bundled);
    std::fs::remove_dir_all(&configs).unwrap();
    std::fs::remove_file(clone.join("normalized.json")).unwrap();

    // The flags: a config.json, and the GPU as NVIDIA's datasheet gives it (with sparsity).
    let sheet = tmp.0.join("h100-sxm.json");
    std::fs::write(
        &sheet,
        r#"{"name": "H100 SXM", "compute": {"bf16_tensor_core": 1979, "fp8_tensor_core": 3958, "with_sparsity": true},
            "memory": {"capacity_gb": 80, "bandwidth_tb_s": 3.35}, "interconnect": {"nvlink_bandwidth_gb_s": 900, "pcie_bandwidth_gb_s": 128}}"#,
    )
    .unwrap();
    let flagged = predictions(&clone, &["--model-config", llama2_7b, "--hardware-config", sheet.to_str().unwrap()]);
    assert_eq!(flagged, bundled);
}

/// The test experiment under `tmp` (without requests.csv), checked to
/// validate without a warning, so that a test's edit is what warns.
fn experiment_that_warns_of_nothing(tmp: &TempDir) -> std::path::PathBuf {
    let dir = write_experiment(&tmp.0, "exp", false);
    let quiet = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(quiet.status.success() && !stderr(&quiet).contains("warning"), "{}", stderr(&quiet));
    dir
}

/// [`experiment_that_warns_of_nothing`], its `server-facts.yaml` and that
/// file's text, for a test that edits the facts.
fn quiet_experiment_and_facts(tmp: &TempDir) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let dir = experiment_that_warns_of_nothing(tmp);
    let facts = dir.join("server-facts.yaml");
    let text = std::fs::read_to_string(&facts).unwrap();
    (dir, facts, text)
}

/// When the server's recorded facts and the experiment config disagree, the
/// facts are simulated and the disagreement is printed, naming both values;
/// a fact BLIS cannot read (a typo) is named too.
#[test]
fn unknown_server_facts_and_facts_that_contradict_the_experiment_config_are_warned_about() {
    let tmp = TempDir::new("validate-disagree");
    let (dir, facts, text) = quiet_experiment_and_facts(&tmp);
    // Run on another GPU than the set was fitted on: said once, as `blis run` says it.
    std::fs::write(&facts, text.replace("hardware: H100-SXM-80GB", "hardware: A100-80GB")).unwrap();
    let other = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert_eq!(other.matches("were fitted on H100 measurements; timing A100-80GB").count(), 1, "{other}");
    assert!(other.contains("kernel efficiencies"), "{other}");
    // A contradiction, an agreement, a typo, and cpu_offload (read, used only with --kv-offloading-size).
    std::fs::write(&facts, format!("{text}max_num_seqs: 64\nmax_model_len: 4096\nnum_gpu_block: 99\ncpu_offload: unknown\n")).unwrap();
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().filter(|l| l.starts_with("warning: ")).count(), 2, "{err}");
    assert!(
        err.contains("server-facts.yaml max_num_seqs = 64 but exp-config.yaml max_num_seqs = 128; simulating the server's 64"),
        "{err}"
    );
    assert!(err.contains("server-facts.yaml: unknown key `num_gpu_block` ignored; server-facts.yaml keys: hardware,"), "{err}");
    // Without the server's block count, the derived one is named.
    let kept: String = text.lines().filter(|l| !l.starts_with("num_gpu_blocks:")).map(|l| format!("{l}\n")).collect();
    assert_ne!(kept, text, "the experiment records num_gpu_blocks");
    std::fs::write(&facts, kept).unwrap();
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("server-facts.yaml: no num_gpu_blocks; simulating 7472 KV blocks derived as vLLM's memory profiler would"),
        "{err}"
    );
    // A misspelt key of inference-perf's configuration keeps its default, as in inference-perf, and is named.
    let config = dir.join("results/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("  interval: 1.0", "  intervall: 1.0")).unwrap();
    let err = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert!(
        err.contains("config.yaml: unknown key `load.intervall` ignored (inference-perf ignores it too); did you mean `interval`?"),
        "{err}"
    );
}

/// A block count and a logged cache size that disagree (a hand-edited
/// count, or facts of two servers) are named; the count is simulated.
#[test]
fn a_block_count_its_cache_size_contradicts_is_warned_about() {
    let tmp = TempDir::new("validate-kv-tokens");
    let (dir, facts, text) = quiet_experiment_and_facts(&tmp);
    let with = |tokens: u64| {
        std::fs::write(&facts, format!("{text}kv_cache_tokens: {tokens}\n")).unwrap();
        stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]))
    };
    assert!(!with(7462 * 16).contains("warning"), "7462 blocks of 16 tokens agree");
    let err = with(13712 * 16);
    assert!(
        err.contains(
            "server-facts.yaml num_gpu_blocks = 7462 but its kv_cache_tokens = 219392 are 13712 blocks of 16 tokens; simulating 7462 blocks"
        ),
        "{err}"
    );
}

/// An experiment that does not record its GPU is simulated on the default
/// one, and validate says so, unless `--hardware-config` names the GPU.
#[test]
fn an_unrecorded_gpu_is_assumed_out_loud() {
    let tmp = TempDir::new("validate-no-gpu");
    let dir = write_experiment(&tmp.0, "exp", true);
    edit_server_facts(&dir, |text| text.lines().filter(|l| !l.starts_with("hardware:")).map(|l| format!("{l}\n")).collect());
    let err = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert_eq!(err.matches("server-facts.yaml: no hardware; simulating H100, BLIS's default GPU").count(), 1, "{err}");
    let a100 = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/hardware/A100-80GB.json");
    let err = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q", "--hardware-config", a100]));
    assert!(!err.contains("no hardware"), "{err}");
    // A bundled GPU by name is the same GPU as its file.
    let by_name = blis(&["validate", dir.to_str().unwrap(), "-q", "--hardware", "A100-80GB"]);
    assert!(by_name.status.success() && !stderr(&by_name).contains("no hardware"), "{}", stderr(&by_name));
    assert_eq!(predictions(&dir, &["--hardware", "A100-80GB"]), predictions(&dir, &["--hardware-config", a100]));
    assert_ne!(predictions(&dir, &["--hardware", "A100-80GB"]), predictions(&dir, &[]));
    let unknown = blis(&["validate", dir.to_str().unwrap(), "-q", "--hardware", "B300"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).trim_end().lines().count() == 1 && stderr(&unknown).contains("--hardware B300: unknown GPU"),
        "{}",
        stderr(&unknown)
    );
}

/// `kv_cache_dtype: fp8` in `server-facts.yaml` is read: the server's
/// recorded block count stays, and its decode steps read half the KV bytes.
#[test]
fn an_fp8_kv_cache_server_fact_is_simulated() {
    let tmp = TempDir::new("validate-kv-dtype");
    let dir = experiment_of(&tmp.0, "fp8", "meta-llama/Llama-2-7b-hf");
    let half = predictions(&dir, &[]);
    edit_server_facts(&dir, |text| format!("{text}kv_cache_dtype: fp8\n"));
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success() && !stderr(&out).contains("kv_cache_dtype"), "a fact BLIS reads: {}", stderr(&out));
    assert_ne!(predictions(&dir, &[]), half);
    edit_server_facts(&dir, |text| text.replace("kv_cache_dtype: fp8", "kv_cache_dtype: fp4"));
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(!out.status.success() && stderr(&out).contains("kv-cache-dtype `fp4`"), "{}", stderr(&out));
}

/// `enable_expert_parallel: true` in `server-facts.yaml` simulates the MoE
/// server expert-parallel, as `--enable-expert-parallel` does for `blis run`.
#[test]
fn an_expert_parallel_server_fact_is_simulated() {
    let tmp = TempDir::new("validate-ep");
    let dir = experiment_of(&tmp.0, "moe", "mistralai/Mixtral-8x7B-v0.1");
    let cfg = dir.join("exp-config.yaml");
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("tensor_parallelism: 1", "tensor_parallelism: 2")).unwrap();
    edit_server_facts(&dir, |text| format!("{text}tensor_parallel_size: 2\n"));
    let tensor_parallel = predictions(&dir, &[]);
    edit_server_facts(&dir, |text| format!("{text}enable_expert_parallel: true\n"));
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success() && !stderr(&out).contains("enable_expert_parallel"), "a fact BLIS reads: {}", stderr(&out));
    assert_ne!(predictions(&dir, &[]), tensor_parallel);
}

/// A server recorded with `data_parallel_size: 2` runs two engines behind
/// vLLM's load balancer. At a load where every request finds both idle, the
/// balancer sends them all to the first engine (the lowest rank wins ties),
/// so the predictions are the one-engine server's; under the shared
/// Llama-2-7B run's 20 req/s, two engines queue less than one.
#[test]
fn data_parallel_servers_are_simulated_as_engines_behind_vllms_balancer() {
    let tmp = TempDir::new("validate-dp");
    let with_dp = |dir: &std::path::Path| edit_server_facts(dir, |text| format!("{text}data_parallel_size: 2\n"));
    let idle = write_experiment(&tmp.0.join("one"), "exp", true);
    let one = predictions(&idle, &[]);
    with_dp(&idle);
    assert_eq!(predictions(&idle, &[]), one);

    let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/vllm-h100/20260217-231439-llama-2-7b-tp1-general");
    let busy = tmp.0.join("busy/exp");
    std::fs::create_dir_all(busy.join("results")).unwrap();
    for f in [
        "exp-config.yaml",
        "server-facts.yaml",
        "profile.yaml",
        "requests.csv",
        "results/config.yaml",
        "results/stage_0_lifecycle_metrics.json",
        "results/stage_1_lifecycle_metrics.json",
        "results/summary_lifecycle_metrics.json",
    ] {
        std::fs::copy(format!("{shared}/{f}"), busy.join(f)).unwrap();
    }
    let e2e_mean = |rows: &[String], stage: &str| -> f64 {
        let row = rows.iter().find(|r| r.starts_with(&format!("active,{stage},e2e_mean_ms,"))).unwrap_or_else(|| panic!("{rows:?}"));
        row.split(',').nth(3).unwrap().parse().unwrap()
    };
    let single = predictions(&busy, &[]);
    with_dp(&busy);
    let dual = predictions(&busy, &[]);
    assert!(e2e_mean(&dual, "1") < 0.97 * e2e_mean(&single, "1"), "DP 2 {} ms vs DP 1 {} ms", e2e_mean(&dual, "1"), e2e_mean(&single, "1"));
}

/// A vLLM startup log in the shape vLLM 0.11 to 0.15 write it (trimmed), of
/// the server [`write_experiment`] records: a 0.15, which schedules
/// asynchronously without being told.
const VLLM_LOG: &str = "\
(APIServer pid=7) INFO 11-20 10:00:01 [utils.py:233] non-default args: {'model_tag': 'meta-llama/Llama-2-7b-hf', 'model': 'meta-llama/Llama-2-7b-hf', \
'max_model_len': 4096, 'max_num_seqs': 128, 'max_num_batched_tokens': 2048, 'enable_prefix_caching': True}
(APIServer pid=7) INFO 11-20 10:00:02 [scheduler.py:205] Chunked prefill is enabled with max_num_batched_tokens=2048.
(EngineCore_DP0 pid=9) INFO 11-20 10:00:09 [core.py:77] Initializing a V1 LLM engine (v0.15.1) with config: model='meta-llama/Llama-2-7b-hf', \
dtype=torch.float16, max_seq_len=4096, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, quantization=None, \
enforce_eager=False, kv_cache_dtype=auto, seed=0, enable_prefix_caching=True, chunked_prefill_enabled=True, pooler_config=None
(EngineCore_DP0 pid=9) INFO 11-20 10:01:10 [kv_cache_utils.py:1087] GPU KV cache size: 119,392 tokens
";

/// `blis convert vllm-log` writes the server facts a log gives: put in
/// place of the hand-written ones, the experiment validates to the same
/// predictions. Without --output the facts go to standard output; bad
/// input is one line and exit 2.
#[test]
fn a_vllm_log_becomes_the_server_facts_that_validate_reads() {
    let tmp = TempDir::new("validate-vllm-log");
    let dir = write_experiment(&tmp.0, "exp", true);
    let hand_written = predictions(&dir, &[]);
    let log = tmp.0.join("vllm.log");
    std::fs::write(&log, VLLM_LOG).unwrap();
    let facts = dir.join("server-facts.yaml");
    let out =
        blis(&["convert", "vllm-log", "--path", log.to_str().unwrap(), "--hardware", "H100-SXM-80GB", "--output", facts.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let written = std::fs::read_to_string(&facts).unwrap();
    assert!(
        written.contains("num_gpu_blocks: 7462\n") && written.contains("hardware: H100-SXM-80GB\n") && written.contains("# vLLM 0.15.1"),
        "{written}"
    );
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success() && !stderr(&out).contains("unknown key"), "{}", stderr(&out));
    assert_eq!(predictions(&dir, &[]), hand_written);
    // A server from before vLLM 0.14 that did not ask for it ran without.
    std::fs::write(&log, VLLM_LOG.replace("(v0.15.1)", "(v0.11.0)")).unwrap();
    let out = blis(&["convert", "vllm-log", "--path", log.to_str().unwrap()]);
    assert!(stdout(&out).contains("async_scheduling: false\n"), "{}", stdout(&out));
    std::fs::write(&log, VLLM_LOG).unwrap();

    let out = blis(&["convert", "vllm-log", "--path", log.to_str().unwrap(), "--hardware", "B300"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("tensor_parallel_size: 1\n") && stderr(&out).contains("--hardware B300: unknown GPU"),
        "{}",
        stderr(&out)
    );
    for (text, needle) in [("not a log\n", "no vLLM startup line"), ("", "no vLLM startup line")] {
        std::fs::write(&log, text).unwrap();
        let out = blis(&["convert", "vllm-log", "--path", log.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).trim_end().lines().count() == 1 && stderr(&out).contains(needle) && stderr(&out).contains("vllm.log"),
            "{}",
            stderr(&out)
        );
    }
    let out = blis(&["convert", "vllm-log", "--path", tmp.0.join("missing.log").to_str().unwrap()]);
    assert!(out.status.code() == Some(2) && stderr(&out).contains("missing.log"), "{}", stderr(&out));
}

/// Fuzzing: `blis convert vllm-log` wrote values the log states that
/// `blis validate` then refused (TP 3 for a model of 32 heads, blocks of 7
/// tokens, a utilisation of 5, no sequences), and dropped a pipeline degree
/// of 0 silently. Each is now left out with a note on standard error, and
/// what is written validates.
#[test]
fn a_vllm_log_converts_only_what_validate_accepts() {
    let tmp = TempDir::new("validate-vllm-log-strict");
    let dir = write_experiment(&tmp.0, "exp", true);
    let log = tmp.0.join("vllm.log");
    let bad = VLLM_LOG
        .replace("tensor_parallel_size=1", "tensor_parallel_size=3")
        .replace("pipeline_parallel_size=1", "pipeline_parallel_size=0")
        .replace("'max_num_seqs': 128", "'max_num_seqs': 0, 'gpu_memory_utilization': 5.0");
    std::fs::write(&log, format!("{bad}INFO Forcing kv cache block size to 7 for X backend.\n")).unwrap();
    let facts = dir.join("server-facts.yaml");
    let out = blis(&["convert", "vllm-log", "--path", log.to_str().unwrap(), "--hardware", "H100", "--output", facts.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (written, notes) = (std::fs::read_to_string(&facts).unwrap(), stderr(&out));
    for (key, note) in [
        (
            "tensor_parallel_size",
            "tensor_parallel_size 3: meta-llama/Llama-2-7b-hf: 32 attention heads are not divisible by tensor-parallel size 3",
        ),
        ("max_num_seqs", "max_num_seqs 0: out of range: must be from 1"),
        ("gpu_memory_utilization", "gpu_memory_utilization 5: must be in (0, 1]; ignored"),
        ("block_size", "block_size 7: vLLM accepts [1, 8, 16, 32, 64, 128, 256] tokens; ignored"),
        ("num_gpu_blocks", "the KV cache size is ignored"),
        // Not a fact, but a degree the log states and BLIS cannot read: a note, not silence.
        ("pipeline_parallel_size", "pipeline_parallel_size 0: out of range: must be from 1 to 1024; ignored"),
    ] {
        assert!(!written.contains(&format!("{key}:")) && notes.contains(note), "{key}: {written}\n{notes}");
    }
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A `vllm.log` in the experiment directory is read for the facts
/// `server-facts.yaml` does not give (here the KV block count), and
/// `server-facts.yaml` wins where both do; what the log says that BLIS
/// does not simulate, and a setting it contradicts, are warned about.
#[test]
fn a_server_log_beside_the_experiment_fills_in_its_facts() {
    let tmp = TempDir::new("validate-log-beside");
    let dir = write_experiment(&tmp.0, "exp", true);
    let hand_written = predictions(&dir, &[]);
    edit_server_facts(&dir, |text| text.replace("num_gpu_blocks: 7462\n", ""));
    let derived = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert!(derived.contains("no num_gpu_blocks"), "{derived}");
    std::fs::write(dir.join("vllm.log"), VLLM_LOG).unwrap();
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success() && !stderr(&out).contains("no num_gpu_blocks"), "{}", stderr(&out));
    assert_eq!(predictions(&dir, &[]), hand_written, "the log's 119 392 tokens are the 7 462 blocks");
    // server-facts.yaml wins; the log's own contradiction of exp-config.yaml is named.
    edit_server_facts(&dir, |text| format!("{text}num_gpu_blocks: 7462\n"));
    std::fs::write(
        dir.join("vllm.log"),
        VLLM_LOG.replace("'max_num_seqs': 128", "'max_num_seqs': 64").replace("enforce_eager=False", "enforce_eager=True"),
    )
    .unwrap();
    let err = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert!(err.contains("vllm.log max_num_seqs = 64 but exp-config.yaml max_num_seqs = 128"), "{err}");
    assert!(err.contains("vllm.log: enforce_eager"), "{err}");
    std::fs::write(dir.join("vllm.log"), "no startup here\n").unwrap();
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(
        out.status.success() && stderr(&out).contains("vllm.log: no vLLM startup line found") && stderr(&out).contains("not read"),
        "{}",
        stderr(&out)
    );
}

/// A `normalized.json` beside the experiment (the shared ground truth's
/// summary) gives the facts `server-facts.yaml` lacks: without that file the
/// run is simulated on the GPU and block count the summary records, exactly
/// as with it; a fact both give is `server-facts.yaml`'s; a bad field is
/// named.
#[test]
fn a_normalized_summary_beside_the_experiment_fills_in_its_facts() {
    let tmp = TempDir::new("validate-normalized");
    let dir = write_experiment(&tmp.0, "exp", true);
    let hand_written = predictions(&dir, &[]);
    std::fs::remove_file(dir.join("server-facts.yaml")).unwrap();
    let bare = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert!(bare.contains("no num_gpu_blocks") && bare.contains("no hardware"), "{bare}");
    let summary = r#"{"name": "exp", "hardware": "A100", "hardware_detail": "NVIDIA A100-SXM4-80GB (a note)", "tp": 1, "status": "active",
        "vllm_config_known": {"kv_blocks_total_gpu": 7462, "block_size": 16, "gpu_memory_utilization": null, "cpu_kv_offload": null}}"#;
    std::fs::write(
        dir.join("normalized.json"),
        summary.replace(r#""A100", "hardware_detail": "NVIDIA A100-SXM4-80GB"#, r#""H100", "hardware_detail": "NVIDIA H100 80GB HBM3 SXM"#),
    )
    .unwrap();
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success() && !stderr(&out).contains("warning"), "{}", stderr(&out));
    assert_eq!(predictions(&dir, &[]), hand_written);
    // A summary without the block count: the warning names the files read, not a server-facts.yaml that is not there.
    std::fs::write(dir.join("normalized.json"), summary.replace("7462", "null")).unwrap();
    let unknown = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert!(
        unknown.contains("exp: no server-facts.yaml, so no num_gpu_blocks (normalized.json gives none either); simulating 7472 KV blocks"),
        "{unknown}"
    );
    std::fs::write(dir.join("normalized.json"), summary).unwrap();
    assert_eq!(predictions(&dir, &[]), predictions(&dir, &["--hardware", "A100-80GB"]));
    assert_ne!(predictions(&dir, &[]), hand_written, "the summary's A100 is simulated");
    std::fs::write(dir.join("server-facts.yaml"), "hardware: H100-SXM-80GB\n").unwrap();
    assert_eq!(predictions(&dir, &[]), hand_written, "server-facts.yaml's GPU wins");
    let err = stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"]));
    assert!(err.contains("normalized.json hardware = A100-80GB but server-facts.yaml hardware = H100; simulating H100"), "{err}");
    std::fs::write(dir.join("server-facts.yaml"), "hardware: NVIDIA A100-SXM4-80GB\n").unwrap();
    assert!(
        !stderr(&blis(&["validate", dir.to_str().unwrap(), "-q"])).contains("normalized.json hardware"),
        "two spellings of one GPU agree"
    );
    std::fs::write(dir.join("normalized.json"), summary.replace("7462", "\"many\"")).unwrap();
    let bad = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    let err = stderr(&bad);
    assert!(!bad.status.success() && err.contains("normalized.json") && err.contains("vllm_config_known.kv_blocks_total_gpu"), "{err}");
}

/// A load configuration that does not describe the run (here stage 0 lasts
/// a tenth of its 5 s, so 1 request is simulated against the 10 its report
/// counts) is compared all the same, with a warning naming the stage; the
/// configuration as written warns of nothing.
#[test]
fn a_stage_whose_simulation_sends_other_requests_than_the_run_is_warned_about() {
    let tmp = TempDir::new("validate-sent");
    let dir = experiment_that_warns_of_nothing(&tmp);
    let config = dir.join("results/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replacen("duration: 5\n", "duration: 0.5\n", 1)).unwrap();
    let out = blis(&["validate", dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("exp stage 0: the simulation sent 1 requests where the run sent 10"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("stage 1:"), "{}", stderr(&out));
}
