//! `blis plan`: the answer is the cheapest simulated candidate that meets
//! the SLO (checked against the CSV of every candidate), pruned candidates
//! really cannot meet it, and bad plans are refused before anything runs.

use serde_json::Value;

use crate::{assert_refused, blis, scratch, stderr, stdout};

const PLAN: &str = "slo: {ttft_p99_ms: 2000, itl_p99_ms: 80}\ngpus:\n  - {hardware: H100, gpu_hour_cost: 4}\n  - {hardware: L40S, gpu_hour_cost: 1}\ntp: [1, 2]\nreplicas: [1, 2, 4]\n";
const WORKLOAD: &[&str] = &[
    "--model",
    "meta-llama/llama-3.1-8b-instruct",
    "--rate",
    "60",
    "--num-requests",
    "600",
    "--prompt-tokens",
    "1024",
    "--output-tokens",
    "128",
];

fn rows(csv: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines.map(|l| header.iter().map(|h| h.to_string()).zip(l.split(',').map(str::to_string)).collect()).collect()
}

#[test]
fn the_answer_is_the_cheapest_candidate_that_meets_the_slo_and_pruned_ones_cannot() {
    let dir = scratch("plan");
    let (plan, csv) = (dir.join("plan.yaml"), dir.join("plan.csv"));
    std::fs::write(&plan, PLAN).unwrap();
    let mut args = vec!["plan"];
    args.extend_from_slice(WORKLOAD);
    let html = dir.join("plan.html");
    args.extend_from_slice(&["--plan", plan.to_str().unwrap(), "--output", csv.to_str().unwrap(), "--report", html.to_str().unwrap()]);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<figure><svg") && page.contains("every candidate"));
    assert!(page.matches("<tr>").count() > 1 + 12, "a header, every candidate and a frontier");
    let text = stdout(&out);
    let rows = rows(&std::fs::read_to_string(&csv).unwrap());
    assert_eq!(rows.len(), 2 * 2 * 3);
    assert!(text.starts_with("12 candidates:"), "{text}");
    // Brute force over the CSV: the cheapest row that meets the SLO (of
    // equal cost, the one with the better first limit) is the answer.
    let meeting: Vec<_> = rows.iter().filter(|r| r["meets_slo"] == "true").collect();
    let key = |r: &&&std::collections::BTreeMap<String, String>| {
        (r["cost_per_hour"].parse::<f64>().unwrap(), r["ttft_p99_ms"].parse::<f64>().unwrap())
    };
    let cheapest = meeting.iter().min_by(|a, b| key(a).partial_cmp(&key(b)).unwrap()).expect("some candidate meets the SLO");
    let want = format!(
        "cheapest meeting the SLO: {} × {} TP {}: ${:.2}/h",
        cheapest["replicas"],
        cheapest["hardware"],
        cheapest["tp"],
        cheapest["cost_per_hour"].parse::<f64>().unwrap()
    );
    assert!(text.contains(&want), "{want}\n{text}");
    // A meeting row meets every limit it lists.
    for r in &meeting {
        assert!(r["ttft_p99_ms"].parse::<f64>().unwrap() <= 2000.0 && r["itl_p99_ms"].parse::<f64>().unwrap() <= 80.0);
    }
    // The roofline prunes only what cannot work: simulate a pruned candidate, it misses the SLO.
    let pruned = rows.iter().find(|r| r["status"] == "roofline").expect("60 req/s of 1k prompts is too much for one L40S");
    let out = blis(&[
        "run",
        "--model",
        "meta-llama/llama-3.1-8b-instruct",
        "--rate",
        "60",
        "--num-requests",
        "600",
        "--prompt-tokens",
        "1024",
        "--output-tokens",
        "128",
        "--hardware",
        &pruned["hardware"],
        "--tp",
        &pruned["tp"],
        "--num-instances",
        &pruned["replicas"],
        "--format",
        "json",
    ]);
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        run["latency_ms"]["ttft"]["p99"].as_f64().unwrap() > 2000.0,
        "a pruned candidate met the TTFT limit: {}",
        run["latency_ms"]["ttft"]
    );
}

