//! `blis run` as a cluster: the issue's commands, determinism, the policy
//! YAML, traces, and bad cluster input.

use serde_json::Value;

use crate::{blis, is_empty_dir, scratch, stderr, stdout};

const MODEL: &[&str] =
    &["run", "--format", "json", "--model", "qwen/qwen2.5-7b-instruct", "--num-requests", "400", "--rate", "60", "--quiet"];

fn run_json(extra: &[&str]) -> (String, Value) {
    crate::json_of(MODEL, extra)
}

fn examples() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/policies.yaml").to_string()
}

#[test]
fn the_issue_command_runs_eight_instances_with_every_policy_flag() {
    let (_, j) = run_json(&[
        "--num-instances",
        "8",
        "--routing-policy",
        "weighted",
        "--routing-scorers",
        "prefix-affinity:4,queue-depth:3",
        "--admission-policy",
        "predictive-slo",
        "--scheduler",
        "priority-fcfs",
        "--priority-policy",
        "slo-class",
        "--prefix-tokens",
        "256",
        "--prefix-groups",
        "8",
    ]);
    let c = &j["cluster"];
    assert_eq!(c["num_instances"], 8);
    assert_eq!(c["policies"]["routing"]["params"]["scorers"]["prefix-affinity"], 4.0);
    assert_eq!(c["policies"]["admission"]["type"], "predictive-slo");
    assert_eq!(c["instances"].as_array().unwrap().len(), 8);
    assert_eq!(j["config"]["routing-scorers"]["source"], "flag");
    assert_eq!(j["config"]["admission-policy"]["source"], "flag");
    let r = &c["requests"];
    assert_eq!(r["arrived"], 400);
    assert_eq!(r["arrived"].as_u64(), Some(r["rejected"].as_u64().unwrap() + r["injected"].as_u64().unwrap()));
    assert_eq!(j["requests"]["completed"], r["completed"]);
}

#[test]
fn eight_instances_give_byte_identical_json_for_a_seed() {
    let args = [
        "--num-instances",
        "8",
        "--routing-policy",
        "least-loaded",
        "--slo-class-mix",
        "a:1,b:2",
        "--tenant-mix",
        "x:1,y:1",
        "--counterfactual-k",
        "3",
        "--seed",
        "5",
    ];
    let (a, _) = run_json(&args);
    let (b, _) = run_json(&args);
    assert_eq!(a, b);
    let mut other = args.to_vec();
    let last = other.len() - 1;
    other[last] = "6";
    assert_ne!(a, run_json(&other).0);
}

#[test]
fn the_example_policy_file_runs_and_flags_override_it() {
    let (_, j) =
        run_json(&["--num-instances", "4", "--slo-class-mix", "realtime:0.2,interactive:0.5,batch:0.3", "--policy-config", &examples()]);
    let c = &j["cluster"];
    assert_eq!(c["policies"]["admission"]["type"], "predictive-slo");
    assert_eq!(c["control_plane"]["snapshot_refresh"]["kv_utilization"], "periodic:100ms");
    assert_eq!(c["slo_classes"]["realtime"]["targets"]["ttft_ms"], 200.0);
    assert_eq!(j["config"]["routing-policy"]["source"], "file");
    let (_, j) = run_json(&[
        "--num-instances",
        "4",
        "--slo-class-mix",
        "realtime:1,interactive:1,batch:1",
        "--policy-config",
        &examples(),
        "--routing-policy",
        "round-robin",
        "--scheduler",
        "priority-fcfs",
        "--preemption",
        "tail",
    ]);
    assert_eq!(j["cluster"]["policies"]["routing"]["type"], "round-robin");
    assert_eq!(j["cluster"]["policies"]["scheduler"]["params"]["preemption"], "tail");
    assert_eq!(j["config"]["routing-policy"]["source"], "flag");
}

