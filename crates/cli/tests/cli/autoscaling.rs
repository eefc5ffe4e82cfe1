//! `blis run` with autoscaling: off means unchanged, on is deterministic and
//! reports cost, the worked example's files run, the timeline plot and the
//! trace lines are written.

use serde_json::Value;

use crate::{blis, scratch, stderr, stdout};

const RUN: &[&str] =
    &["run", "--format", "json", "--model", "qwen/qwen2.5-7b-instruct", "--num-requests", "3000", "--rate", "40", "--quiet"];

fn run(extra: &[&str]) -> (String, Value) {
    crate::json_of(RUN, extra)
}

#[test]
fn autoscaling_off_changes_nothing() {
    let (_, plain) = run(&["--num-instances", "2"]);
    let (_, mut none) = run(&["--num-instances", "2", "--autoscale-policy", "none"]);
    assert!(plain["cluster"].get("autoscaling").is_none() && plain["cluster"]["anomalies"].get("scale_oscillations").is_none());
    assert_eq!(none["config"]["autoscale-policy"]["value"], "none");
    none["config"].as_object_mut().unwrap().remove("autoscale-policy");
    assert_eq!(plain, none);
}

#[test]
fn autoscaled_runs_are_byte_identical_for_a_seed_and_report_capacity_and_cost() {
    let args = [
        "--autoscale-policy",
        "queue-depth",
        "--min-instances",
        "1",
        "--max-instances",
        "4",
        "--autoscale-interval",
        "5s",
        "--provisioning-delay",
        "uniform:1s,4s",
        "--gpu-hour-cost",
        "2.5",
        "--drain-policy",
        "redirect",
        // 40 req/s of 1 024-token prompts is about twice what one H100 prefills (its queue reaches hundreds).
        "--prompt-tokens",
        "1024",
    ];
    let (a, j) = run(&args);
    let (b, _) = run(&args);
    assert_eq!(a, b, "same seed, same bytes");
    let s = &j["cluster"]["autoscaling"];
    for field in [
        "scale_ups",
        "scale_downs",
        "replica_seconds",
        "gpu_hours",
        "cost",
        "oscillations",
        "timeline",
        "pools",
        "cost_per_million_output_tokens",
    ] {
        assert!(s.get(field).is_some(), "cluster.autoscaling.{field} missing: {s}");
    }
    assert!(s["scale_ups"].as_u64().unwrap() >= 1, "40 req/s of 1 024-token prompts needs more than one replica: {s}");
    let gpu_hours = s["gpu_hours"].as_f64().unwrap();
    assert!((s["cost"].as_f64().unwrap() - 2.5 * gpu_hours).abs() < 1e-9);
    assert_eq!(j["requests"]["completed"], 3000);
    assert_eq!(j["config"]["autoscale-policy"]["source"], "flag");
}