#[test]
fn bad_plans_are_refused_before_anything_runs() {
    let dir = scratch("plan-bad");
    for (name, plan, needle) in [
        ("metric", "slo: {ttft_p98_ms: 5}\ngpus: [{hardware: H100, gpu_hour_cost: 1}]\nreplicas: [1]\n", "slo.ttft_p98_ms"),
        ("price", "slo: {ttft_p99_ms: 5}\ngpus: [{hardware: H100, gpu_hour_cost: -1}]\nreplicas: [1]\n", "gpu_hour_cost -1"),
        (
            "price-absurd",
            "slo: {ttft_p99_ms: 5}\ngpus: [{hardware: H100, gpu_hour_cost: 1e300}]\nreplicas: [1]\n",
            "gpu_hour_cost 1e300: must be a price in [0, 1e6] dollars",
        ),
        ("field", "slo: {ttft_p99_ms: 5}\ngpus: [{hardware: H100, gpu_hour_cost: 1}]\nreplicas: [1]\nbudget: 3\n", "budget"),
        (
            "knob",
            "slo: {ttft_p99_ms: 5}\ngpus: [{hardware: H100, gpu_hour_cost: 1}]\nreplicas: [1]\nknobs: {max-num-seqz: [1]}\n",
            "max-num-seqz",
        ),
        (
            "same-gpu",
            "slo: {ttft_p99_ms: 5}\ngpus: [{hardware: H100, gpu_hour_cost: 1}, {hardware: h100, gpu_hour_cost: 2}]\nreplicas: [1]\n",
            "gpus[1].hardware h100: the same GPU as gpus[0]",
        ),
        (
            "tp-twice",
            "slo: {ttft_p99_ms: 5}\ngpus: [{hardware: H100, gpu_hour_cost: 1}]\ntp: [1, 2, 1]\nreplicas: [1]\n",
            "tp[2] 1: listed twice",
        ),
        // Infeasible plans name what binds.
        (
            "binds",
            "slo: {itl_p99_ms: 1000, ttft_p99_ms: 0.01}\ngpus: [{hardware: H100, gpu_hour_cost: 1}]\nreplicas: [1, 2]\n",
            "no candidate meets ttft_p99_ms 0.01: the best reaches",
        ),
        (
            "all-pruned",
            "slo: {ttft_p99_ms: 500}\ngpus: [{hardware: L40S, gpu_hour_cost: 1}]\nreplicas: [1]\n",
            "cannot carry the rate even at peak",
        ),
        ("gpu", "slo: {ttft_p99_ms: 5}\ngpus: [{hardware: NOPE, gpu_hour_cost: 1}]\nreplicas: [1]\n", "gpus[0].hardware NOPE: unknown GPU"),
        // A knob value no candidate can take says why, not only how many failed.
        (
            "knob-value",
            "slo: {ttft_p99_ms: 500}\ngpus: [{hardware: H100, gpu_hour_cost: 1}]\nreplicas: [1]\nknobs: {gpu-memory-utilization: [5]}\n",
            "the first, 1 × H100 TP 1 (gpu-memory-utilization 5): --gpu-memory-utilization 5.0: must be in (0, 1]",
        ),
    ] {
        let p = dir.join(format!("{name}.yaml"));
        std::fs::write(&p, plan).unwrap();
        let out_csv = dir.join(format!("{name}.csv"));
        let mut args = vec!["plan"];
        args.extend_from_slice(WORKLOAD);
        args.extend_from_slice(&["--plan", p.to_str().unwrap(), "--output", out_csv.to_str().unwrap()]);
        assert_refused(&blis(&args), name, needle);
        assert!(!out_csv.exists(), "{name}: wrote an output");
    }
}

/// A plan of absurdly many candidates is refused at once (it used to
/// take gigabytes before printing anything).
#[test]
fn a_plan_of_too_many_candidates_is_refused_up_front() {
    let dir = scratch("plan-huge");
    let list = |from: u32| format!("[{}]", (from..from + 1000).map(|n| n.to_string()).collect::<Vec<_>>().join(", "));
    let plan = format!(
        "slo: {{ttft_p99_ms: 500}}\ngpus: [{{hardware: H100, gpu_hour_cost: 1}}]\nreplicas: {}\nknobs:\n  max-num-seqs: {}\n  max-num-batched-tokens: {}\n",
        list(1),
        list(1),
        list(2048)
    );
    let p = dir.join("huge.yaml");
    std::fs::write(&p, plan).unwrap();
    let mut args = vec!["plan"];
    args.extend_from_slice(WORKLOAD);
    args.extend_from_slice(&["--plan", p.to_str().unwrap()]);
    assert_refused(&blis(&args), "1e9 candidates", "= 1000000000 candidates, more than the 100000");
}

/// Aggregated and disaggregated (xPyD) candidates on H100s for Llama-3.1-8B.
const SHAPES: &str = "gpus: [{hardware: H100, gpu_hour_cost: 4}]\ntp: [1, 2]\nreplicas: [1, 2, 3, 4, 5, 6]\n\
disaggregated:\n  prefill: {replicas: [1, 2, 3, 4], tp: [1]}\n  decode: {replicas: [1, 2], tp: [1, 2]}\n\
knobs: {max-num-batched-tokens: [512, 2048]}\n";