#[test]
fn per_class_and_per_tenant_results_use_their_names() {
    let (_, j) = run_json(&[
        "--num-instances",
        "2",
        "--slo-class-mix",
        "gold:1,bronze:3",
        "--tenant-mix",
        "acme:1,initech:1",
        "--slo-targets",
        "gold.ttft_ms=100,bronze.e2e_ms=60000",
    ]);
    let c = &j["cluster"];
    let classes: Vec<&String> = c["slo_classes"].as_object().unwrap().keys().collect();
    assert_eq!(classes, ["bronze", "gold"]);
    let tenants: Vec<&String> = c["tenants"].as_object().unwrap().keys().collect();
    assert_eq!(tenants, ["acme", "initech"]);
    let arrived: u64 = c["slo_classes"].as_object().unwrap().values().map(|g| g["arrived"].as_u64().unwrap()).sum();
    assert_eq!(arrived, 400);
    for g in c["slo_classes"].as_object().unwrap().values() {
        for m in ["ttft", "itl", "e2e"] {
            assert!(g["latency_ms"][m]["p99"].as_f64().is_some());
        }
    }
    assert!(c["fairness"]["jain_index_over_tenants"].as_f64().unwrap() > 0.99);
    assert_eq!(c["slo_classes"]["gold"]["targets"]["ttft_ms"], 100.0);
}

#[test]
fn reject_all_rejects_everything_and_fitness_is_reported() {
    let (_, j) = run_json(&["--admission-policy", "reject-all", "--fitness-weights", "throughput:0.5,ttft_p99:0.3,goodput:0.2"]);
    let c = &j["cluster"];
    assert_eq!(c["requests"]["rejected"], 400);
    assert_eq!(c["anomalies"]["rejections"], 400);
    assert_eq!(c["requests"]["rejected_by_reason"]["reject_all"], 400);
    assert_eq!(c["fitness"]["score"], 0.0);
    assert_eq!(j["requests"]["completed"], 0);
}

/// Audit finding: with every request rejected, the run warned that "no
/// request arrived … is its rate too low?". It now says how many arrived
/// and that admission rejected them.
#[test]
fn a_run_whose_requests_are_all_rejected_says_so_not_that_none_arrived() {
    let out = blis(&["run", "--model", "qwen/qwen2.5-7b-instruct", "--num-requests", "400", "--admission-policy", "reject-all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning: none of the 400 requests that arrived reached an instance (400 rejected by admission policy `reject-all`"),
        "{err}"
    );
    assert!(!err.contains("no request arrived"), "{err}");
}

#[test]
fn decision_traces_have_a_line_per_decision_with_every_candidate() {
    let dir = scratch("trace");
    let path = dir.join("trace.jsonl");
    let (_, j) = run_json(&[
        "--num-instances",
        "4",
        "--trace-level",
        "decisions",
        "--counterfactual-k",
        "3",
        "--trace-output",
        path.to_str().unwrap(),
        "--routing-policy",
        "weighted",
    ]);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 400 + 400 + 1);
    let routing: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "routing").collect();
    assert_eq!(routing.len(), 400);
    for r in &routing {
        let candidates = r["candidates"].as_array().unwrap();
        assert_eq!(candidates.len(), 4);
        assert!(candidates.iter().all(|c| c["components"]["prefix-affinity"].is_number() && c["estimated_ttft_ms"].is_number()));
        assert_eq!(r["counterfactual"]["top_k"].as_array().unwrap().len(), 3);
        assert!(r["counterfactual"]["regret_ms"].as_f64().unwrap() >= 0.0);
    }
    assert!(lines.iter().filter(|l| l["kind"] == "admission").all(|l| l["admitted"] == true));
    let summary = lines.last().unwrap();
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["counterfactual"], j["cluster"]["counterfactual"]);
    assert_eq!(j["cluster"]["counterfactual"]["decisions"], 400);
}

