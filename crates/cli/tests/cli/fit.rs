//! `blis fit` end to end.

use std::path::PathBuf;

use blis_physics::coefficients::CoefficientSet;

use crate::experiment_dir::{TempDir, blis, edit_server_facts, stderr, stdout, write_experiment};

#[test]
fn fits_a_loadable_deterministic_coefficient_file_with_provenance() {
    let tmp = TempDir::new("fit");
    write_experiment(&tmp.0, "exp-a", true);
    write_experiment(&tmp.0, "exp-b", false);
    let run = |name: &str| {
        let out_path = tmp.0.join(name);
        let out = blis(&[
            "fit",
            tmp.0.to_str().unwrap(),
            "--latency-model",
            "unified-5",
            "--rounds",
            "2",
            "--refine-evals",
            "8",
            "--fitted-at",
            "2026-01-01",
            "-o",
            out_path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        std::fs::read_to_string(out_path).unwrap()
    };
    let (a, b) = (run("a.yaml"), run("b.yaml"));
    assert_eq!(a, b, "same command, same coefficients");
    let set = CoefficientSet::parse(&a, std::path::Path::new("a.yaml")).unwrap();
    assert_eq!((set.latency_model.name(), set.alpha.len(), set.beta.len()), ("unified-5", 3, 5));
    assert_eq!(set.provenance.fitted_on, ["exp-a", "exp-b"]);
    assert_eq!(set.provenance.fitted_at.as_deref(), Some("2026-01-01"));
    assert!(set.provenance.command.as_deref().is_some_and(|c| c.starts_with("blis fit")));
    assert!(set.provenance.train_errors.contains_key("e2e_mean_ms"));
    // The file drives validate.
    let out = blis(&["validate", tmp.0.to_str().unwrap(), "-q", "--coefficients", tmp.0.join("a.yaml").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn holding_out_the_only_model_is_refused() {
    let tmp = TempDir::new("fit-holdout");
    write_experiment(&tmp.0, "exp", false);
    let out = blis(&["fit", tmp.0.to_str().unwrap(), "--holdout-model", "Llama-2-7b-hf", "--refine-evals", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no active experiment left"), "{}", stderr(&out));
    let out = blis(&["fit", tmp.0.to_str().unwrap(), "--holdout-model", "gpt-9", "--refine-evals", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("gpt-9"));
}

/// An experiment whose every request the simulated server refuses (prompts
/// of 60 tokens, a 32-token context) gives the fit nothing to learn from:
/// refused, and no coefficient file is written.
#[test]
fn an_experiment_the_server_refuses_entirely_is_not_fitted() {
    let tmp = TempDir::new("fit-refused");
    let dir = write_experiment(&tmp.0, "exp", false);
    edit_server_facts(&dir, |text| format!("{text}max_model_len: 32\nmax_num_batched_tokens: 128\n"));
    let out_file = tmp.0.join("out.yaml");
    let out = blis(&["fit", tmp.0.to_str().unwrap(), "--refine-evals", "0", "--output", out_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("ran no step for it"), "{}", stderr(&out));
    assert!(!out_file.exists());
}

/// A model BLIS does not bundle can be fitted from its config.json; the
/// provenance command says so, so it regenerates the file.
#[test]
fn fits_an_unbundled_model_and_records_its_config_in_the_command() {
    let tmp = TempDir::new("fit-definitions");
    let dir = write_experiment(&tmp.0, "exp", true);
    let cfg = dir.join("exp-config.yaml");
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("meta-llama/Llama-2-7b-hf", "acme/private-7b")).unwrap();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/models/meta-llama/Llama-2-7b-hf.json");
    let out_path = tmp.0.join("c.yaml");
    let args = [
        "fit",
        dir.to_str().unwrap(),
        "--latency-model",
        "blackbox",
        "--rounds",
        "1",
        "--refine-evals",
        "0",
        "-o",
        out_path.to_str().unwrap(),
    ];
    let refused = blis(&args);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let out = blis(&[&args[..], &["--model-config", config]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let set = CoefficientSet::parse(&std::fs::read_to_string(&out_path).unwrap(), &out_path).unwrap();
    assert!(
        set.provenance.command.as_deref().is_some_and(|c| c.ends_with(&format!("--model-config {config}"))),
        "{:?}",
        set.provenance.command
    );
}

/// A hidden trained-physics set: every β and α away from the bundled H100
/// fit (β in the published layout, α in BLIS's, with its queueing per
/// running request).
pub(crate) const HIDDEN: &str = "latency_model: trained-physics\nalpha: [2000.0, 0.0, 2500.0, 40.0]\nbeta: [1.5, 1.0, 1.35, 3.9, 40.0, 10.0, 200.0, 0.0, 1.0, 1.0, 0.0]\n";

/// The workload the OTEL tests record Llama-3.1-8B serving with [`HIDDEN`].
const LLAMA_OTEL_RUN: &[&str] = &[
    "--model",
    "meta-llama/llama-3.1-8b-instruct",
    "--num-requests",
    "300",
    "--rate",
    "20",
    "--prompt-tokens-stdev",
    "400",
    "--prompt-tokens-min",
    "16",
    "--seed",
    "7",
    "-q",
];

/// `blis run` with [`HIDDEN`] and `args`, exporting OTEL traces into `tmp`:
/// (the hidden set's file, the trace, the run's stdout).
fn record_otel(tmp: &TempDir, args: &[&str]) -> (PathBuf, PathBuf, String) {
    let hidden = tmp.0.join("hidden.yaml");
    std::fs::write(&hidden, HIDDEN).unwrap();
    let otel = tmp.0.join("otel.jsonl");
    let mut all = vec!["run", "--coefficients", hidden.to_str().unwrap(), "--otel-output", otel.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = blis(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    (hidden, otel, stdout(&out))
}

/// Mean client-side E2E and TTFT (ms) of a `blis run` with `coefficients` on a
/// workload unlike the one fitted on (long prompts, long outputs, low rate).
fn mean_e2e_ttft(coefficients: &str) -> (f64, f64) {
    mean_e2e_ttft_on(coefficients, "H100", "6")
}

/// [`mean_e2e_ttft`] on `gpu` at `rate` requests per second.
fn mean_e2e_ttft_on(coefficients: &str, gpu: &str, rate: &str) -> (f64, f64) {
    let out = blis(&[
        "run",
        "--model",
        "meta-llama/llama-3.1-8b-instruct",
        "--coefficients",
        coefficients,
        "--num-requests",
        "300",
        "--rate",
        rate,
        "--prompt-tokens",
        "2048",
        "--output-tokens",
        "300",
        "--seed",
        "9",
        "-q",
        "--format",
        "json",
        "--hardware",
        gpu,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (r["latency_ms"]["e2e"]["mean"].as_f64().unwrap(), r["latency_ms"]["ttft"]["mean"].as_f64().unwrap())
}

/// A run that preempts (a small KV cache) and whose client gives up on some
/// requests: each preemption is a `PREEMPTED` and, when the request runs
/// again, a `SCHEDULED` of kind `RESUME`, as many as the report counts;
/// every journey's events are in time order with `num_preemptions` never
/// falling; completed journeys end `length`, abandoned ones `aborted`. The
/// fit leaves the aborted journeys out of α, which it still recovers.
#[test]
fn preemptions_and_aborts_are_in_the_otel_trace_and_do_not_bias_alpha() {
    let tmp = TempDir::new("fit-otel-preempt");
    let run = [
        "--model",
        "meta-llama/llama-3.1-8b-instruct",
        "--num-gpu-blocks",
        "600",
        "--prompt-tokens",
        "1024",
        "--output-tokens",
        "512",
        "--rate",
        "4",
        "--num-requests",
        "200",
        "--client-timeout",
        "60",
        "--seed",
        "3",
        "--format",
        "json",
        "-q",
    ];
    let (_, otel, report) = record_otel(&tmp, &run);
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let (completed, timed_out) = (report["requests"]["completed"].as_u64().unwrap(), report["requests"]["timed_out"].as_u64().unwrap());
    let preemptions = report["kv_cache"]["preemptions"].as_u64().unwrap();
    assert!(preemptions > 10 && timed_out > 5 && completed > 100, "the run preempts and aborts: {}", report["requests"]);
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for line in std::fs::read_to_string(&otel).unwrap().lines() {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        for scope in line["resourceSpans"].as_array().unwrap().iter().flat_map(|r| r["scopeSpans"].as_array().unwrap()) {
            if scope["scope"]["name"] != "vllm.scheduler" {
                continue;
            }
            for span in scope["spans"].as_array().unwrap() {
                let events = span["events"].as_array().unwrap();
                let attr = |e: &serde_json::Value, key: &str| {
                    e["attributes"].as_array().unwrap().iter().find(|a| a["key"] == key).map(|a| a["value"].clone())
                };
                let mut last = (0u64, 0u64);
                for e in events {
                    let t: u64 = e["timeUnixNano"].as_str().unwrap().parse().unwrap();
                    let n: u64 = attr(e, "num_preemptions").unwrap()["intValue"].as_str().unwrap().parse().unwrap();
                    assert!(t >= last.0 && n >= last.1, "{span}");
                    last = (t, n);
                    let name = e["name"].as_str().unwrap();
                    let kind = match name {
                        "SCHEDULED" => format!("SCHEDULED {}", attr(e, "schedule.kind").unwrap()["stringValue"].as_str().unwrap()),
                        "FINISHED" => format!("FINISHED {}", attr(e, "finish.status").unwrap()["stringValue"].as_str().unwrap()),
                        _ => name.to_string(),
                    };
                    *counts.entry(kind).or_default() += 1;
                }
            }
        }
    }
    let count = |k: &str| counts.get(k).copied().unwrap_or(0);
    assert_eq!(
        (count("PREEMPTED"), count("FINISHED length"), count("FINISHED aborted")),
        (preemptions, completed, timed_out),
        "{counts:?}"
    );
    assert!(count("SCHEDULED RESUME") <= preemptions && count("SCHEDULED RESUME") > 0, "{counts:?}");
    let fitted = tmp.0.join("fitted.yaml");
    let out = blis(&["fit", "--otel", otel.to_str().unwrap(), "--fitted-at", "2026-01-01", "-o", fitted.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("α on {completed} journeys")), "{}", stderr(&out));
    let set = CoefficientSet::load(&fitted).unwrap();
    for (got, want) in set.alpha.iter().zip([2000.0, 0.0, 2500.0, 40.0]) {
        assert!((got - want).abs() < 1.0, "α {:?}", set.alpha);
    }
}

/// Issue 26: a synthetic OTLP/JSON journey and step trace written by the
/// simulator from known coefficients (`blis run --otel-output`) is fitted by
/// teacher forcing. α is identified exactly (the journey separates the
/// queueing, emission and completion delays, and the steps give the running
/// batch each queueing delay grew with); β is identified up to the
/// collinear per-layer and per-step constants, so what is checked is what
/// a user needs: the recovered set predicts a different workload as the
/// hidden one does. Observed: E2E −1.0 %, TTFT −0.1 %, step-time MAPE 0.21 %.
#[test]
fn an_otel_trace_from_known_coefficients_is_fitted_back() {
    let tmp = TempDir::new("fit-otel");
    let (hidden, otel, _) = record_otel(&tmp, LLAMA_OTEL_RUN);
    let fitted = tmp.0.join("fitted.yaml");
    let out = blis(&["fit", "--otel", otel.to_str().unwrap(), "--fitted-at", "2026-01-01", "-o", fitted.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("α on 300 journeys"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let set = CoefficientSet::load(&fitted).unwrap();
    assert_eq!(set.provenance.source, "blis fit --otel");
    assert_eq!(set.provenance.hardware.as_deref(), Some("H100"));
    for (got, want) in set.alpha.iter().zip([2000.0, 0.0, 2500.0, 40.0]) {
        assert!((got - want).abs() < 1.0, "α {:?}", set.alpha);
    }
    let step_mape = set.provenance.train_errors["step_time_mape"];
    assert!(step_mape < 1.0, "step-time MAPE {step_mape}");
    let (e2e, ttft) = mean_e2e_ttft(fitted.to_str().unwrap());
    let (e2e_true, ttft_true) = mean_e2e_ttft(hidden.to_str().unwrap());
    eprintln!(
        "otel fit on another workload: E2E {:+.2} %, TTFT {:+.2} %",
        100.0 * (e2e / e2e_true - 1.0),
        100.0 * (ttft / ttft_true - 1.0)
    );
    assert!((e2e / e2e_true - 1.0).abs() < 0.02, "E2E {e2e} vs {e2e_true}");
    assert!((ttft / ttft_true - 1.0).abs() < 0.05, "TTFT {ttft} vs {ttft_true}");

    // The same trace as vLLM's journey and step tracing export it fits to
    // the same coefficients: `api.`/`journey.` event prefixes,
    // FIRST_RESPONSE_FROM_CORE, `ts.monotonic` and `event.ts.monotonic` as
    // seconds (Python's time.monotonic()), dotted token attributes with
    // the request's limit in `decode.max_tokens` and the tokens generated
    // in `decode.done_tokens`, spans joined by their trace id (the API and
    // core request ids differ), `kv.blocks_total_gpu`, and a snapshot of a
    // running request given no tokens in the step.
    let shaped = tmp.0.join("vllm-shaped.jsonl");
    std::fs::write(&shaped, vllm_shaped(&std::fs::read_to_string(&otel).unwrap())).unwrap();
    let refitted = tmp.0.join("vllm-shaped.yaml");
    let out = blis(&["fit", "--otel", shaped.to_str().unwrap(), "--fitted-at", "2026-01-01", "-o", refitted.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("α on 300 journeys"), "{}", stderr(&out));
    let shaped_set = CoefficientSet::load(&refitted).unwrap();
    for (got, want) in shaped_set.alpha.iter().chain(&shaped_set.beta).zip(set.alpha.iter().chain(&set.beta)) {
        assert!(
            (got - want).abs() <= 1e-6 * want.abs().max(1.0),
            "vLLM-shaped {:?} {:?} vs {:?} {:?}",
            shaped_set.alpha,
            shaped_set.beta,
            set.alpha,
            set.beta
        );
    }

    // α's delays end where the request reaches the engine (HANDOFF_TO_CORE):
    // the wait from there until the engine's loop takes it into the
    // scheduler (QUEUED; under async scheduling, a step or two on a busy
    // server) is the simulated engine's. A journey without a hand-off is
    // timed from QUEUED, with a warning: that wait then lands in α and the
    // simulation adds it again. Observed: α0 2.0 → 11.6 ms, α3 40 → 271 µs,
    // TTFT +13.7 % on the other workload.
    // A model the trace names but BLIS does not know is blamed on the trace.
    let unknown = tmp.0.join("unknown-model.jsonl");
    std::fs::write(&unknown, std::fs::read_to_string(&otel).unwrap().replace("\"meta-llama/Llama-3.1-8B-Instruct\"", "\"acme/x\""))
        .unwrap();
    let out = blis(&["fit", "--otel", unknown.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown-model.jsonl: the trace's gen_ai.request.model acme/x: no bundled config.json"),
        "{}",
        stderr(&out)
    );
    let no_handoff = tmp.0.join("no-handoff.jsonl");
    let text: String = std::fs::read_to_string(&otel)
        .unwrap()
        .lines()
        .map(|l| l.replace(r#""name":"HANDOFF_TO_CORE""#, r#""name":"SOMETHING_ELSE""#) + "\n")
        .collect();
    std::fs::write(&no_handoff, text).unwrap();
    let refitted = tmp.0.join("no-handoff.yaml");
    let out = blis(&["fit", "--otel", no_handoff.to_str().unwrap(), "-o", refitted.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: 300 of 300 journeys have no HANDOFF_TO_CORE"), "{}", stderr(&out));
    let from_queued = CoefficientSet::load(&refitted).unwrap();
    assert!(from_queued.alpha[0] > set.alpha[0] + 2000.0, "α {:?} vs {:?}", from_queued.alpha, set.alpha);
    let (_, ttft) = mean_e2e_ttft(refitted.to_str().unwrap());
    assert!(ttft > ttft_true * 1.05, "TTFT {ttft} vs {ttft_true}");

    // Outside vLLM's rich subsample a step has no snapshots: every batch
    // without them is rebuilt from its summary's counts (the research
    // notes' fallback), its prefill tokens spread by the cv² of the steps
    // that kept theirs (here one step in eight), else evenly, with a
    // warning. Either way the fit still predicts the other workload.
    // Observed: E2E −1.0 %, TTFT −0.4 % with none; −1.1 % and −1.4 % with
    // one in eight (cv² 0.380): at this rate a step rarely prefills more than
    // one or two requests, so the spread changes little.
    for (name, keep_every, rebuilt, cv2) in [
        ("no-snapshots", 0u64, "(1501 rebuilt from their counts, 0 left out)", false),
        ("one-in-eight", 8, "rebuilt from their counts, 0 left out)", true),
    ] {
        let thinned = tmp.0.join(format!("{name}.jsonl"));
        let text: String = std::fs::read_to_string(&otel)
            .unwrap()
            .lines()
            .map(|line| {
                let mut doc: serde_json::Value = serde_json::from_str(line).unwrap();
                for scope in doc["resourceSpans"][0]["scopeSpans"].as_array_mut().unwrap() {
                    for span in scope["spans"].as_array_mut().unwrap() {
                        if let Some(events) = span.get_mut("events").and_then(|e| e.as_array_mut()) {
                            let step = |e: &serde_json::Value| {
                                e["attributes"]
                                    .as_array()
                                    .and_then(|a| a.iter().find(|a| a["key"] == "step.id"))
                                    .and_then(|a| a["value"]["intValue"].as_str()?.parse::<u64>().ok())
                            };
                            events.retain(|e| {
                                e["name"] != "step.REQUEST_SNAPSHOT" || (keep_every > 0 && step(e).is_some_and(|id| id % keep_every == 0))
                            });
                        }
                    }
                }
                doc.to_string() + "\n"
            })
            .collect();
        std::fs::write(&thinned, text).unwrap();
        let refitted = tmp.0.join(format!("{name}.yaml"));
        let out = blis(&["fit", "--otel", thinned.to_str().unwrap(), "-o", refitted.to_str().unwrap()]);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        assert!(err.contains(rebuilt), "{err}");
        assert_eq!(err.contains("spread their prefill tokens by cv²"), cv2, "{err}");
        assert_eq!(err.contains("warning: no step has step.REQUEST_SNAPSHOT"), !cv2, "{err}");
        let (e2e, ttft) = mean_e2e_ttft(refitted.to_str().unwrap());
        let spread = err.lines().find(|l| l.contains("cv²")).unwrap_or_default().trim();
        eprintln!(
            "otel fit, snapshots {name}: E2E {:+.2} %, TTFT {:+.2} % ({spread})",
            100.0 * (e2e / e2e_true - 1.0),
            100.0 * (ttft / ttft_true - 1.0)
        );
        assert!((e2e / e2e_true - 1.0).abs() < 0.02, "{name}: E2E {e2e} vs {e2e_true}");
        assert!((ttft / ttft_true - 1.0).abs() < 0.05, "{name}: TTFT {ttft} vs {ttft_true}");
    }
}

/// A MoE server started cold spends some steps compiling its fused-MoE
/// kernels: in an OTEL trace those steps last the compiler's second, not
/// what the step costs. `blis fit --otel` leaves out the steps the server
/// would have compiled in (counted in its summary), and fits the others
/// back to the hidden set; told the server was warm (`--moe-kernel-compile
/// 0`) it keeps them, and its step-time error shows what they would cost.
#[test]
fn an_otel_fit_leaves_out_the_steps_a_cold_moe_server_compiled_in() {
    let tmp = TempDir::new("fit-otel-moe");
    let (_, otel, report) = record_otel(
        &tmp,
        &[
            "--model",
            "mistralai/Mixtral-8x7B-v0.1",
            "--tp",
            "2",
            "--num-requests",
            "200",
            "--rate",
            "8",
            "--prompt-tokens-stdev",
            "300",
            "--prompt-tokens-min",
            "16",
            "--seed",
            "3",
            "--format",
            "json",
        ],
    );
    let compiled = serde_json::from_str::<serde_json::Value>(&report).unwrap()["batch"]["moe_kernel_compiles"].as_u64().unwrap();
    assert!(compiled > 0, "the cold server compiled nothing");
    let fit = |extra: &[&str]| {
        let fitted = tmp.0.join("fitted.yaml");
        let mut args = vec!["fit", "--otel", otel.to_str().unwrap(), "--tp", "2", "-o", fitted.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = blis(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let provenance = CoefficientSet::load(&fitted).unwrap().provenance;
        (stderr(&out), provenance.train_errors["step_time_mape"], provenance.command.unwrap_or_default())
    };
    let (err, cold_mape, _) = fit(&[]);
    // Compiles within a server's first steps are in its warm-up already.
    let left_out: u64 =
        err.split_once(" compiling a MoE kernel left out").and_then(|(head, _)| head.rsplit(' ').next()?.parse().ok()).unwrap_or(0);
    assert!((1..=compiled).contains(&left_out), "{compiled} compiles, {left_out} left out: {err}");
    assert!(cold_mape < 1.0, "step-time MAPE {cold_mape}: {err}");
    let (err, warm_mape, command) = fit(&["--moe-kernel-compile", "0"]);
    assert!(!err.contains("compiling a MoE kernel"), "{err}");
    assert!(command.contains(" --moe-kernel-compile 0"), "the command regenerates the file: {command}");
    assert!(warm_mape > cold_mape, "keeping the compiling steps: MAPE {warm_mape} vs {cold_mape}");
}

/// A cluster's OTEL export has one resource per instance: `blis fit
/// --otel` fits every server or, with `--otel-instance`, one; a name the
/// file lacks is a one-line error listing those it has; a disaggregated
/// deployment's pools say their role, and fitting them together warns.
/// `blis convert otel` turns request traces into a trace v2 that replays
/// exactly: a simulation's journeys, converted and replayed with the same
/// coefficients, give every request's TTFT and E2E back (calibrate: 0 %
/// MAPE). vLLM's standard tracing (one `llm_request` span per request,
/// `gen_ai.latency.*` in seconds) converts to the same trace. A set fitted
/// on the converted trace with `blis fit --trace` predicts another
/// workload on that server as the hidden set does.
#[test]
fn otel_request_traces_convert_to_a_trace_that_replays_and_fits() {
    use serde_json::{Value, json};
    let tmp = TempDir::new("convert-otel");
    let (hidden, otel, _) = record_otel(&tmp, LLAMA_OTEL_RUN);
    let prefix = tmp.0.join("traces/journeys");
    let out = blis(&["convert", "otel", "--path", otel.to_str().unwrap(), "-o", prefix.to_str().unwrap(), "--hardware", "H100"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("300 requests (0 did not complete)"), "{}", stderr(&out));
    // A prompt count no request has (here -1 on every event) is not read as 0 tokens or 2^32 − 1: the
    // conversion stops, naming the attributes it looked for.
    let negative = tmp.0.join("negative.jsonl");
    let text = std::fs::read_to_string(&otel).unwrap();
    const KEY: &str = r#""key":"prefill_total_tokens","value":{"intValue":""#;
    assert!(text.contains(KEY));
    let (mut bad, mut rest) = (String::new(), text.as_str());
    while let Some(i) = rest.find(KEY) {
        bad += &rest[..i + KEY.len()];
        bad += "-1";
        rest = &rest[i + KEY.len()..];
        rest = &rest[rest.find('"').unwrap()..];
    }
    bad += rest;
    std::fs::write(&negative, bad).unwrap();
    let out = blis(&["convert", "otel", "--path", negative.to_str().unwrap(), "-o", tmp.0.join("traces/negative").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("has no prompt token count in [1, 2^30]"), "{}", stderr(&out));
    let sim = tmp.0.join("sim.json");
    let out = blis(&[
        "replay",
        "--trace",
        prefix.to_str().unwrap(),
        "--coefficients",
        hidden.to_str().unwrap(),
        "--output",
        sim.to_str().unwrap(),
        "-q",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = tmp.0.join("calibration.json");
    let out =
        blis(&["calibrate", "--trace", prefix.to_str().unwrap(), "--sim", sim.to_str().unwrap(), "--report", report.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for metric in ["ttft", "e2e"] {
        let mape = r["metrics"][metric]["mape"].as_f64().unwrap_or_else(|| panic!("{metric} in {r}"));
        assert!(mape < 0.01, "{metric} MAPE {mape} %");
    }

    // vLLM's standard tracing: one llm_request span per request, started at its arrival.
    let mut spans = Vec::new();
    for line in std::fs::read_to_string(&otel).unwrap().lines() {
        let doc: Value = serde_json::from_str(line).unwrap();
        for scope in doc["resourceSpans"][0]["scopeSpans"].as_array().unwrap().iter().filter(|s| s["scope"]["name"] == "vllm.api") {
            for span in scope["spans"].as_array().unwrap() {
                let at = |name: &str| -> (u64, u64, u64) {
                    let e = span["events"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap();
                    let attr = |k: &str| {
                        e["attributes"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|a| a["key"] == k)
                            .map(|a| a["value"]["intValue"].as_str().unwrap().parse::<u64>().unwrap())
                    };
                    (
                        e["timeUnixNano"].as_str().unwrap().parse().unwrap(),
                        attr("prefill_total_tokens").unwrap(),
                        attr("decode_max_tokens").unwrap(),
                    )
                };
                let ((arrived, prompt, output), (first, _, _), (departed, _, _)) = (at("ARRIVED"), at("FIRST_RESPONSE"), at("DEPARTED"));
                spans.push(json!({
                    "traceId": span["traceId"], "spanId": span["spanId"], "name": "llm_request",
                    "startTimeUnixNano": arrived.to_string(), "endTimeUnixNano": departed.to_string(),
                    "attributes": [
                        { "key": "gen_ai.usage.prompt_tokens", "value": { "intValue": prompt.to_string() } },
                        { "key": "gen_ai.usage.completion_tokens", "value": { "intValue": output.to_string() } },
                        { "key": "gen_ai.latency.time_to_first_token", "value": { "doubleValue": (first - arrived) as f64 / 1e9 } },
                        { "key": "gen_ai.latency.e2e", "value": { "doubleValue": (departed - arrived) as f64 / 1e9 } },
                    ],
                }));
            }
        }
    }
    let standard = tmp.0.join("standard.jsonl");
    let doc = json!({ "resourceSpans": [{ "resource": { "attributes": [{ "key": "gen_ai.request.model", "value": { "stringValue": "meta-llama/Llama-3.1-8B-Instruct" } }] },
        "scopeSpans": [{ "scope": { "name": "vllm.llm_engine" }, "spans": spans }] }] });
    std::fs::write(&standard, doc.to_string() + "\n").unwrap();
    let standard_prefix = tmp.0.join("traces/standard");
    let out =
        blis(&["convert", "otel", "--path", standard.to_str().unwrap(), "-o", standard_prefix.to_str().unwrap(), "--hardware", "H100"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = |p: &std::path::Path| std::fs::read_to_string(p.with_extension("csv")).unwrap();
    assert_eq!(csv(&standard_prefix), csv(&prefix), "the same requests, whichever tracing recorded them");

    let fitted = tmp.0.join("fitted.yaml");
    let out = blis(&["fit", "--trace", prefix.to_str().unwrap(), "--fitted-at", "2026-01-01", "-o", fitted.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (e2e, ttft) = mean_e2e_ttft(fitted.to_str().unwrap());
    let (e2e_true, ttft_true) = mean_e2e_ttft(hidden.to_str().unwrap());
    eprintln!(
        "fit on a converted OTEL trace, on another workload: E2E {:+.2} %, TTFT {:+.2} %",
        100.0 * (e2e / e2e_true - 1.0),
        100.0 * (ttft / ttft_true - 1.0)
    );
    assert!((e2e / e2e_true - 1.0).abs() < 0.03, "E2E {e2e} vs {e2e_true}");

    let missing = blis(&["convert", "otel", "--path", otel.to_str().unwrap(), "-o", prefix.to_str().unwrap(), "--otel-instance", "9"]);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("no request with an arrival time") && stderr(&missing).contains("on server 9"),
        "{}",
        stderr(&missing)
    );
}

/// Issue 26's fit from a user's own server, on a GPU the bundled set was not
/// fitted on: an A100 timed by a hidden set (in the H100's terms, carried
/// there) serves 300 requests; their journeys, converted to a trace v2,
/// are fitted with `blis fit --trace`, in the terms of the start set's GPU
/// (the H100), seeing the A100 through its kernel efficiencies. The set
/// predicts a workload unlike the one fitted on (4× the prompt, 1.2 instead
/// of 8 requests per second) on that A100 within 2 % E2E (−0.05 % here),
/// says it was measured
/// there, and warns only on a GPU it was not measured on. Fitted in the
/// A100's own terms from the same start (BLIS before 2026-11-29), the
/// trace gave a set 17 % off on such a workload (in-sample 1.7 % against
/// 0.2 %). The same server's OTEL export, fitted by teacher forcing
/// (`blis fit --otel`), lands in the same terms and predicts as well
/// (−0.5 % here); until 2026-11-29 it was fitted in the A100's own terms,
/// a set no other fit's coefficients could be compared with.
#[test]
fn a_trace_from_another_gpu_is_fitted_in_the_start_sets_terms() {
    let tmp = TempDir::new("fit-a100");
    let hidden = tmp.0.join("hidden.yaml");
    std::fs::write(&hidden, format!("{HIDDEN}provenance:\n  hardware: H100\n")).unwrap();
    let otel = tmp.0.join("a100.jsonl");
    let mut run =
        vec!["run", "--coefficients", hidden.to_str().unwrap(), "--hardware", "A100-80GB", "--otel-output", otel.to_str().unwrap()];
    // LLAMA_OTEL_RUN at 8 requests per second, which an A100 keeps up with.
    run.extend(LLAMA_OTEL_RUN.iter().map(|a| if *a == "20" { "8" } else { a }));
    let out = blis(&run);
    assert!(out.status.success(), "{}", stderr(&out));
    let prefix = tmp.0.join("a100");
    let out = blis(&["convert", "otel", "--path", otel.to_str().unwrap(), "-o", prefix.to_str().unwrap(), "--hardware", "A100-80GB"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let fitted = tmp.0.join("fitted.yaml");
    let out = blis(&["fit", "--trace", prefix.to_str().unwrap(), "--fitted-at", "2026-01-01", "-o", fitted.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fitting in H100's terms (the start set's GPU); runs on A100-80GB seen through their kernel efficiencies"),
        "{}",
        stderr(&out)
    );
    let set = CoefficientSet::load(&fitted).unwrap();
    assert_eq!((set.provenance.hardware.as_deref(), &set.provenance.measured_on[..]), (Some("H100"), &["A100-80GB".to_string()][..]));
    let on_a100 = |c: &std::path::Path| mean_e2e_ttft_on(c.to_str().unwrap(), "A100-80GB", "1.2");
    let ((e2e, ttft), (e2e_true, ttft_true)) = (on_a100(&fitted), on_a100(&hidden));
    eprintln!(
        "A100 trace fit, another workload on the A100: E2E {:+.2} %, TTFT {:+.2} %",
        100.0 * (e2e / e2e_true - 1.0),
        100.0 * (ttft / ttft_true - 1.0)
    );
    assert!((e2e / e2e_true - 1.0).abs() < 0.02, "E2E {e2e} vs {e2e_true}");
    let warned = |gpu: &str| {
        stderr(&blis(&[
            "run",
            "--model",
            "meta-llama/llama-3.1-8b-instruct",
            "--coefficients",
            fitted.to_str().unwrap(),
            "--hardware",
            gpu,
            "--num-requests",
            "5",
            "-q",
        ]))
    };
    assert!(!warned("A100-80GB").contains("extrapolates"), "{}", warned("A100-80GB"));
    assert!(
        warned("L40S").contains("were fitted on A100-80GB (in H100's terms) measurements; timing L40S with them extrapolates"),
        "{}",
        warned("L40S")
    );
    assert!(warned("H100").contains("they are in H100's terms, so nothing is carried"), "{}", warned("H100"));

    let taught = tmp.0.join("taught.yaml");
    let out = blis(&[
        "fit",
        "--otel",
        otel.to_str().unwrap(),
        "--hardware",
        "A100-80GB",
        "--fitted-at",
        "2026-01-01",
        "-o",
        taught.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fitting in H100's terms (the start set's GPU); runs on A100-80GB seen through their kernel efficiencies"),
        "{}",
        stderr(&out)
    );
    let set = CoefficientSet::load(&taught).unwrap();
    assert_eq!((set.provenance.hardware.as_deref(), &set.provenance.measured_on[..]), (Some("H100"), &["A100-80GB".to_string()][..]));
    let (e2e, ttft) = on_a100(&taught);
    eprintln!(
        "A100 OTEL fit, another workload on the A100: E2E {:+.2} %, TTFT {:+.2} %",
        100.0 * (e2e / e2e_true - 1.0),
        100.0 * (ttft / ttft_true - 1.0)
    );
    assert!((e2e / e2e_true - 1.0).abs() < 0.02, "E2E {e2e} vs {e2e_true}");
}

/// BLIS's OTLP/JSON lines rewritten as vLLM's journey and step tracing
/// writes them (see the test above for what differs).
fn vllm_shaped(text: &str) -> String {
    use serde_json::{Value, json};
    fn rename(attributes: &mut Value, from: &str, to: &str) {
        for a in attributes.as_array_mut().into_iter().flatten() {
            if a["key"] == from {
                a["key"] = to.into();
            }
        }
    }
    fn seconds(attributes: &mut Value, to: &str) {
        for a in attributes.as_array_mut().into_iter().flatten() {
            if a["key"] == "ts.monotonic" {
                let ns: u64 = a["value"]["intValue"].as_str().unwrap().parse().unwrap();
                *a = json!({ "key": to, "value": { "doubleValue": ns as f64 / 1e9 } });
            }
        }
    }
    let mut out = String::new();
    for line in text.lines() {
        let mut doc: Value = serde_json::from_str(line).unwrap();
        for rs in doc["resourceSpans"].as_array_mut().unwrap() {
            for scope in rs["scopeSpans"].as_array_mut().unwrap() {
                let name = scope["scope"]["name"].as_str().unwrap().to_string();
                for span in scope["spans"].as_array_mut().unwrap() {
                    let events = span["events"].as_array_mut().unwrap();
                    if name == "vllm.scheduler.step" {
                        for e in events.iter_mut().filter(|e| e["name"] == "step.BATCH_SUMMARY") {
                            e["attributes"]
                                .as_array_mut()
                                .unwrap()
                                .push(json!({ "key": "kv.blocks_total_gpu", "value": { "intValue": "100000" } }));
                        }
                        let idle = events.iter().find(|e| e["name"] == "step.REQUEST_SNAPSHOT").cloned();
                        if let Some(mut idle) = idle {
                            for a in idle["attributes"].as_array_mut().unwrap() {
                                if a["key"] == "request.scheduled_tokens_this_step" {
                                    a["value"] = json!({ "intValue": "0" });
                                }
                            }
                            events.push(idle);
                        }
                        continue;
                    }
                    let (prefix, stamp) = if name == "vllm.api" { ("api.", "event.ts.monotonic") } else { ("journey.", "ts.monotonic") };
                    let mut generated = 0u64;
                    for e in events.iter_mut() {
                        let bare = e["name"].as_str().unwrap().to_string();
                        e["name"] = format!("{prefix}{}", if bare == "FIRST_RESPONSE" { "FIRST_RESPONSE_FROM_CORE" } else { &bare }).into();
                        seconds(&mut e["attributes"], stamp);
                        rename(&mut e["attributes"], "prefill_total_tokens", "prefill.total_tokens");
                        for a in e["attributes"].as_array_mut().unwrap() {
                            if a["key"] == "decode_max_tokens" {
                                generated = a["value"]["intValue"].as_str().unwrap().parse().unwrap();
                                *a = json!({ "key": "decode.max_tokens", "value": { "intValue": "4096" } });
                            }
                        }
                        if bare == "FINISHED" {
                            e["attributes"]
                                .as_array_mut()
                                .unwrap()
                                .push(json!({ "key": "decode.done_tokens", "value": { "intValue": generated.to_string() } }));
                        }
                    }
                    let id = span["attributes"][0]["value"]["intValue"].as_str().unwrap().to_string();
                    let request = if name == "vllm.api" { format!("cmpl-{id}") } else { id };
                    span["attributes"] = json!([{ "key": "gen_ai.request.id", "value": { "stringValue": request } }]);
                }
            }
        }
        out += &(doc.to_string() + "\n");
    }
    out
}

#[test]
fn a_clusters_otel_trace_is_fitted_per_server() {
    let tmp = TempDir::new("fit-otel-cluster");
    let otel = tmp.0.join("pd.jsonl");
    let out = blis(&[
        "run",
        "--model",
        "meta-llama/llama-3.1-8b-instruct",
        "--prefill-instances",
        "1",
        "--decode-instances",
        "2",
        "--decode-hardware",
        "A100-80GB",
        "--num-requests",
        "200",
        "--rate",
        "10",
        "-q",
        "--otel-output",
        otel.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let fitted = tmp.0.join("fitted.yaml");
    let fit = |extra: &[&str]| blis(&[&["fit", "--otel", otel.to_str().unwrap(), "-o", fitted.to_str().unwrap()][..], extra].concat());
    let all = fit(&[]);
    assert!(all.status.success(), "{}", stderr(&all));
    assert!(stderr(&all).contains("steps of 3 servers"), "{}", stderr(&all));
    assert!(stderr(&all).contains("mixes disaggregated roles (0: kv_producer, 1: kv_consumer, 2: kv_consumer)"), "{}", stderr(&all));
    let one = fit(&["--otel-instance", "2", "--hardware", "A100-80GB"]);
    assert!(one.status.success(), "{}", stderr(&one));
    assert!(stderr(&one).contains("steps of 1 server ") && !stderr(&one).contains("warning"), "{}", stderr(&one));
    let set = CoefficientSet::load(&fitted).unwrap();
    assert!(
        set.provenance.command.as_deref().is_some_and(|c| c.contains(" --hardware A100-80GB") && c.contains(" --otel-instance 2")),
        "{:?}",
        set.provenance.command
    );
    let missing = fit(&["--otel-instance", "7"]);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("--otel-instance 7: ") && stderr(&missing).contains("it has 0, 1, 2"), "{}", stderr(&missing));
    assert_eq!(stderr(&missing).trim().lines().count(), 1, "{}", stderr(&missing));
}

#[test]
fn malformed_otel_traces_are_one_line_errors() {
    let tmp = TempDir::new("fit-otel-bad");
    let cases = [
        ("garbage.jsonl", "{not json\n", "garbage.jsonl:1: not OTLP/JSON"),
        ("other.jsonl", "{\"spans\": []}\n", "no `resourceSpans` array"),
        ("empty.jsonl", "{\"resourceSpans\": []}\n", "no step.BATCH_SUMMARY event"),
        (
            "negative.jsonl",
            "{\"resourceSpans\":[{\"scopeSpans\":[{\"scope\":{\"name\":\"vllm.scheduler.step\"},\"spans\":[{\"events\":[{\"name\":\"step.BATCH_SUMMARY\",\"attributes\":[{\"key\":\"step.id\",\"value\":{\"intValue\":\"3\"}},{\"key\":\"step.duration_us\",\"value\":{\"doubleValue\":-5}}]}]}]}]}]}\n",
            "step 3: `step.duration_us` missing or not in (0, 1e8 s]",
        ),
    ];
    for (name, text, message) in cases {
        let path = tmp.0.join(name);
        std::fs::write(&path, text).unwrap();
        let out = blis(&["fit", "--otel", path.to_str().unwrap(), "--model", "meta-llama/llama-3.1-8b-instruct"]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(message) && err.contains(name), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // Teacher forcing simulates nothing: the simulation-loop flags are refused, not ignored.
    let trace = tmp.0.join("garbage.jsonl");
    for flag in [["--seed", "1"], ["--rounds", "2"], ["--refine-evals", "10"]] {
        let out = blis(&["fit", "--otel", trace.to_str().unwrap(), flag[0], flag[1]]);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(&format!("'--otel <FILE>' cannot be used with '{}", flag[0])), "{}", stderr(&out));
    }
    let missing = blis(&["fit", "--otel", tmp.0.join("missing.jsonl").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("missing.jsonl"), "{}", stderr(&missing));
    // The server flags of --otel are refused for directories and traces,
    // whose own records name the server (clap alone let them through).
    let dir = write_experiment(&tmp.0, "exp", false);
    for flag in [["--tp", "2"], ["--model", "x/y"], ["--otel-instance", "0"]] {
        let out = blis(&["fit", dir.to_str().unwrap(), "--rounds", "1", "--refine-evals", "0", flag[0], flag[1]]);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(&format!("{} is for --otel", flag[0])), "{}", stderr(&out));
    }
    let out = blis(&["fit", dir.to_str().unwrap(), "--hardware", "nope"]);
    assert!(stderr(&out).contains("--hardware nope: unknown GPU"), "{}", stderr(&out));
    // A budget no fit finishes is refused up front (fuzzing: 18446744073709551615 evaluations ran on).
    let out = blis(&["fit", dir.to_str().unwrap(), "--refine-evals", "18446744073709551615"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("each must be at most 100000"), "{}", stderr(&out));
}

/// `--prior NAME=MEAN:SCALE` replaces one coefficient's prior: a tight one
/// anchors it, and the command records it; names and numbers are checked.
#[test]
fn a_prior_anchors_its_coefficient_and_bad_priors_are_refused() {
    let tmp = TempDir::new("fit-prior");
    write_experiment(&tmp.0, "exp-a", true);
    let out_path = tmp.0.join("anchored.yaml");
    let dir = tmp.0.to_str().unwrap();
    let base = ["fit", dir, "--latency-model", "unified-5", "--rounds", "2", "--refine-evals", "0", "--fitted-at", "2026-01-01"];
    let out = blis(&[&base[..], &["--prior", "per_layer_us=30:0.001", "-o", out_path.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let set = CoefficientSet::load(&out_path).unwrap();
    assert!((set.beta[3] - 30.0).abs() < 0.5, "per_layer_us anchored at 30: {:?}", set.beta);
    assert!(
        set.provenance.command.as_deref().is_some_and(|c| c.ends_with("--prior per_layer_us=30:0.001")),
        "{:?}",
        set.provenance.command
    );
    for (prior, message) in [
        ("per_layer=30:1", "--prior per_layer: unified-5 has no coefficient of that name; it has queueing_us"),
        ("per_layer_us=30:0", "expected NAME=MEAN:SCALE"),
        ("per_layer_us=NaN:1", "expected NAME=MEAN:SCALE"),
        ("per_layer_us", "expected NAME=MEAN:SCALE"),
        ("per_layer_us=1e308:1e-308", "MEAN in [0, 3.6e9] and SCALE in [1e-6, 3.6e9]"),
    ] {
        let out = blis(&[&base[..], &["--prior", prior]].concat());
        assert_eq!(out.status.code(), Some(2), "{prior}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{prior}: {}", stderr(&out));
    }
    let twice = blis(&[&base[..], &["--prior", "per_layer_us=1:1", "--prior", "per_layer_us=2:1"]].concat());
    crate::assert_refused(&twice, "--prior twice", "--prior per_layer_us: given twice (1:1 and 2:1)");
    let blackbox = blis(&["fit", dir, "--latency-model", "blackbox", "--prior", "per_step_us=1:1"]);
    assert_eq!(blackbox.status.code(), Some(2), "{}", stderr(&blackbox));
    assert!(stderr(&blackbox).contains("blackbox is fitted without priors"), "{}", stderr(&blackbox));
}