/// The cheapest candidate of each kind that meets the SLO, from the CSV: (aggregated, disaggregated) $/h.
fn cheapest_of_each_kind(rows: &[std::collections::BTreeMap<String, String>]) -> (f64, f64) {
    let cheapest = |kind: &str| {
        rows.iter()
            .filter(|r| r["shape"] == kind && r["meets_slo"] == "true")
            .map(|r| r["cost_per_hour"].parse::<f64>().unwrap())
            .fold(f64::INFINITY, f64::min)
    };
    (cheapest("aggregated"), cheapest("disaggregated"))
}

/// One plan over both kinds: with long prompts and a tight ITL limit,
/// disaggregation wins (chunked prefill stalls an aggregated replica's
/// decodes, so it needs more GPUs, or larger TP, to keep ITL); with short
/// prompts and a tight TTFT limit, aggregation wins (a prefill pool of its
/// own costs GPUs the short prompts do not need). The frontier ranks both
/// kinds together.
#[test]
fn a_plan_picks_disaggregation_where_it_wins_and_aggregation_where_it_does_not() {
    let dir = scratch("plan-pd");
    for (name, slo, workload, disaggregated_wins) in [
        ("long-prompts", "{itl_p99_ms: 15, ttft_p99_ms: 2000}", ["8", "8192", "256"], true),
        ("short-prompts", "{itl_p99_ms: 50, ttft_p99_ms: 200}", ["50", "512", "256"], false),
    ] {
        let (plan, csv) = (dir.join(format!("{name}.yaml")), dir.join(format!("{name}.csv")));
        std::fs::write(&plan, format!("slo: {slo}\n{SHAPES}")).unwrap();
        let [rate, prompt, output] = workload;
        let out = blis(&[
            "plan",
            "--model",
            "meta-llama/llama-3.1-8b-instruct",
            "--rate",
            rate,
            "--num-requests",
            "600",
            "--prompt-tokens",
            prompt,
            "--output-tokens",
            output,
            "--plan",
            plan.to_str().unwrap(),
            "--output",
            csv.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let text = stdout(&out);
        let rows = rows(&std::fs::read_to_string(&csv).unwrap());
        assert_eq!(rows.len(), (2 * 6 + 4 * 4) * 2, "{name}");
        assert!(rows.iter().all(|r| r["status"] == "simulated"), "{name}: every candidate fits and carries the rate");
        let (aggregated, disaggregated) = cheapest_of_each_kind(&rows);
        let answer = text.lines().find_map(|l| l.strip_prefix("cheapest meeting the SLO: ")).expect("an answer");
        if disaggregated_wins {
            assert!(disaggregated < aggregated, "{name}: P/D ${disaggregated}/h, aggregated ${aggregated}/h");
            assert!(answer.contains(" prefill + ") && answer.contains(&format!("${disaggregated:.2}/h")), "{name}: {answer}");
        } else {
            assert!(aggregated < disaggregated, "{name}: aggregated ${aggregated}/h, P/D ${disaggregated}/h");
            assert!(!answer.contains(" prefill + ") && answer.contains(&format!("${aggregated:.2}/h")), "{name}: {answer}");
        }
        for kind in ["aggregated", "disaggregated"] {
            assert!(text.contains(&format!("cheapest {kind}: ")), "{name}: {text}");
        }
        // One frontier, over both kinds: a disaggregated candidate is on it
        // (the lowest ITL for the money in both workloads).
        let frontier =
            text.split("frontier (cost against itl_p99_ms, of the candidates within every other limit):").nth(1).expect("a frontier");
        assert!(frontier.contains(" prefill + "), "{name}: {frontier}");
    }
    // The plan sizes the fleet: a flag that does too is refused.
    let plan = dir.join("long-prompts.yaml");
    let mut args = vec!["plan"];
    args.extend_from_slice(WORKLOAD);
    args.extend_from_slice(&["--plan", plan.to_str().unwrap(), "--num-instances", "2"]);
    assert_refused(&blis(&args), "--num-instances", "--num-instances: the plan sizes the fleet");
}

/// A candidate that completes nothing (every request longer than its
/// max-model-len is dropped) has no latencies and is never the answer,
/// even when the plan lets requests go uncompleted.
#[test]
fn a_candidate_that_completes_nothing_is_never_the_answer() {
    let dir = scratch("plan-nothing");
    let plan = "slo: {ttft_p99_ms: 100000, completed_min: 0}\ngpus: [{hardware: H100, gpu_hour_cost: 1}]\nreplicas: [1]\nknobs: {max-model-len: [10, 4096]}\n";
    let p = dir.join("p.yaml");
    std::fs::write(&p, plan).unwrap();
    let csv = dir.join("p.csv");
    let mut args = vec!["plan"];
    args.extend_from_slice(WORKLOAD);
    args.extend_from_slice(&["--plan", p.to_str().unwrap(), "--output", csv.to_str().unwrap()]);
    let out = blis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("cheapest meeting the SLO: 1 × H100 TP 1 (max-model-len 4096)"), "{}", stdout(&out));
    let rows = rows(&std::fs::read_to_string(&csv).unwrap());
    assert_eq!(
        (rows[0]["max-model-len"].as_str(), rows[0]["ttft_p99_ms"].as_str(), rows[0]["meets_slo"].as_str()),
        ("10", "", "false"),
        "{:?}",
        rows[0]
    );
    // Only the candidate that completes nothing: no answer.
    std::fs::write(&p, plan.replace("[10, 4096]", "[10]")).unwrap();
    assert_refused(&blis(&args), "nothing completes", "no simulated candidate completed a request");
}

/// A flag or file the scenario cannot run with is refused before any
/// candidate runs, not blamed on every candidate.
#[test]
fn evaluate_refuses_scenario_errors_before_any_candidate_runs() {
    let dir = scratch("evaluate-bad");
    let c = dir.join("c.yaml");
    std::fs::write(&c, "routing: {type: least-loaded}\n").unwrap();
    for (flag, value) in [
        ("--rate", "-1"),
        ("--num-instances", "0"),
        ("--tp", "3"),
        ("--slo-targets", "foo"),
        ("--fitness-weights", "goodput:-1"),
        ("--fitness-weights", "foo:1"),
        ("--fitness-weights", "goodput:NaN"),
        ("--model", "nope"),
    ] {
        let mut args =
            vec!["evaluate", "--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "40", "--candidate", c.to_str().unwrap()];
        args.extend_from_slice(&[flag, value]);
        assert_refused(&blis(&args), &format!("{flag} {value}"), flag);
    }
    // Arrivals past the end of simulated time are found before any candidate runs.
    let args = [
        "evaluate",
        "--model",
        "meta-llama/llama-3.1-8b-instruct",
        "--num-requests",
        "40",
        "--rate",
        "1e-9",
        "--candidate",
        c.to_str().unwrap(),
    ];
    assert_refused(&blis(&args), "rate 1e-9", "the arrival rate is too low");
}

/// `blis evaluate`: one result per candidate in order; a pathological
/// policy scores below a sane one, a broken one scores 0 with its error,
/// and the excerpts quote the worst routing decisions.
#[test]
fn evaluate_ranks_candidates_and_scores_a_broken_one_zero() {
    let dir = scratch("evaluate");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (good, busiest, broken) = (
        write("g.yaml", "routing: {type: least-loaded}\n"),
        write("b.yaml", "routing: {type: always-busiest}\n"),
        write("x.yaml", "routing: {type: nope}\n"),
    );
    let typed = write("t.yaml", "pools: 5\n");
    let out = blis(&[
        "evaluate",
        "--model",
        "meta-llama/llama-3.1-8b-instruct",
        "--num-instances",
        "3",
        "--rate",
        "40",
        "--num-requests",
        "600",
        "--candidate",
        &good,
        "--candidate",
        &busiest,
        "--candidate",
        &broken,
        "--candidate",
        &typed,
        "--excerpts",
        "3",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let scores: Vec<f64> = v.as_array().unwrap().iter().map(|r| r["score"].as_f64().unwrap()).collect();
    assert!(scores[0] > scores[1] && scores[2] == 0.0, "{scores:?}");
    assert_eq!(v[1]["trace"].as_array().unwrap().len(), 3);
    assert!(v[2]["error"].as_str().unwrap().contains("unknown policy `nope`"));
    // A candidate's error reads as `blis run` prints it: types in words, not Rust's names.
    let typed_error = v[3]["error"].as_str().unwrap();
    assert!(typed_error.contains("pools: expected a mapping with `prefill` and `decode`"), "{typed_error}");
    assert!(v[3]["trace"][0].as_str().unwrap().ends_with(typed_error), "{}", v[3]["trace"]);
    let refused = blis(&["evaluate", "--model", "meta-llama/llama-3.1-8b-instruct", "--policy-config", &good, "--candidate", &good]);
    assert_refused(&refused, "evaluate --policy-config", "each --candidate is the policy file");
}