#[test]
fn a_shaping_admission_holds_requests_and_says_so_in_the_trace_and_the_table() {
    // 60 req/s into 20 tokens/s, held at most 1.5 s: some held, some rejected.
    let dir = scratch("shaping");
    let (policy, trace) = (dir.join("p.yaml"), dir.join("t.jsonl"));
    std::fs::write(
        &policy,
        "admission: {type: token-bucket, params: {capacity: 10, refill_per_s: 20, on_limit: delay, max_delay_ms: 1500}}\n",
    )
    .unwrap();
    let mut args = MODEL.to_vec();
    args.retain(|&a| a != "--quiet");
    args.extend_from_slice(&["--policy-config", policy.to_str().unwrap(), "--trace-output", trace.to_str().unwrap()]);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let r = &j["cluster"]["requests"];
    let (delayed, rejected) = (r["delayed"].as_u64().unwrap(), r["rejected"].as_u64().unwrap());
    assert!(delayed > 0 && rejected > 0, "{r}");
    assert!(r["admission_delay_ms"]["max"].as_f64().unwrap() <= 1500.0, "{r}");
    let lines: Vec<Value> = std::fs::read_to_string(&trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let held: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "admission" && l["delay_us"].as_u64().unwrap() > 0).collect();
    assert_eq!(held.len() as u64, delayed);
    assert!(held.iter().all(|l| l["admitted"] == true));
    // A held request is routed exactly its delay after its admission decision.
    for h in &held {
        let routed = lines.iter().find(|l| l["kind"] == "routing" && l["request"] == h["request"]).unwrap();
        assert_eq!(routed["t_us"].as_u64().unwrap(), h["t_us"].as_u64().unwrap() + h["delay_us"].as_u64().unwrap());
    }
    assert!(stderr(&out).contains(&format!("Delayed by admission; wait (ms) mean / p99: {delayed};")), "{}", stderr(&out));
}

