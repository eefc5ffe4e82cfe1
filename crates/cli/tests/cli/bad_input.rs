//! Bad input never panics: one line on stderr naming the problem, exit code
//! 2, no output file.

use crate::{assert_refused, blis, is_empty_dir, scratch, stderr};

/// Runs `blis run` with `args` plus an `--output` in a fresh directory and
/// checks the bad-input contract; returns the error line.
fn rejected(name: &str, args: &[&str]) -> String {
    let dir = scratch(name);
    let out_path = dir.join("out.json");
    let mut full = vec!["run"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--output", out_path.to_str().unwrap()]);
    let out = blis(&full);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{name}: expected exit code 2, stderr: {err}");
    assert!(!err.contains("panicked"), "{name}: panicked: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{name}: expected one line, got: {err}");
    assert!(err.starts_with("error: "), "{name}: {err}");
    assert!(is_empty_dir(&dir), "{name}: left a file behind");
    err
}

/// Writes `contents` to `dir/name` and returns the path, for a flag's value.
fn write(dir: &std::path::Path, name: &str, contents: impl AsRef<[u8]>) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.to_str().unwrap().to_string()
}

const M: &[&str] = &["--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "10"];

fn with_model(extra: &[&str]) -> Vec<&'static str> {
    let mut v: Vec<&str> = M.to_vec();
    v.extend(extra.iter().map(|s| -> &'static str { Box::leak(s.to_string().into_boxed_str()) }));
    v
}

#[test]
fn unknown_flag() {
    let e = rejected("unknown-flag", &with_model(&["--frobnicate", "3"]));
    assert!(e.contains("--frobnicate"), "{e}");
}

#[test]
fn unknown_model_lists_the_bundled_ones_or_suggests_the_close_ones() {
    let e = rejected("unknown-model", &["--model", "acme/gpt-9"]);
    assert!(e.contains("acme/gpt-9") && e.contains("meta-llama/Llama-3.1-8B-Instruct") && e.contains("--model-config"), "{e}");
    let e = rejected("close-model", &["--model", "llama-3.1-8b-inst"]);
    assert!(e.contains("did you mean meta-llama/Llama-3.1-8B-Instruct?") && !e.contains("Qwen"), "{e}");
}

#[test]
fn missing_model() {
    let e = rejected("missing-model", &["--rate", "3"]);
    assert!(e.contains("--model is required"), "{e}");
}

#[test]
fn malformed_and_incomplete_model_configs() {
    let dir = scratch("model-configs");
    let bad = write(&dir, "bad.json", "{ \"hidden_size\": 4096,");
    let e = rejected("malformed-config", &["--model-config", &bad]);
    assert!(e.contains("bad.json") && e.contains("JSON"), "{e}");
    let incomplete = write(&dir, "incomplete.json", r#"{"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 100}"#);
    let e = rejected("incomplete-config", &["--model-config", &incomplete]);
    assert!(e.contains("num_hidden_layers"), "{e}");
    let e = rejected("missing-config", &["--model-config", dir.join("nope.json").to_str().unwrap()]);
    assert!(e.contains("nope.json"), "{e}");
    // Fuzzing: 5 KV heads for 32 query heads was accepted; grouped-query attention needs a divisor.
    let ungrouped = write(
        &dir,
        "ungrouped.json",
        r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 5, "intermediate_size": 11008, "vocab_size": 32000}"#,
    );
    let e = rejected("kv-heads-not-dividing", &["--model-config", &ungrouped]);
    assert!(
        e.contains("ungrouped.json") && e.contains("field `num_key_value_heads` = 5 does not divide `num_attention_heads` = 32"),
        "{e}"
    );
}

#[test]
fn bad_rates_and_lengths() {
    for (name, flag, value, needle) in [
        ("rate-zero", "--rate", "0", "--rate"),
        ("rate-negative", "--rate", "-5", "--rate"),
        ("rate-nan", "--rate", "NaN", "--rate"),
        ("rate-text", "--rate", "fast", "--rate"),
        ("prompt-zero", "--prompt-tokens", "0", "--prompt-tokens"),
        ("prompt-nan", "--prompt-tokens", "nan", "--prompt-tokens"),
        ("output-negative", "--output-tokens", "-1", "--output-tokens"),
        ("stdev-negative", "--prompt-tokens-stdev", "-2", "--prompt-tokens-stdev"),
        ("requests-zero", "--num-requests", "0", "--num-requests"),
        // A negative count is the count's error, not clap's "unexpected argument".
        (
            "seqs-negative",
            "--max-num-seqs",
            "-5",
            "invalid value '-5' for '--max-num-seqs <N>': `-5` is negative: a count is 0 or more, a whole number such as",
        ),
        ("seed-negative", "--seed", "-1", "invalid value '-1' for '--seed <N>'"),
        ("horizon-negative", "--horizon", "-1", "--horizon"),
        ("timeout-nan", "--client-timeout", "nan", "--client-timeout"),
        ("horizon-huge", "--horizon", "1e15", "in [1e-6, 1e8]"),
        ("horizon-below-a-tick", "--horizon", "1e-300", "--horizon 1e-300: must be a number of seconds in [1e-6, 1e8]"),
        ("timeout-huge", "--client-timeout", "1e300", "--client-timeout 1e300: must be a number of seconds in [1e-6, 1e8]"),
        ("refresh-huge", "--snapshot-refresh", "queue-depth=periodic:1e300ms", "[0.001, 3600000]"),
        // Caps shared with workload specs, the values written compactly.
        ("rate-huge", "--rate", "1e300", "--rate 1e300: must be a positive number of requests per second, at most 1e6"),
        ("prompt-huge", "--prompt-tokens", "1e300", "--prompt-tokens 1e300: must be a number of tokens in [1, 2^30]"),
        ("stdev-huge", "--output-tokens-stdev", "1e300", "--output-tokens-stdev 1e300: must be in [0, 2^30]"),
        // Groups of no prefix change nothing: said, not ignored.
        ("prefix-groups-alone", "--prefix-groups", "5", "--prefix-groups 5 needs --prefix-tokens N"),
        // A bound past the mean makes every length the bound (the default means: 512 prompt, 256 output tokens).
        (
            "min-above-mean",
            "--prompt-tokens-min",
            "1000",
            "--prompt-tokens-min 1000: must be at most the mean length (--prompt-tokens 512)",
        ),
        ("max-below-mean", "--output-tokens-max", "10", "--output-tokens-max 10: must be at least the mean length (--output-tokens 256)"),
    ] {
        let e = rejected(name, &with_model(&[flag, value]));
        assert!(e.contains(needle), "{name}: {e}");
    }
}

/// `blis observe` checks its timeout before connecting (a huge one used to
/// panic converting to a Duration).
#[test]
fn observe_timeout_out_of_range() {
    let dir = scratch("observe-timeout");
    let prefix = dir.join("t");
    for value in ["1e300", "-1", "0"] {
        let out = blis(&[
            "observe",
            "--model",
            "m",
            "--server-url",
            "http://127.0.0.1:9",
            "--trace-output",
            prefix.to_str().unwrap(),
            "--timeout",
            value,
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{value}: {err}");
        assert!(err.contains("--timeout") && err.contains("[1e-6, 1e8]") && !err.contains("panicked"), "{value}: {err}");
        assert!(is_empty_dir(&dir), "{value}: left a file behind");
    }
}

#[test]
fn bad_server_knobs() {
    for (name, size) in [("block-size-zero", "0"), ("block-size-odd", "24"), ("block-size-huge", "512")] {
        let e = rejected(name, &with_model(&["--block-size", size]));
        assert!(e.contains(&format!("--block-size {size}")) && e.contains("[1, 8, 16, 32, 64, 128, 256]"), "{e}");
    }
    let e = rejected("one-block", &with_model(&["--num-gpu-blocks", "1"]));
    assert!(e.contains("--num-gpu-blocks 1: the KV cache needs at least 2 blocks"), "{e}");
    // vLLM will not start a server whose KV cache cannot hold one request of
    // the model length (Llama-3.1's 131 072 tokens; about 53 500 fit in the
    // 44.52 GiB an L40S reports with ECC on).
    let e = rejected("kv-below-model-len", &with_model(&["--hardware", "L40S", "--gpu-memory-utilization", "0.5"]));
    assert!(
        e.contains("the KV cache holds 53552 tokens, fewer than one request of --max-model-len 131072") && e.contains("to at most 53552"),
        "{e}"
    );
    let mut fits = vec!["run"];
    fits.extend(with_model(&["--hardware", "L40S", "--gpu-memory-utilization", "0.5", "--max-model-len", "53552"]));
    let out = blis(&fits);
    assert!(out.status.success(), "{}", stderr(&out));
    // Under the hybrid KV cache manager a request holds every block in the
    // full-attention group and a window and a chunk in the sliding one
    // (gpt-oss-20b: 8 192 + ⌈(127 + 2 048) / 16⌉ + 1 blocks at 131 072 tokens).
    let gpt_oss = concat!(env!("CARGO_MANIFEST_DIR"), "/../physics/tests/fixtures/gpt-oss-20b.json");
    let hybrid = |len: &'static str| {
        [
            "run",
            "--model",
            "openai/gpt-oss-20b",
            "--model-config",
            gpt_oss,
            "--hardware",
            "L40S",
            "--gpu-memory-utilization",
            "0.34",
            "--num-requests",
            "3",
            "--max-model-len",
            len,
        ]
    };
    let e = stderr(&blis(&hybrid("131072")));
    assert!(e.contains("the KV cache's 3342 blocks, shared by 1 full-attention + 1 sliding-window (128 tokens) groups, are fewer than the 8329 one request of --max-model-len 131072 holds at its peak") && e.contains("to at most 51280"), "{e}");
    assert!(blis(&hybrid("51280")).status.success());
    assert!(stderr(&blis(&hybrid("51281"))).contains("are fewer than the 3343 one request"));
    let e = rejected("budget-below-seats", &with_model(&["--max-num-batched-tokens", "64", "--max-num-seqs", "128"]));
    assert!(e.contains("--max-num-batched-tokens 64") && e.contains("--max-num-seqs 128"), "{e}");
    let e = rejected("seqs-zero", &with_model(&["--max-num-seqs", "0"]));
    assert!(e.contains("--max-num-seqs"), "{e}");
    let e = rejected("tp-zero", &with_model(&["--tp", "0"]));
    assert!(e.contains("--tp"), "{e}");
    // vLLM refuses to shard 32 attention heads over 3 GPUs; so does BLIS.
    let e = rejected("tp-three", &with_model(&["--tp", "3"]));
    assert!(e.contains("--tp 3") && e.contains("32 attention heads"), "{e}");
    let e = rejected("util", &with_model(&["--gpu-memory-utilization", "1.5"]));
    assert!(e.contains("--gpu-memory-utilization"), "{e}");
    let e = rejected("hardware", &with_model(&["--hardware", "TPU-v9"]));
    assert!(e.contains("H100") && e.contains("TPU-v9"), "{e}");
    let e = rejected("kv-cache-dtype", &with_model(&["--kv-cache-dtype", "int4"]));
    assert!(e.contains("--kv-cache-dtype `int4`: allowed: auto, bfloat16, float16, fp8"), "{e}");
    let e = rejected("quantization-online", &with_model(&["--quantization", "bitsandbytes"]));
    assert!(
        e.contains("--quantization `bitsandbytes`: of the methods that quantize a half-precision checkpoint at load, BLIS simulates fp8"),
        "{e}"
    );
    let scout = ["--model", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "--tp", "2", "--quantization", "awq"];
    let e = rejected("quantization-mismatch", &scout);
    assert!(
        e.contains(
            "the checkpoint is quantized with compressed-tensors, and vLLM refuses another method for it; allowed: compressed-tensors"
        ),
        "{e}"
    );
    // Another board of a bundled chip is refused with that chip's boards, never run on one of them.
    let e = rejected("hardware-board", &with_model(&["--hardware", "NVIDIA A100 40GB PCIe"]));
    assert!(e.contains("A100-80GB-PCIe (PCIe, 80 GB)") && e.contains("A100-40GB (SXM, 40 GB)") && !e.contains("L40S"), "{e}");
    let sheet_dir = scratch("bad-kernels-sheet");
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/hardware/A40.json")).unwrap();
    for (name, from, to) in [
        ("kernels-memory", "\"gemm_memory\": 0.813", "\"gemm_memory\": 1.5"),
        ("kernels-overhead", "\"layer_overhead_us\": 49.8", "\"layer_overhead_us\": -3"),
    ] {
        let path = sheet_dir.join(format!("{name}.json"));
        assert!(spec.contains(from), "{from}");
        std::fs::write(&path, spec.replace(from, to)).unwrap();
        let e = rejected(name, &with_model(&["--hardware-config", path.to_str().unwrap()]));
        let field = if name == "kernels-memory" { "kernels.gemm_memory" } else { "kernels.layer_overhead_us" };
        assert!(e.contains(field) && e.contains(path.to_str().unwrap()), "{e}");
    }
    // Fuzzing: a GPU of 1 GiB, or of a million, was accepted; memory is bounded to what boards carry.
    for (name, memory) in [("memory-tiny", "1"), ("memory-huge", "1e6")] {
        let path = sheet_dir.join(format!("{name}.json"));
        std::fs::write(&path, spec.replace("\"memory_gib\": 48.0", &format!("\"memory_gib\": {memory}"))).unwrap();
        let e = rejected(name, &with_model(&["--hardware-config", path.to_str().unwrap()]));
        assert!(e.contains(path.to_str().unwrap()) && e.contains("field `memory_gib`") && e.contains("in [4, 4096]"), "{e}");
    }
    let a40 = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/hardware/A40.json");
    let e = rejected("two-gpus", &with_model(&["--hardware", "L40S", "--hardware-config", a40]));
    assert!(e.contains("--hardware L40S and --hardware-config") && e.contains("pass one"), "{e}");
    let e = rejected("too-big", &["--model", "meta-llama/Llama-3.1-70B-Instruct", "--hardware", "L40S"]);
    assert!(e.contains("does not fit"), "{e}");
    let e = rejected(
        "no-chunk",
        &with_model(&["--enable-chunked-prefill", "false", "--max-model-len", "8192", "--max-num-batched-tokens", "2048"]),
    );
    assert!(e.contains("chunked prefill"), "{e}");
}

/// vLLM refuses a `--max-model-len` beyond what the model's config allows
/// unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; BLIS does the same, and warns
/// when the variable lifts the limit.
#[test]
fn max_model_len_beyond_the_config_needs_vllms_override() {
    let args = ["--model", "meta-llama/Llama-2-7b-hf", "--num-requests", "5", "--max-model-len", "8192"];
    let run = |allow: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_blis"));
        cmd.arg("run").args(args).env_remove("VLLM_ALLOW_LONG_MAX_MODEL_LEN");
        if let Some(v) = allow {
            cmd.env("VLLM_ALLOW_LONG_MAX_MODEL_LEN", v);
        }
        cmd.output().unwrap()
    };
    for allow in [None, Some("0")] {
        let out = run(allow);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("--max-model-len 8192") && err.contains("4096") && err.contains("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"), "{err}");
    }
    let out = run(Some("1"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: --max-model-len 8192"), "{}", stderr(&out));
    let ok = blis(&["run", "--model", "meta-llama/Llama-2-7b-hf", "--num-requests", "5", "--max-model-len", "4096"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
}

#[test]
fn bad_latency_model_settings() {
    let e = rejected("latency-unknown", &with_model(&["--latency-model", "magic"]));
    assert!(e.contains("roofline") && e.contains("blackbox"), "{e}");
    let e = rejected("blackbox-no-coeffs", &with_model(&["--latency-model", "blackbox"]));
    assert!(e.contains("--alpha-coeffs"), "{e}");
    let e = rejected("blackbox-short", &with_model(&["--latency-model", "blackbox", "--alpha-coeffs", "1,2", "--beta-coeffs", "1,2,3"]));
    assert!(e.contains("--alpha-coeffs"), "{e}");
}

#[test]
fn bad_config_files() {
    let dir = scratch("config-files");
    let unknown = write(&dir, "unknown.yaml", "max-num-seqs: 8\nturbo: true\n");
    let e = rejected("config-unknown-key", &with_model(&["--config", &unknown]));
    assert!(e.contains("turbo") && e.contains("unknown.yaml"), "{e}");
    let malformed = write(&dir, "malformed.yaml", "max-num-seqs: [8\n");
    let e = rejected("config-malformed", &with_model(&["--config", &malformed]));
    assert!(e.contains("malformed.yaml"), "{e}");
    let wrong_type = write(&dir, "wrong.yaml", "max-num-seqs: lots\n");
    let e = rejected("config-wrong-type", &with_model(&["--config", &wrong_type]));
    assert!(e.contains("max-num-seqs"), "{e}");
}

/// A file that is not what its flag expects (an endless device, binary
/// data, a hostile nesting of flow brackets, one endless line) is refused
/// quickly, naming the file and the reason, whichever flag names it.
#[test]
fn files_that_are_not_configs_or_traces_are_refused_with_the_reason() {
    let dir = scratch("not-configs");
    let nested = write(&dir, "nested.yaml", format!("clients: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)));
    let binary = write(&dir, "binary.yaml", b"seed: 1\n\xff\xfe\x01");
    let long_line = write(&dir, "long.csv", "x".repeat(17 << 20));
    let (nested, binary, long_line) = (nested.as_str(), binary.as_str(), long_line.as_str());
    let mut cases: Vec<(&str, &str, &str, &str)> = vec![
        ("spec-nested", "--workload-spec", nested, "nested more than 1000 deep at line 1"),
        ("config-nested", "--config", nested, "nested more than 1000 deep at line 1"),
        ("policy-binary", "--policy-config", binary, "not UTF-8 text (invalid byte at offset 8)"),
        ("trace-long-line", "--trace", long_line, "long.csv:1: a line is longer than 16 MiB"),
    ];
    if cfg!(unix) {
        cases.push(("config-endless", "--config", "/dev/zero", "not a text file (a NUL byte at offset 0)"));
        cases.push(("coefficients-endless", "--coefficients", "/dev/zero", "not a text file (a NUL byte at offset 0)"));
    }
    for (name, flag, path, reason) in cases {
        let e = rejected(name, &with_model(&[flag, path]));
        assert!(e.contains(path) && e.contains(reason), "{name} ({flag}): {e}");
    }
}

/// serde writes a float of the wrong type in full (`1e-300` as 300 digits);
/// the error line shows it as written.
#[test]
fn numbers_in_error_lines_stay_short() {
    let dir = scratch("short-numbers");
    let spec = write(&dir, "tiny.yaml", "aggregate_rate: 5\nhorizon: 1e-300\nclients: []\n");
    let e = rejected("spec-tiny-horizon", &with_model(&["--workload-spec", &spec]));
    assert!(e.contains("`1e-300` is not a non-negative whole number") && e.len() < 200, "{e}");
}

/// A bad value from a `--config` file is blamed on the file and its key,
/// not on a flag the user never typed; a flag that overrides it is blamed
/// on the flag.
#[test]
fn a_bad_config_value_is_blamed_on_the_file() {
    let dir = scratch("config-blame");
    let cfg = write(&dir, "run.yaml", "rate: -1\nmax_num_seqs: 0\n");
    let e = rejected("config-blame-file", &with_model(&["--config", &cfg, "--max-num-seqs", "8"]));
    assert!(e.starts_with(&format!("error: --config {cfg}: rate -1:")), "{e}");
    let e = rejected("config-blame-flag", &with_model(&["--config", &cfg, "--rate", "5"]));
    assert!(e.starts_with(&format!("error: --config {cfg}: max-num-seqs must be at least 1")), "{e}");
    let e = rejected("config-blame-override", &with_model(&["--config", &cfg, "--rate", "-2", "--max-num-seqs", "8"]));
    assert!(e.starts_with("error: --rate -2:"), "{e}");
}

#[test]
fn unwritable_output_path() {
    let out = blis(&["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "5", "--output", "/nonexistent-dir/x.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/nonexistent-dir/x.json"));
}

#[test]
fn arrivals_past_the_end_of_simulated_time_are_refused_not_run_at_zero_latency() {
    // 10 requests at 1e-300/s: the second one would arrive ~1e300 s in, where the µs clock saturates.
    let e = rejected("arrival-past-span", &with_model(&["--rate", "1e-300"]));
    assert!(e.contains("request 1 arrives") && e.contains("after the latest simulated time (1e8 s"), "{e}");
}

#[test]
fn outputs_never_share_a_path_or_replace_an_input() {
    let dir = scratch("output-clash");
    let same = dir.join("same.out");
    // Two outputs of one run, spelled differently.
    let spelled = dir.join(".").join("same.out");
    let out = blis(
        &[&["run"][..], M, &["--num-instances", "2", "--output", same.to_str().unwrap(), "--requests-csv", spelled.to_str().unwrap()]]
            .concat(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is also the path of --output"), "{}", stderr(&out));
    assert!(is_empty_dir(&dir), "left a file behind");
    // An output over the run's own workload spec, and a generated trace over its spec.
    let spec = dir.join("w.yaml");
    std::fs::write(&spec, blis(&["workload", "show", "preset:chatbot"]).stdout).unwrap();
    let before = std::fs::read(&spec).unwrap();
    for args in [
        vec![
            "run",
            "--model",
            "meta-llama/llama-3.1-8b-instruct",
            "--workload-spec",
            spec.to_str().unwrap(),
            "--output",
            spec.to_str().unwrap(),
        ],
        vec!["workload", "generate", "--spec", spec.to_str().unwrap(), "--output", spec.to_str().unwrap()],
        vec!["compose", "--from", spec.to_str().unwrap(), "--from", "preset:chatbot", "--output", spec.to_str().unwrap()],
    ] {
        let out = blis(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("writing it would destroy the input"), "{args:?}: {}", stderr(&out));
        assert_eq!(std::fs::read(&spec).unwrap(), before, "{args:?} changed its input");
    }
}

#[test]
fn a_bad_override_of_a_spec_is_blamed_on_the_flag_not_the_spec() {
    let e =
        rejected("override-blame", &["--model", "meta-llama/llama-3.1-8b-instruct", "--workload", "preset:chatbot", "--num-requests", "0"]);
    assert!(e.starts_with("error: --num-requests 0: must be in [1, 1e12]"), "{e}");
    let e =
        rejected("override-blame-rate", &["--model", "meta-llama/llama-3.1-8b-instruct", "--workload", "preset:chatbot", "--rate", "1e7"]);
    assert!(e.starts_with("error: --rate: 10000000 must be in (0, 1000000]"), "{e}");
    // The spec's own unreadable value is the file's, whatever the flag replaces it with.
    let dir = scratch("override-blame-spec");
    let spec = write(&dir, "minus.yaml", "aggregate_rate: 5\nnum_requests: -1\nclients:\n- id: a\n");
    let e =
        rejected("override-blame-file", &["--model", "meta-llama/llama-3.1-8b-instruct", "--workload-spec", &spec, "--num-requests", "50"]);
    assert!(e.contains("minus.yaml: num_requests") && !e.contains("--num-requests"), "{e}");
    let e = stderr(&blis(&["workload", "stats", "--spec", &spec, "--num-requests", "50"]));
    assert!(e.contains("minus.yaml: num_requests") && !e.contains("--num-requests"), "{e}");
}

#[test]
fn a_bad_compile_stall_names_its_flag() {
    for (name, value) in [("moe-compile-negative", "-1s"), ("moe-compile-word", "soon")] {
        let e = rejected(name, &with_model(&["--moe-kernel-compile", value]));
        assert!(e.starts_with("error: --moe-kernel-compile"), "{name}: {e}");
    }
}

#[test]
fn bad_autoscaling_settings() {
    for (name, extra, needle) in [
        ("as-unknown-policy", vec!["--autoscale-policy", "hpa"], "allowed: threshold, target-tracking"),
        (
            "as-min-above-max",
            vec!["--autoscale-policy", "threshold", "--min-instances", "5", "--max-instances", "2"],
            "--min-instances 5 is above --max-instances 2",
        ),
        ("as-negative-delay", vec!["--autoscale-policy", "threshold", "--provisioning-delay", "-30s"], "--provisioning-delay"),
        (
            "as-bad-distribution",
            vec!["--autoscale-policy", "threshold", "--loading-delay", "uniform:3m,1m"],
            "minimum is above the maximum",
        ),
        ("as-bad-interval", vec!["--autoscale-policy", "threshold", "--autoscale-interval", "soon"], "--autoscale-interval"),
        ("as-bad-drain", vec!["--autoscale-policy", "threshold", "--drain-policy", "later"], "allowed: wait, immediate, redirect"),
        ("as-slowdown", vec!["--autoscale-policy", "threshold", "--warmup-slowdown", "0.5"], "[1, 100]"),
        ("as-cost", vec!["--autoscale-policy", "threshold", "--gpu-hour-cost", "-2"], "--gpu-hour-cost"),
        ("as-without-policy", vec!["--max-instances", "4"], "needs autoscaling"),
        (
            "as-min-beyond-limit",
            vec!["--autoscale-policy", "threshold", "--min-instances", "1025"],
            "--min-instances 1025: must be at most 1024",
        ),
        (
            "as-max-beyond-limit",
            vec!["--autoscale-policy", "threshold", "--max-instances", "2000"],
            "--max-instances 2000: must be at most 1024",
        ),
        (
            "as-initial-outside",
            vec!["--autoscale-policy", "threshold", "--num-instances", "9", "--max-instances", "4"],
            "--num-instances 9",
        ),
        ("as-plot-without", vec!["--plot-timeline", "/nonexistent-dir/x.svg"], "--plot-timeline"),
    ] {
        let e = rejected(name, &with_model(&extra));
        assert!(e.contains(needle), "{name}: {e}");
    }
}

#[test]
fn bad_kv_offloading_settings() {
    for (name, extra, needle) in [
        ("kvo-zero-size", vec!["--kv-offloading-size", "0"], "--kv-offloading-size 0.0: must be a positive number of GiB"),
        ("kvo-negative-size", vec!["--kv-offloading-size", "-4"], "must be a positive number of GiB"),
        ("kvo-nan-size", vec!["--kv-offloading-size", "NaN"], "--kv-offloading-size"),
        ("kvo-below-one-block", vec!["--kv-offloading-size", "0.0001"], "less than one KV block"),
        ("kvo-zero-blocks", vec!["--kv-cpu-blocks", "0"], "at least one block"),
        ("kvo-both", vec!["--kv-cpu-blocks", "100", "--kv-offloading-size", "8"], "not both"),
        ("kvo-backend", vec!["--kv-offloading-size", "8", "--kv-offloading-backend", "disk"], "allowed values are native, lmcache"),
        ("kvo-native-disk", vec!["--kv-tiers", "disk:100", "--kv-offloading-backend", "native"], "need --kv-offloading-backend lmcache"),
        ("kvo-tier-medium", vec!["--kv-tiers", "tape:100"], "allowed values are cpu, disk, remote"),
        ("kvo-tier-zero", vec!["--kv-tiers", "disk:0"], "must be a positive number"),
        ("kvo-tier-zero-blocks", vec!["--kv-tiers", "disk:0blocks"], "at least one block"),
        ("kvo-tier-below-block", vec!["--kv-tiers", "remote:0.00001"], "less than one KV block"),
        ("kvo-tier-bandwidth", vec!["--kv-tiers", "disk:100:-5"], "bandwidth_gb_s -5.0"),
        ("kvo-tier-zero-bandwidth", vec!["--kv-tiers", "disk:100:0"], "bandwidth_gb_s 0.0"),
        ("kvo-tier-latency", vec!["--kv-tiers", "disk:100:5:-1ms"], "latency"),
        ("kvo-tier-order", vec!["--kv-tiers", "disk:100,cpu:8"], "ordered cpu, disk, remote"),
        ("kvo-tier-twice", vec!["--kv-offloading-size", "8", "--kv-tiers", "cpu:8"], "given twice"),
        ("kvo-tier-cpu-link", vec!["--kv-tiers", "cpu:8:20"], "--kv-transfer-bandwidth"),
        ("kvo-tier-syntax", vec!["--kv-tiers", "disk"], "MEDIUM:SIZE"),
        ("kvo-bandwidth-zero", vec!["--kv-cpu-blocks", "100", "--kv-transfer-bandwidth", "0"], "--kv-transfer-bandwidth"),
        ("kvo-bandwidth-negative", vec!["--kv-cpu-blocks", "100", "--kv-transfer-bandwidth", "-3"], "GB/s in [1e-6, 1e6]"),
        ("kvo-bandwidth-tiny", vec!["--kv-cpu-blocks", "100", "--kv-transfer-bandwidth", "1e-300"], "GB/s in [1e-6, 1e6]"),
        ("kvo-tier-tiny-bandwidth", vec!["--kv-tiers", "remote:1:1e-300:0"], "bandwidth_gb_s"),
        ("kvo-latency-negative", vec!["--kv-cpu-blocks", "100", "--kv-transfer-latency", "-5us"], "--kv-transfer-latency"),
        ("kvo-latency-unit", vec!["--kv-cpu-blocks", "100", "--kv-transfer-latency", "5 parsecs"], "unknown unit"),
        ("kvo-without-tier", vec!["--kv-transfer-bandwidth", "25"], "need a tier"),
        ("kvo-too-many", vec!["--kv-cpu-blocks", "5000000000"], "at most"),
    ] {
        let e = rejected(name, &with_model(&extra));
        assert!(e.contains(needle), "{name}: {e}");
    }
}

/// Each `(name, yaml, needle)` is a `--policy-config` file that `blis run`
/// with `args` refuses in one line naming the file and containing `needle`.
fn assert_policy_files_refused(tag: &str, args: &[&str], cases: &[(&str, &str, &str)]) {
    let dir = scratch(tag);
    for &(name, yaml, needle) in cases {
        let path = write(&dir, &format!("{name}.yaml"), yaml);
        let mut full = args.to_vec();
        full.extend_from_slice(&["--policy-config", &path]);
        let e = rejected(&format!("{tag}-{name}"), &full);
        assert!(e.contains(needle) && e.contains(&format!("{name}.yaml")), "{name}: {e}");
    }
}

#[test]
fn bad_autoscale_and_node_pool_sections_name_the_file_and_field() {
    let args = ["--model", "meta-llama/llama-3.1-70b-instruct", "--tp", "4", "--num-requests", "10"];
    assert_policy_files_refused(
        "as-section",
        &args,
        &[
            ("unknown-key", "autoscale: {type: threshold, intervall: 30s}\n", "autoscale.intervall"),
            ("unknown-param", "autoscale: {type: target-tracking, params: {targett: 0.5}}\n", "autoscale.params.targett"),
            ("unknown-metric", "autoscale: {type: threshold, params: {metric: gpu}}\n", "autoscale.params.metric"),
            ("negative-delay", "autoscale: threshold\nnode_pools: [{name: a, provisioning_delay: -5s}]\n", "provisioning_delay"),
            ("pool-gpu-too-small", "autoscale: threshold\nnode_pools: [{name: small, hardware: L40S, tp: 1}]\n", "node_pools[0] (small)"),
            ("pool-unknown-gpu", "autoscale: threshold\nnode_pools: [{name: x, hardware: TPU}]\n", "unknown GPU"),
            (
                "pool-too-small",
                "autoscale: {type: threshold, max_replicas: 8}\nnode_pools: [{name: a, max_nodes: 2}]\n",
                "hold at most 2 replicas",
            ),
        ],
    );
}

/// Issue 27: a warning (here: coefficients fitted on another GPU) used to
/// print before the one-line error of an input checked later.
#[test]
fn a_warning_does_not_precede_the_error_line() {
    let dir = scratch("held");
    let csv = dir.join("no-such-dir").join("r.csv");
    let e = rejected("held-run", &with_model(&["--hardware", "A100-80GB", "--requests-csv", csv.to_str().unwrap()]));
    assert!(e.contains("--requests-csv") && !e.contains("warning:") && !e.contains("fitted on H100"), "{e}");
}

/// Issue 27: `--num-requests` accepted 2⁶³ from a config file while refusing
/// 1e30 on the command line. One rule now, wherever the count is written.
#[test]
fn request_counts_obey_one_rule_on_the_command_line_in_a_config_and_in_a_spec() {
    let dir = scratch("num-requests-rule");
    let huge = "9223372036854775808";
    let e = rejected("num-requests-flag", &["--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", huge]);
    assert!(e.contains("must be in [1, 1e12]"), "{e}");
    let config = write(&dir, "c.yaml", format!("num-requests: {huge}\n"));
    let e = rejected("num-requests-config", &["--model", "meta-llama/llama-3.1-8b-instruct", "--config", &config]);
    assert!(e.contains("--config") && e.contains("must be in [1, 1e12]"), "{e}");
    let spec = write(
        &dir,
        "w.yaml",
        format!(
            "aggregate_rate: 5\nnum_requests: {huge}\nclients:\n  - id: a\n    rate_fraction: 1\n    input_distribution: {{type: constant, params: {{value: 8}}}}\n    output_distribution: {{type: constant, params: {{value: 8}}}}\n"
        ),
    );
    let e = rejected("num-requests-spec", &["--model", "meta-llama/llama-3.1-8b-instruct", "--workload-spec", &spec]);
    assert!(e.contains("num_requests") && e.contains("must be in [1, 1e12]"), "{e}");
    assert!(
        rejected("num-requests-1e13", &["--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "1e13"])
            .contains("must be in [1, 1e12]")
    );
}

/// `blis serve --kv-events-config` is checked before anything listens.
#[test]
fn bad_kv_events_configs_are_refused_before_serving() {
    for (config, needle) in [
        ("not json", "--kv-events-config"),
        (r#"{"publisher": "nats"}"#, "allowed values are zmq, null"),
        (r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "udp://x:1"}"#, "expected tcp://HOST:PORT"),
        (r#"{"replay_endpoint": "tcp://*:5558"}"#, "replay_endpoint is not supported"),
        (r#"{"enable_kv_cache_events": true, "topik": "x"}"#, "unknown field `topik`"),
    ] {
        let out = blis(&["serve", "--model", "meta-llama/llama-3.1-8b-instruct", "--port", "0", "--kv-events-config", config]);
        assert_refused(&out, config, needle);
    }
}

/// Disaggregated deployments that cannot run: one line naming the flag.
#[test]
fn bad_pd_deployments_are_refused() {
    for (name, args, needle) in [
        ("pd-zero-prefill", &["--prefill-instances", "0", "--decode-instances", "2"][..], "--prefill-instances 0"),
        ("pd-zero-decode", &["--prefill-instances", "1", "--decode-instances", "0"], "--decode-instances 0"),
        ("pd-one-pool", &["--prefill-instances", "1"], "needs --decode-instances"),
        (
            "pd-unknown-decider",
            &["--prefill-instances", "1", "--decode-instances", "1", "--pd-decider", "sometimes"],
            "allowed: always, never, prefix-threshold",
        ),
        (
            "pd-negative-bandwidth",
            &["--prefill-instances", "1", "--decode-instances", "1", "--pd-transfer-bandwidth", "-5"],
            "--pd-transfer-bandwidth -5",
        ),
        (
            "pd-nan-bandwidth",
            &["--prefill-instances", "1", "--decode-instances", "1", "--pd-transfer-bandwidth", "NaN"],
            "--pd-transfer-bandwidth",
        ),
        (
            "pd-negative-latency",
            &["--prefill-instances", "1", "--decode-instances", "1", "--pd-transfer-latency", "-1ms"],
            "--pd-transfer-latency",
        ),
        ("pd-knob-without-pools", &["--pd-decider", "always"], "needs a disaggregated deployment"),
        (
            "pd-threshold-without-decider",
            &["--prefill-instances", "1", "--decode-instances", "1", "--pd-prefix-threshold", "5"],
            "--pd-decider prefix-threshold",
        ),
        ("pd-and-num-instances", &["--prefill-instances", "1", "--decode-instances", "1", "--num-instances", "3"], "--num-instances"),
        (
            "pd-unknown-prefill-scorer",
            &["--prefill-instances", "1", "--decode-instances", "1", "--prefill-routing-scorers", "magic:1"],
            "magic",
        ),
        (
            "pd-nan-prefill-scorer",
            &["--prefill-instances", "1", "--decode-instances", "1", "--prefill-routing-scorers", "queue-depth:NaN"],
            "weight of `queue-depth` must be a finite number, got `NaN`",
        ),
        (
            "pd-too-many",
            &["--prefill-instances", "1000", "--decode-instances", "1000"],
            "1000: the prefill and decode pools (1000 decode instances) may have at most 1024 instances together",
        ),
        (
            "pd-decode-kv-too-small",
            &["--prefill-instances", "1", "--decode-instances", "1", "--decode-hardware", "L40S", "--gpu-memory-utilization", "0.55"],
            "the decode pool: meta-llama/Llama-3.1-8B-Instruct on 1 × L40S: the KV cache holds",
        ),
        (
            "pd-autoscaled-below-min",
            &["--prefill-instances", "1", "--decode-instances", "3", "--autoscale-policy", "threshold", "--min-instances", "2"],
            "--prefill-instances 1 (the initial replicas) must be between --min-instances 2 and --max-instances 8",
        ),
        (
            "pd-autoscaled-zero",
            &["--prefill-instances", "1", "--decode-instances", "0", "--autoscale-policy", "threshold"],
            "--decode-instances 0 (the initial replicas) must be between --min-instances 1",
        ),
        (
            "pd-prefill-cache",
            &["--prefill-instances", "1", "--decode-instances", "1", "--pd-prefill-cache", "maybe"],
            "allowed: keep, drop",
        ),
        (
            "pd-offload-link-flag",
            &["--prefill-instances", "1", "--decode-instances", "1", "--kv-transfer-bandwidth", "25"],
            "--pd-transfer-bandwidth",
        ),
    ] {
        let err = rejected(name, &with_model(args));
        assert!(err.contains(needle), "{name}: {err}");
    }
}

#[test]
fn bad_pools_sections_name_the_file_and_field() {
    assert_policy_files_refused(
        "pd-section",
        M,
        &[
            ("unknown-key", "pools: {prefil: {instances: 1}}\n", "pools.prefil"),
            ("unknown-pool-key", "pools: {prefill: {instance: 1}, decode: {instances: 1}}\n", "pools.prefill.instance"),
            (
                "decode-scorers",
                "pools: {prefill: {instances: 1}, decode: {instances: 1, routing_scorers: {queue-depth: 1}}}\n",
                "routed by the routing section",
            ),
            ("zero-prefill", "pools: {prefill: {instances: 0}, decode: {instances: 1}}\n", "a pool needs at least one instance"),
            ("bad-latency", "pools: {prefill: {instances: 1}, decode: {instances: 1}, transfer_latency: soon}\n", "pools.transfer_latency"),
            (
                "bad-decider",
                "pools: {prefill: {instances: 1}, decode: {instances: 1}, decider: coin}\n",
                "allowed: always, never, prefix-threshold",
            ),
        ],
    );
}

/// Values that parse but that no machine or clock can hold were accepted:
/// a billion prefix groups aborted on a 48 GB allocation, a spec horizon of
/// u64::MAX µs never ended, a 1e-300 GB/s link reported transfers of 1e8 s,
/// a 1e-300 Mbit/s client network latencies of 1.8e16 ms, and `workload
/// generate` wrote arrivals of u64::MAX µs that `blis run` then refused.
#[test]
fn values_beyond_what_a_run_can_hold_are_refused() {
    let dir = scratch("beyond");
    for (name, extra, needle) in [
        ("prefix-groups", vec!["--prefix-tokens", "10", "--prefix-groups", "1e9"], "--prefix-groups"),
        (
            "pd-bandwidth",
            vec!["--prefill-instances", "1", "--decode-instances", "1", "--pd-transfer-bandwidth", "1e-300"],
            "--pd-transfer-bandwidth",
        ),
    ] {
        let e = rejected(name, &with_model(&extra));
        assert!(e.contains(needle), "{name}: {e}");
    }
    let client = "clients:\n- id: a\n  input_distribution: {type: constant, params: {value: 100}}\n  output_distribution: {type: constant, params: {value: 10}}\n";
    for (name, spec, needle) in [
        ("horizon", format!("aggregate_rate: 10\nhorizon: 18446744073709551615\n{client}"), "horizon"),
        (
            "window",
            format!(
                "aggregate_rate: 10\nnum_requests: 5\n{client}  lifecycle: {{windows: [{{start_us: 0, end_us: 18446744073709551615}}]}}\n"
            ),
            "end_us",
        ),
        (
            "network",
            format!("aggregate_rate: 10\nnum_requests: 5\n{client}  network: {{rtt_ms: 1, bandwidth_mbps: 1.0e-300}}\n"),
            "bandwidth_mbps",
        ),
    ] {
        let path = write(&dir, &format!("{name}.yaml"), spec);
        // Without --num-requests, which would replace the spec's bounds.
        let e = rejected(name, &["--model", "meta-llama/llama-3.1-8b-instruct", "--workload-spec", &path]);
        assert!(e.contains(needle) && e.contains(&format!("{name}.yaml")), "{name}: {e}");
    }
    let csv = dir.join("slow.csv");
    for cmd in ["generate", "stats"] {
        let mut args = vec!["workload", cmd, "--spec", "preset:chatbot", "--rate", "1e-300", "--num-requests", "3"];
        let plot = dir.join("slow.svg");
        match cmd {
            "generate" => args.extend(["-o", csv.to_str().unwrap()]),
            _ => args.extend(["--plot", plot.to_str().unwrap()]),
        }
        assert_refused(&blis(&args), cmd, "after the latest simulated time");
        assert!(!csv.exists() && !plot.exists(), "{cmd} wrote a file");
    }
}

/// `blis replay` reads a trace v2 only: a Mooncake file (which `blis run
/// --trace` reads) is refused as such, not as a missing header.
#[test]
fn replay_refuses_a_mooncake_file_by_what_it_is() {
    let mooncake = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mooncake-sample.jsonl");
    let out = blis(&["replay", "--model", "meta-llama/llama-3.1-8b-instruct", "--trace", mooncake]);
    assert_refused(&out, "replay-mooncake", "replay reads a trace v2");
    assert!(stderr(&out).contains("blis run --trace FILE"), "{}", stderr(&out));
}