#[test]
fn the_worked_examples_policy_files_run() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/autoscaling");
    for (policy, initial) in [("fixed", "4"), ("threshold", "1"), ("target-tracking", "1")] {
        let path = format!("{dir}/{policy}.yaml");
        let out = blis(&[
            "run",
            "--format",
            "json",
            "--quiet",
            "--model",
            "meta-llama/llama-3.1-70b-instruct",
            "--tp",
            "4",
            "--num-requests",
            "300",
            "--rate",
            "5",
            "--num-instances",
            initial,
            "--policy-config",
            &path,
        ]);
        assert!(out.status.success(), "{policy}: {}", stderr(&out));
        let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
        let a = &j["cluster"]["autoscaling"];
        assert_eq!(a["policy"], policy);
        assert_eq!(a["pools"][0]["gpus_per_replica"], 4);
        assert!(a["cost"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn the_timeline_plot_and_the_trace_are_written() {
    let dir = scratch("autoscale-outputs");
    let (svg, trace) = (dir.join("day.svg"), dir.join("trace.jsonl"));
    run(&[
        "--autoscale-policy",
        "threshold",
        "--max-instances",
        "3",
        "--autoscale-interval",
        "10s",
        "--plot-timeline",
        svg.to_str().unwrap(),
        "--trace-output",
        trace.to_str().unwrap(),
        // Twice what one replica prefills, so that it saturates and the policy scales up.
        "--prompt-tokens",
        "1024",
    ]);
    let svg = std::fs::read_to_string(svg).unwrap();
    for label in ["replicas", "desired", "TTFT mean (ms)", "arrivals (req/s)"] {
        assert!(svg.contains(label), "{label} missing from the plot");
    }
    let lines: Vec<Value> = std::fs::read_to_string(trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds = |k: &str| lines.iter().filter(|l| l["kind"] == k).count();
    assert!(
        kinds("scale") >= 1 && kinds("replica") >= 1 && kinds("routing") == 3000,
        "{} scale, {} replica lines",
        kinds("scale"),
        kinds("replica")
    );
    let summary = lines.last().unwrap();
    assert_eq!(summary["scale_decisions"].as_u64(), Some(kinds("scale") as u64));
    let decision = lines.iter().find(|l| l["kind"] == "scale").unwrap();
    for field in ["t_us", "current", "recommended", "desired", "action", "constraint", "metrics"] {
        assert!(decision.get(field).is_some(), "{field} missing: {decision}");
    }
}

/// A node pool of another GPU and width than `--hardware`/`--tp` is what
/// runs: the summary names the pool's GPU, its GPUs per replica and its
/// cache (the blocks a plain run of that GPU and TP derives), and the JSON
/// report's `deployment` is the pool's, as a plain run of its GPU and TP
/// reports it.
#[test]
fn the_summary_shows_the_node_pools_hardware() {
    let dir = scratch("autoscale-pool-hardware");
    let policy = dir.join("a40.yaml");
    std::fs::write(&policy, "autoscale: {type: fixed, min_replicas: 1, max_replicas: 1}\nnode_pools: [{name: p, hardware: A40, tp: 2}]\n")
        .unwrap();
    let (_, j) = run(&["--policy-config", policy.to_str().unwrap()]);
    let (_, plain) = run(&["--hardware", "A40", "--tp", "2"]);
    let pool = &j["cluster"]["autoscaling"]["pools"][0];
    assert_eq!(pool["num_gpu_blocks"], plain["deployment"]["num_gpu_blocks"], "{pool}");
    assert_eq!(j["deployment"], plain["deployment"]);
    for knob in ["hardware", "tp"] {
        assert_eq!((&j["config"][knob]["value"], j["config"][knob]["source"].as_str()), (&plain["config"][knob]["value"], Some("file")));
    }
    let out = blis(&["run", "--model", "qwen/qwen2.5-7b-instruct", "--num-requests", "20", "--policy-config", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let line = table.lines().find(|l| l.starts_with("Hardware")).unwrap();
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>().join(" "),
        format!("Hardware (per replica, autoscaled): 2 × A40, {} KV blocks", pool["num_gpu_blocks"])
    );
    assert!(table.contains("KV cache per GPU (GiB, derived):"), "{table}");
}

/// The deployment is resolved at the node pools' width: a model that fits
/// only at TP 4 runs on pools of TP 4 without `--tp 4`, and is refused
/// without them.
#[test]
fn a_model_that_fits_only_at_the_pools_width_runs() {
    let dir = scratch("autoscale-pool-width");
    let policy = dir.join("tp4.yaml");
    std::fs::write(&policy, "autoscale: {type: fixed, min_replicas: 1, max_replicas: 1}\nnode_pools: [{name: p, tp: 4}]\n").unwrap();
    let base = ["run", "--model", "meta-llama/llama-3.1-70b-instruct", "--num-requests", "20", "--quiet"];
    let refused = blis(&base);
    assert!(!refused.status.success() && stderr(&refused).contains("does not fit"), "{}", stderr(&refused));
    let out = blis(&[&base[..], &["--policy-config", policy.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let off = blis(&[&base[..], &["--policy-config", policy.to_str().unwrap(), "--autoscale-policy", "none"]].concat());
    assert!(stderr(&off).contains("does not fit"), "pools turned off leave the flags' width: {}", stderr(&off));
}

/// `--prefill-instances 2 --decode-instances 6 --autoscale-policy NAME`:
/// each pool is a scaling group of its own, started at its size, bounded
/// by --min-instances/--max-instances; the report has the fleet's totals
/// and each group's own decisions, the trace names each decision's group,
/// and the same seed gives the same bytes.
#[test]
fn a_disaggregated_fleet_scales_each_pool() {
    let dir = scratch("pd-autoscaled");
    let trace = dir.join("trace.jsonl");
    let args = [
        "--prefill-instances",
        "2",
        "--decode-instances",
        "6",
        "--autoscale-policy",
        "sla-planner",
        "--max-instances",
        "8",
        "--autoscale-interval",
        "10s",
        "--gpu-hour-cost",
        "4",
        "--prompt-tokens",
        "1024",
        "--output-tokens",
        "64",
        "--trace-output",
        trace.to_str().unwrap(),
    ];
    let (a, j) = run(&args);
    let (b, _) = run(&args);
    assert_eq!(a, b, "same seed, same bytes");
    let s = &j["cluster"]["autoscaling"];
    let groups = s["groups"].as_array().unwrap();
    assert_eq!(groups.iter().map(|g| g["name"].as_str().unwrap()).collect::<Vec<_>>(), ["prefill", "decode"]);
    for g in groups {
        assert_eq!((g["policy"].as_str(), g["min_replicas"].as_u64(), g["max_replicas"].as_u64()), (Some("sla-planner"), Some(1), Some(8)));
        assert!(g["decisions"].as_u64().unwrap() > 0 && g["cost"].as_f64().unwrap() > 0.0, "{g}");
    }
    // The decode pool of 6 is far more than 40 req/s of 64-token answers need: the planner removes most of it.
    assert!(groups[1]["scale_downs"].as_u64().unwrap() > 0, "{}", groups[1]);
    let total: f64 = groups.iter().map(|g| g["cost"].as_f64().unwrap()).sum();
    assert!((s["cost"].as_f64().unwrap() - total).abs() < 1e-9, "the fleet's cost is its groups'");
    assert_eq!(j["cluster"]["pd"]["requests"]["disaggregated"], 3000);
    let lines = std::fs::read_to_string(&trace).unwrap();
    let decisions: Vec<Value> = lines.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|v| v["kind"] == "scale").collect();
    assert!(decisions.iter().any(|d| d["group"] == "prefill") && decisions.iter().any(|d| d["group"] == "decode"));
    assert!(decisions.iter().all(|d| (1..=8).contains(&d["desired"].as_u64().unwrap())), "bounds hold");
    let table = stdout(&blis(&[
        "run",
        "--model",
        "qwen/qwen2.5-7b-instruct",
        "--num-requests",
        "500",
        "--prefill-instances",
        "1",
        "--decode-instances",
        "2",
        "--autoscale-policy",
        "fixed",
    ]));
    assert!(
        table.contains("Hardware (prefill pool):") && table.contains("Policy; replicas min–max (peak):            fixed; 2–16"),
        "{table}"
    );
}

/// The policy file's `pools:` list: two GPU types serving one model, each
/// fixed or autoscaled on its own; the report and the table show each pool.
#[test]
fn serving_pools_of_two_gpu_types_serve_one_model() {
    let dir = scratch("serving-pools");
    let fixed = dir.join("fixed.yaml");
    std::fs::write(
        &fixed,
        "pools:\n  - {name: h100, hardware: H100, instances: 2}\n  - {name: a100, hardware: A100-80GB, instances: 3, max_num_seqs: 64}\n",
    )
    .unwrap();
    let (_, j) = run(&["--policy-config", fixed.to_str().unwrap()]);
    let pools = j["cluster"]["pools"].as_array().unwrap();
    let shape: Vec<(&str, &str, u64)> =
        pools.iter().map(|p| (p["name"].as_str().unwrap(), p["hardware"].as_str().unwrap(), p["instances"].as_u64().unwrap())).collect();
    assert_eq!(shape, [("h100", "H100", 2), ("a100", "A100-80GB", 3)]);
    assert_eq!(j["cluster"]["num_instances"], 5);
    let served: u64 = pools.iter().map(|p| p["batch"]["steps"].as_u64().unwrap()).sum();
    assert!(served > 0 && pools.iter().all(|p| p["batch"]["steps"].as_u64().unwrap() > 0), "both pools serve");
    let table =
        stdout(&blis(&["run", "--model", "qwen/qwen2.5-7b-instruct", "--num-requests", "300", "--policy-config", fixed.to_str().unwrap()]));
    assert!(
        table.contains("Hardware (pool h100):") && table.contains("3 × A100-80GB (TP 1)") && table.contains("5 GPUs in all"),
        "{table}"
    );
    let auto = dir.join("auto.yaml");
    std::fs::write(
        &auto,
        "pools:\n  - {name: h100, hardware: H100, instances: 1, autoscale: {type: queue-depth, max_replicas: 3}, nodes: {cost_per_gpu_hour: 4}}\n  - {name: l40s, hardware: L40S, instances: 2}\n",
    )
    .unwrap();
    let (_, j) = run(&["--policy-config", auto.to_str().unwrap()]);
    let a = &j["cluster"]["autoscaling"];
    assert_eq!((a["policy"].as_str(), a["max_replicas"].as_u64()), (Some("queue-depth"), Some(3)), "one group: the autoscaled pool's");
    assert_eq!(j["cluster"]["pools"].as_array().unwrap().len(), 2);
    // The list sizes the fleet: no other knob may.
    for (flag, value, needle) in [
        ("--num-instances", "3", "both size the fleet"),
        ("--autoscale-policy", "threshold", "its own autoscale section"),
        ("--prefill-instances", "1", "--prefill-instances"),
    ] {
        let out = blis(&["run", "--model", "qwen/qwen2.5-7b-instruct", "--policy-config", fixed.to_str().unwrap(), flag, value]);
        crate::assert_refused(&out, flag, needle);
    }
}