/// The bad-input contract for cluster flags and files: exit code 2, one line, no output files.
fn rejected(name: &str, args: &[&str]) -> String {
    let dir = scratch(name);
    let out_path = dir.join("out.json");
    let trace_path = dir.join("trace.jsonl");
    let mut full = vec!["run", "--model", "qwen/qwen2.5-7b-instruct", "--num-requests", "10"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--output", out_path.to_str().unwrap()]);
    if !args.contains(&"--trace-output") && !args.contains(&"decisions") {
        full.extend_from_slice(&["--trace-output", trace_path.to_str().unwrap()]);
    }
    let out = blis(&full);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{name}: expected exit code 2, stderr: {err}");
    assert!(!err.contains("panicked"), "{name}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
    assert!(is_empty_dir(&dir), "{name}: left a file behind");
    err
}

#[test]
fn bad_cluster_flags_name_the_flag_and_the_allowed_values() {
    for (name, args, needles) in [
        ("routing-unknown", vec!["--routing-policy", "fastest"], vec!["--routing-policy fastest", "round-robin, least-loaded, weighted"]),
        ("admission-unknown", vec!["--admission-policy", "maybe"], vec!["--admission-policy maybe", "predictive-slo"]),
        ("scheduler-unknown", vec!["--scheduler", "lifo"], vec!["--scheduler lifo", "priority-fcfs"]),
        ("preemption-unknown", vec!["--preemption", "random"], vec!["--preemption random", "lowest-priority"]),
        (
            "scorer-unknown",
            vec!["--routing-scorers", "prefix-affinity:4,queue-dept:3"],
            vec!["--routing-scorers", "queue-dept", "queue-depth"],
        ),
        ("scorer-negative", vec!["--routing-scorers", "queue-depth:-3"], vec!["--routing-scorers", "queue-depth"]),
        ("scorer-nan", vec!["--routing-scorers", "queue-depth:NaN"], vec!["--routing-scorers", "queue-depth"]),
        ("scorer-absurd", vec!["--routing-scorers", "queue-depth:1e300"], vec!["--routing-scorers", "[0, 1e9]"]),
        ("instances-absurd", vec!["--num-instances", "100000"], vec!["--num-instances 100000", "1024"]),
        (
            "scorers-not-weighted",
            vec!["--routing-policy", "least-loaded", "--routing-scorers", "queue-depth:1"],
            vec!["--routing-policy weighted"],
        ),
        ("instances-zero", vec!["--num-instances", "0"], vec!["--num-instances 0"]),
        ("latency-absurd", vec!["--routing-latency", "99999999999999"], vec!["--routing-latency"]),
        ("trace-level", vec!["--trace-level", "everything"], vec!["--trace-level everything", "none, decisions"]),
        ("fitness", vec!["--fitness-weights", "speed:1"], vec!["--fitness-weights", "unknown metric `speed`", "ttft_p99"]),
        ("slo-targets-metric", vec!["--slo-targets", "default.ttft=100"], vec!["--slo-targets", "ttft_ms, itl_ms, e2e_ms"]),
        ("slo-targets-class", vec!["--slo-targets", "gold.ttft_ms=100"], vec!["--slo-targets", "unknown SLO class `gold`", "default"]),
        ("slo-targets-nan", vec!["--slo-targets", "default.ttft_ms=NaN"], vec!["--slo-targets", "ttft_ms"]),
        ("slo-targets-twice", vec!["--slo-targets", "default.ttft_ms=100,default.ttft_ms=200"], vec!["`default.ttft_ms` is given twice"]),
        ("snapshot", vec!["--snapshot-refresh", "kv-utilization=sometimes"], vec!["--snapshot-refresh", "periodic:<N>ms"]),
        ("class-mix", vec!["--slo-class-mix", "gold"], vec!["--slo-class-mix", "NAME:WEIGHT"]),
        (
            "unknown-class-param",
            vec!["--slo-class-mix", "gold:1", "--priority-policy", "slo-class", "--slo-targets", "silver.ttft_ms=1"],
            vec!["unknown SLO class `silver`", "gold"],
        ),
    ] {
        let e = rejected(name, &args);
        for n in needles {
            assert!(e.contains(n), "{name}: `{n}` not in: {e}");
        }
    }
}

#[test]
fn trace_level_and_output_must_agree() {
    let e = rejected("decisions-without-output", &["--trace-level", "decisions"]);
    assert!(e.contains("--trace-output"), "{e}");
    let dir = scratch("none-with-output");
    let e = rejected("none-with-output", &["--trace-level", "none", "--trace-output", dir.join("t.jsonl").to_str().unwrap()]);
    assert!(e.contains("--trace-level decisions"), "{e}");
}

#[test]
fn bad_policy_files_name_the_file_and_the_key_path() {
    let dir = scratch("policy-files");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    for (name, text, needles) in [
        ("unknown-section.yaml", "routng: round-robin\n", vec!["unknown section `routng`", "routing"]),
        ("unknown-param.yaml", "admission: {type: token-bucket, params: {capacty: 3}}\n", vec!["admission.params.capacty", "capacity"]),
        ("nan.yaml", "admission: {type: token-bucket, params: {refill_per_s: .nan}}\n", vec!["admission.params.refill_per_s", "finite"]),
        (
            "negative.yaml",
            "admission: {type: token-bucket, params: {refill_per_s: -1}}\n",
            vec!["admission.params.refill_per_s", "positive"],
        ),
        (
            "endless.yaml",
            "admission: {type: rate-limit, params: {window_ms: 1e300}}\n",
            vec!["admission.params.window_ms", "[0.001, 1e11] ms"],
        ),
        ("absurd.yaml", "admission: {type: predictive-slo, params: {headroom: 1000}}\n", vec!["admission.params.headroom", "(0, 10]"]),
        (
            "bad-type.yaml",
            "routing: {type: weighted, params: {scorers: {queue-depth: fast}}}\n",
            vec!["routing.params.scorers.queue-depth", "invalid type"],
        ),
        ("unknown-class.yaml", "slo_targets: {gold: {ttft_ms: 10}}\n", vec!["slo_targets.gold", "unknown SLO class"]),
        ("unknown-template.yaml", "priority: urgent-first\n", vec!["priority.type", "slo-class"]),
        ("not-yaml.yaml", "admission: [\n", vec!["not valid YAML"]),
        ("list.yaml", "- admission\n", vec!["expected a mapping"]),
    ] {
        let path = write(name, text);
        let e = rejected(name, &["--policy-config", &path]);
        assert!(e.contains(name), "{name}: file not named: {e}");
        for n in needles {
            assert!(e.contains(n), "{name}: `{n}` not in: {e}");
        }
    }
    let e = rejected("missing-policy-file", &["--policy-config", dir.join("nope.yaml").to_str().unwrap()]);
    assert!(e.contains("nope.yaml"), "{e}");
}

/// A disaggregated deployment from flags and the same from the policy
/// file's `pools:` section simulate alike, the per-request CSV's TTFT
/// phases add up to each request's TTFT, and the decision trace has one
/// prefill routing decision per disaggregated request, right after its
/// routing decision, among the prefill pool only.
#[test]
fn pools_from_flags_and_from_the_policy_file_agree() {
    let dir = scratch("pd-pools");
    let yaml = dir.join("pools.yaml");
    std::fs::write(&yaml, "pools:\n  prefill: {instances: 1}\n  decode: {instances: 2}\n  decider: prefix-threshold\n  prefix_threshold_tokens: 64\n  transfer_latency: 2ms\n").unwrap();
    let csv = dir.join("req.csv");
    let trace = dir.join("trace.jsonl");
    let (_, flags) = run_json(&[
        "--prefill-instances",
        "1",
        "--decode-instances",
        "2",
        "--pd-decider",
        "prefix-threshold",
        "--pd-prefix-threshold",
        "64",
        "--pd-transfer-latency",
        "2ms",
        "--requests-csv",
        csv.to_str().unwrap(),
        "--trace-output",
        trace.to_str().unwrap(),
    ]);
    let (_, file) = run_json(&["--policy-config", yaml.to_str().unwrap()]);
    for key in ["latency_ms", "requests"] {
        assert_eq!(flags[key], file[key], "{key}");
    }
    assert_eq!(flags["cluster"]["pd"], file["cluster"]["pd"]);
    assert_eq!(flags["cluster"]["pd"]["ratio"], "1:2");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut rows = csv_rows(&text);
    let header = rows.next().unwrap();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
    let phases: Vec<usize> =
        ["gateway_ms", "prefill_queue_ms", "prefill_ms", "handoff_ms", "transfer_ms", "decode_queue_ms", "first_decode_step_ms"]
            .map(col)
            .to_vec();
    let mut disaggregated = 0;
    for row in rows {
        if row[phases[0]].is_empty() {
            continue;
        }
        disaggregated += 1;
        let sum: f64 = phases.iter().map(|&i| row[i].parse::<f64>().unwrap()).sum();
        let ttft: f64 = row[col("ttft_ms")].parse().unwrap();
        assert!((sum - ttft).abs() < 0.0015, "phases {sum} != TTFT {ttft}: {row:?}");
    }
    assert_eq!(disaggregated, flags["cluster"]["pd"]["requests"]["disaggregated"].as_u64().unwrap());

    let lines: Vec<Value> = std::fs::read_to_string(&trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let instances = |l: &Value| l["candidates"].as_array().unwrap().iter().map(|c| c["instance"].as_u64().unwrap()).collect::<Vec<_>>();
    let mut prefill_routings = 0;
    for (i, l) in lines.iter().enumerate().filter(|(_, l)| l["kind"] == "prefill_routing") {
        prefill_routings += 1;
        let before = &lines[i - 1];
        assert_eq!((&before["kind"], &before["request"]), (&Value::from("routing"), &l["request"]), "{l}");
        assert_eq!(instances(before), [1, 2], "decode pool: {before}");
        assert_eq!((instances(l), l["chosen"].as_u64()), (vec![0], Some(0)), "prefill pool: {l}");
    }
    assert_eq!(prefill_routings, disaggregated);
    assert!(disaggregated > 0);
    assert_eq!(lines.last().unwrap()["prefill_routing_decisions"], disaggregated, "summary");
}

/// The summary names each pool's own GPU, TP degree and cache, and the
/// GPUs of both pools together.
#[test]
fn the_summary_shows_each_pools_hardware() {
    let out = blis(&[
        "run",
        "--model",
        "qwen/qwen2.5-7b-instruct",
        "--num-requests",
        "100",
        "--rate",
        "20",
        "--prefill-instances",
        "1",
        "--prefill-tp",
        "2",
        "--decode-instances",
        "2",
        "--decode-hardware",
        "A100-80GB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let line = |key: &str| table.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in {table}")).to_string();
    let (prefill, decode) = (line("Hardware (prefill pool):"), line("Hardware (decode pool):"));
    assert!(prefill.contains("1 × H100 (TP 2)"), "{prefill}");
    assert!(decode.contains("2 × A100-80GB (TP 1)") && decode.ends_with("4 GPUs in all"), "{decode}");
    assert!(!table.contains("KV cache per GPU"), "the deployment's own cache is no pool's: {table}");
}

fn csv_rows(text: &str) -> impl Iterator<Item = Vec<String>> + '_ {
    text.lines().map(|l| l.split(',').map(str::to_string).collect())
}

/// vLLM's `--data-parallel-size N` is N instances behind vLLM's own load
/// balancer (`vllm-dp` on counts read every 100 ms): the same run as those
/// spelled out, and the report says where they came from. A routing or
/// refresh the user chose stays theirs; a contradicting instance count, or
/// an autoscaled or disaggregated deployment, is refused.
#[test]
fn data_parallel_size_is_instances_behind_vllms_load_balancer() {
    let (_, dp) = run_json(&["--data-parallel-size", "3"]);
    let spelled = [
        "--num-instances",
        "3",
        "--routing-policy",
        "vllm-dp",
        "--snapshot-refresh",
        "queue-depth=periodic:100ms,batch-size=periodic:100ms",
    ];
    let (_, explicit) = run_json(&spelled);
    assert_eq!((&dp["latency_ms"], &dp["cluster"]["num_instances"]), (&explicit["latency_ms"], &explicit["cluster"]["num_instances"]));
    assert_eq!(dp["cluster"]["num_instances"], 3);
    let config = &dp["config"];
    assert_eq!(
        (&config["routing-policy"]["value"], &config["routing-policy"]["source"]),
        (&Value::from("vllm-dp"), &Value::from("derived")),
        "{config}"
    );
    assert_eq!(config["snapshot-refresh"]["value"], "queue-depth=periodic:100ms,batch-size=periodic:100ms");
    let (_, chosen) = run_json(&["--data-parallel-size", "3", "--routing-policy", "round-robin"]);
    let (_, rr) = run_json(&["--num-instances", "3", "--routing-policy", "round-robin"]);
    assert_eq!(chosen["latency_ms"], rr["latency_ms"]);
    assert!(dp["latency_ms"] != rr["latency_ms"]);
    for (extra, needle) in [
        (&["--num-instances", "2"][..], "both count the engine replicas"),
        (&["--prefill-instances", "1", "--decode-instances", "2"][..], "drop --data-parallel-size"),
        (&["--autoscale-policy", "queue-depth"][..], "drop --data-parallel-size"),
    ] {
        let args = [MODEL, &["--data-parallel-size", "3"], extra].concat();
        crate::assert_refused(&blis(&args), &format!("{extra:?}"), needle);
    }
}
