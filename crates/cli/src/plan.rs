//! `blis plan`: the cheapest deployment that meets an SLO.
//!
//! Candidates are every GPU offer × TP degree × replica count × point of
//! an optional knob grid. Each is first checked without simulating:
//!
//! 1. **Fit**: vLLM's rules for the server (TP divides the heads, the
//!    weights and one request's KV fit in GPU memory), as `blis run` applies
//!    them; a candidate that fails is pruned.
//! 2. **Roofline**: with the workload given by `--rate`, `--prompt-tokens`
//!    and `--output-tokens` (not a spec or trace), a candidate whose GPUs,
//!    at their peak FLOP/s and HBM bandwidth, could not carry the offered
//!    tokens is pruned: `rate × (prompt − prefix + output) × FLOPs/token >
//!    replicas × TP × peak`, or `rate × output > replicas × max-num-seqs ×
//!    TP × HBM / active weight bytes` (a decode step reads the active
//!    weights at least once). Both are optimistic bounds, so no candidate
//!    that could meet the SLO is pruned.
//!
//! The rest are simulated on every core, and a candidate meets the SLO when
//! every limit of the plan's `slo` section holds. The answer is the
//! cheapest that does; the frontier is every simulated candidate no other
//! beats on both cost and the first SLO metric. For comparison the plan
//! also names what a throughput-only analytical estimator would pick: the
//! cheapest candidate whose GPUs carry the rate at the spec's MFU.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use blis_cluster::autoscale::MAX_GPU_HOUR_COST;
use blis_scenario::Scenario;
use blis_scenario::deployment::Deployment;
use blis_scenario::knobs::{KnobValues, Knobs};
use blis_scenario::report::RunReport;
use rayon::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::{BadInput, bad_input};
use blis_scenario::sweep::{Grid, field, run_point};

use crate::sweep::read_inputs;

/// Find the cheapest deployment (GPU, TP, replicas, knobs) that meets an SLO for a workload.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  blis plan --model meta-llama/llama-3.1-8b-instruct --rate 40 --num-requests 2000 --plan examples/plan/plan.yaml\n\n\
    plan.yaml:\n    slo: {ttft_p99_ms: 1000, itl_p99_ms: 60}\n    gpus:\n      - {hardware: H100, gpu_hour_cost: 4.0}\n      - {hardware: A100-80GB, gpu_hour_cost: 2.2}\n    tp: [1, 2]\n    replicas: [1, 2, 3, 4]\n    knobs: {max-num-seqs: [128, 256]}"
)]
pub struct PlanArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// A knob file every candidate starts from (as --config); flags win over it.
    #[arg(long, value_name = "PATH", help_heading = "Plan")]
    pub base: Option<PathBuf>,

    /// The SLO and the candidates: `slo`, `gpus` (hardware, gpu_hour_cost), `tp`, `replicas`, `knobs`.
    #[arg(long, value_name = "PATH", help_heading = "Plan")]
    pub plan: PathBuf,

    /// Write every candidate (pruned or simulated, its cost, metrics and verdict) to this CSV.
    #[arg(long, short, value_name = "PATH", help_heading = "Plan")]
    pub output: Option<PathBuf>,

    /// Write a self-contained HTML report (summary, frontier plot, frontier and every candidate) to this file.
    #[arg(long, value_name = "PATH", help_heading = "Plan")]
    pub report: Option<PathBuf>,

    /// Candidates simulated at once, 1 to 1024. [default: the number of cores]
    #[arg(long, value_name = "N", value_parser = crate::sweep::parse_jobs, help_heading = "Plan")]
    pub jobs: Option<usize>,
}

/// A GPU type on offer and its price.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Offer {
    hardware: String,
    gpu_hour_cost: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    /// In the file's order: the first limit is the frontier's axis.
    slo: Map<String, Value>,
    gpus: Vec<Offer>,
    #[serde(default = "one")]
    tp: Vec<u32>,
    replicas: Vec<u32>,
    #[serde(default)]
    knobs: Option<Value>,
}

fn one() -> Vec<u32> {
    vec![1]
}

/// A latency statistic an SLO limits.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Limit {
    /// `{metric}_{stat}_ms` ≤ value.
    Latency { metric: &'static str, stat: &'static str },
    /// The report's SLO attainment (per-request targets: `--slo-targets`) ≥ value.
    AttainmentMin,
    /// completed ÷ injected ≥ value.
    CompletedMin,
}

/// Most candidates a plan may enumerate (gpus × tp × replicas × knob
/// points): each is kept in memory and checked, and most are simulated, so
/// a larger plan is a typo or a job for `blis sweep --shard`.
const MAX_CANDIDATES: u128 = 100_000;

const METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2e"];
const STATS: [&str; 5] = ["mean", "p50", "p90", "p95", "p99"];

impl Limit {
    fn parse(key: &str) -> Option<Limit> {
        match key {
            "attainment_min" => return Some(Limit::AttainmentMin),
            "completed_min" => return Some(Limit::CompletedMin),
            _ => {}
        }
        let rest = key.strip_suffix("_ms")?;
        let (metric, stat) = rest.split_once('_')?;
        Some(Limit::Latency { metric: METRICS.into_iter().find(|m| *m == metric)?, stat: STATS.into_iter().find(|s| *s == stat)? })
    }

    /// The report's value of this statistic; NaN for a latency nothing
    /// measured (no request completed), which meets no limit.
    fn value(self, r: &RunReport) -> f64 {
        let s = &r.summary;
        match self {
            Limit::AttainmentMin => r.cluster.goodput.slo_attainment,
            Limit::CompletedMin => {
                if s.requests.injected == 0 {
                    0.0
                } else {
                    s.requests.completed as f64 / s.requests.injected as f64
                }
            }
            Limit::Latency { metric, stat } => {
                let l = &s.latency_ms;
                let d = match metric {
                    "ttft" => &l.ttft,
                    "tpot" => &l.tpot,
                    "itl" => &l.itl,
                    _ => &l.e2e,
                };
                match stat {
                    _ if d.count == 0 => f64::NAN,
                    "mean" => d.mean,
                    "p50" => d.p50,
                    "p90" => d.p90,
                    "p95" => d.p95,
                    _ => d.p99,
                }
            }
        }
    }

    fn holds(self, value: f64, bound: f64) -> bool {
        match self {
            Limit::Latency { .. } => value <= bound,
            Limit::AttainmentMin | Limit::CompletedMin => value >= bound,
        }
    }
}

/// A plan file, checked.
struct Plan {
    /// The limits, in the file's order; every plan also requires all requests to complete unless it sets `completed_min`.
    slo: Vec<(String, Limit, f64)>,
    gpus: Vec<Offer>,
    tp: Vec<u32>,
    replicas: Vec<u32>,
    knobs: Option<Grid>,
}

impl Plan {
    fn parse(raw: Value, origin: &str) -> Result<Plan, BadInput> {
        let file: PlanFile =
            serde_path_to_error::deserialize(raw).map_err(|e| bad_input!("{origin}: {}", blis_data::locate::located_message(&e)))?;
        let mut slo = Vec::new();
        for (key, bound) in &file.slo {
            let bound = &bound.as_f64().ok_or_else(|| bad_input!("{origin}: slo.{key}: expected a number, got {bound}"))?;
            let limit = Limit::parse(key).ok_or_else(|| {
                bad_input!("{origin}: slo.{key}: unknown; allowed: {{ttft,tpot,itl,e2e}}_{{mean,p50,p90,p95,p99}}_ms, attainment_min, completed_min")
            })?;
            let ok = match limit {
                Limit::Latency { .. } => bound.is_finite() && *bound > 0.0,
                _ => (0.0..=1.0).contains(bound),
            };
            if !ok {
                return Err(bad_input!(
                    "{origin}: slo.{key} {bound}: must be a positive number of ms (a fraction in [0, 1] for attainment_min, completed_min)"
                ));
            }
            slo.push((key.clone(), limit, *bound));
        }
        if !slo.iter().any(|(_, l, _)| *l == Limit::CompletedMin) {
            slo.push(("completed_min".into(), Limit::CompletedMin, 1.0));
        }
        if !slo.iter().any(|(_, l, _)| matches!(l, Limit::Latency { .. })) {
            return Err(bad_input!("{origin}: slo: needs at least one latency limit, e.g. ttft_p99_ms: 500"));
        }
        if file.gpus.is_empty() || file.replicas.is_empty() || file.tp.is_empty() {
            return Err(bad_input!("{origin}: gpus, tp and replicas each need at least one entry"));
        }
        for (i, g) in file.gpus.iter().enumerate() {
            if !(g.gpu_hour_cost.is_finite() && (0.0..=MAX_GPU_HOUR_COST).contains(&g.gpu_hour_cost)) {
                return Err(bad_input!(
                    "{origin}: gpus[{i}].gpu_hour_cost {}: must be a price in [0, {MAX_GPU_HOUR_COST:e}] dollars",
                    g.gpu_hour_cost
                ));
            }
        }
        if let Some(bad) = file.tp.iter().chain(&file.replicas).find(|&&n| n == 0) {
            return Err(bad_input!("{origin}: tp and replicas must be at least 1, got {bad}"));
        }
        for (i, g) in file.gpus.iter().enumerate() {
            if blis_physics::catalog::find_gpu(&g.hardware).is_none() {
                return Err(bad_input!("{origin}: gpus[{i}].hardware {}: {}", g.hardware, blis_physics::catalog::unknown_gpu(&g.hardware)));
            }
            if let Some(first) = file.gpus[..i].iter().position(|f| blis_physics::catalog::same_gpu(&f.hardware, &g.hardware)) {
                return Err(bad_input!(
                    "{origin}: gpus[{i}].hardware {}: the same GPU as gpus[{first}]; offer each GPU once, at the price you pay",
                    g.hardware
                ));
            }
        }
        for (key, list) in [("tp", &file.tp), ("replicas", &file.replicas)] {
            if let Some(i) = (1..list.len()).find(|&i| list[..i].contains(&list[i])) {
                return Err(bad_input!("{origin}: {key}[{i}] {}: listed twice; each value once", list[i]));
            }
        }
        let knobs = match file.knobs {
            None => None,
            Some(axes) => {
                let grid = Grid::parse(json!({ "axes": axes }), &format!("{origin}: knobs"))?;
                let set_by_the_plan =
                    |c: &&str| ["hardware", "tp", "num-instances", "tensor-parallel-size"].contains(&c.replace('_', "-").as_str());
                if let Some(taken) = grid.columns().find(set_by_the_plan) {
                    return Err(bad_input!("{origin}: knobs.{taken}: set by gpus, tp and replicas"));
                }
                Some(grid)
            }
        };
        let sizes = [
            file.gpus.len() as u128,
            file.tp.len() as u128,
            file.replicas.len() as u128,
            knobs.as_ref().map_or(1, |g| u128::from(g.points)),
        ];
        let candidates: u128 = sizes.iter().product();
        if candidates > MAX_CANDIDATES {
            return Err(bad_input!(
                "{origin}: {} gpus × {} tp × {} replicas × {} knob points = {candidates} candidates, more than the {MAX_CANDIDATES} a plan may have; narrow the lists (or sweep them with `blis sweep --shard`)",
                sizes[0],
                sizes[1],
                sizes[2],
                sizes[3]
            ));
        }
        if let Some(grid) = &knobs {
            grid.check_knobs(origin)?;
        }
        Ok(Plan { slo, gpus: file.gpus, tp: file.tp, replicas: file.replicas, knobs })
    }
}

/// One candidate deployment.
struct Candidate {
    offer: usize,
    tp: u32,
    replicas: u32,
    /// Knob-grid point (index) and its values.
    knobs: Map<String, Value>,
    cost_per_hour: f64,
}

/// What became of a candidate.
enum Verdict {
    /// vLLM's rules refuse it.
    DoesNotFit(String),
    /// Its GPUs could not carry the rate even at peak.
    Roofline(String),
    /// Simulated: each limit's value, and whether all hold.
    Simulated(Vec<f64>, bool),
    /// The simulation could not run.
    Failed(String),
}

/// Offered work and, per replica, what its GPUs could carry: at peak (the
/// pruning bound) and at the spec's MFU (the analytical estimator).
struct Roofline {
    /// Required FLOP/s and decode tokens/s of the whole workload.
    flops_needed: f64,
    decode_needed: f64,
    prefill_tokens_per_s: f64,
    /// Per replica: peak FLOP/s, decode tokens/s bound, and MFU-derated
    /// prefill and decode tokens/s.
    peak_flops: f64,
    decode_bound: f64,
    prefill_mfu: f64,
    decode_mfu: f64,
}

impl Roofline {
    /// The bounds for the server `d` under the knobs `k`, when the workload
    /// is given by rate and lengths.
    fn of(d: &Deployment, k: &Knobs) -> Option<Roofline> {
        if k.workload_spec.value.is_some() || k.trace.value.is_some() || k.workload.value.is_some() {
            return None;
        }
        let (rate, prompt, output) = (k.rate.value, k.prompt_tokens.value, k.output_tokens.value);
        let prefix = f64::from(k.prefix_tokens.value);
        let (m, g, tp) = (&d.server.model, &d.server.gpu, f64::from(d.server.tp));
        // GEMM FLOPs at half precision's speed (8-bit float ones count less),
        // and the bytes of the weights one token's step reads.
        let gemm = m.stack_gemm_flops_per_token_by_class();
        let flops_per_token = gemm.weighted_sum(&g.gemm_time_scales(&m.weights));
        let peak = g.peak_flops() * tp;
        let active_bytes = gemm.weighted_sum(&m.weights.bytes_per_param_by_class()) / 2.0;
        let seats = f64::from(d.server.instance.scheduler.max_num_seqs);
        let step_min_s = active_bytes / (g.hbm_bytes_per_s() * tp);
        Some(Roofline {
            flops_needed: rate * ((prompt - prefix).max(0.0) + output) * flops_per_token,
            decode_needed: rate * output,
            prefill_tokens_per_s: rate * (prompt - prefix).max(0.0),
            peak_flops: peak,
            decode_bound: seats / step_min_s,
            prefill_mfu: peak * g.mfu_prefill / flops_per_token,
            decode_mfu: (peak * g.mfu_decode / flops_per_token).min(seats / step_min_s),
        })
    }

    /// Why `replicas` replicas cannot carry the workload even at peak, if they cannot.
    fn prune(&self, replicas: f64) -> Option<String> {
        if self.flops_needed > replicas * self.peak_flops {
            return Some(format!(
                "needs {:.1} TFLOP/s, the GPUs peak at {:.1}",
                self.flops_needed / 1e12,
                replicas * self.peak_flops / 1e12
            ));
        }
        if self.decode_needed > replicas * self.decode_bound {
            return Some(format!(
                "needs {:.0} output tokens/s, HBM bandwidth allows {:.0}",
                self.decode_needed,
                replicas * self.decode_bound
            ));
        }
        None
    }

    /// Whether a throughput-only estimate says `replicas` replicas carry the
    /// workload: the busy fraction of prefill at `mfu_prefill` plus decode at
    /// `mfu_decode` (or HBM) is at most 1 per replica.
    fn carries_at_mfu(&self, replicas: f64) -> bool {
        self.prefill_tokens_per_s / self.prefill_mfu + self.decode_needed / self.decode_mfu <= replicas
    }
}

/// Why no candidate meets the SLO, in one line: every candidate pruned, or
/// the limit that binds (one no candidate meets alone, with the best value
/// reached), or, when each limit alone is met by some candidate, the
/// candidate that misses the fewest and what it misses.
fn why_infeasible(plan: &Plan, candidates: &[Candidate], verdicts: &[Verdict], describe: &dyn Fn(&Candidate) -> String) -> String {
    let simulated: Vec<(usize, &Vec<f64>)> = verdicts
        .iter()
        .enumerate()
        .filter_map(|(i, v)| if let Verdict::Simulated(values, _) = v { Some((i, values)) } else { None })
        .collect();
    if simulated.is_empty() {
        let pruned = |f: fn(&Verdict) -> bool| verdicts.iter().filter(|v| f(v)).count();
        // One reason, so that a knob no candidate can take reads as that.
        let example = verdicts.iter().zip(candidates).find_map(|(v, c)| match v {
            Verdict::DoesNotFit(why) | Verdict::Roofline(why) | Verdict::Failed(why) => {
                Some(format!("; the first, {}: {why}", describe(c)))
            }
            Verdict::Simulated(..) => None,
        });
        return format!(
            "no candidate can meet the SLO: of {}, {} do not fit, {} cannot carry the rate even at peak, {} failed{}; offer more GPUs, replicas or larger TP",
            candidates.len(),
            pruned(|v| matches!(v, Verdict::DoesNotFit(_))),
            pruned(|v| matches!(v, Verdict::Roofline(_))),
            pruned(|v| matches!(v, Verdict::Failed(_))),
            example.unwrap_or_default()
        );
    }
    for (k, (name, limit, bound)) in plan.slo.iter().enumerate() {
        let better = |a: f64, b: f64| if matches!(limit, Limit::Latency { .. }) { a < b } else { a > b };
        // NaN (a latency no completed request measured) is the worst value.
        let Some(&(best, values)) =
            simulated.iter().filter(|(_, v)| !v[k].is_nan()).reduce(|a, b| if better(b.1[k], a.1[k]) { b } else { a })
        else {
            return format!("no candidate meets {name} {bound}: no simulated candidate completed a request");
        };
        if !limit.holds(values[k], *bound) {
            return format!(
                "no candidate meets {name} {bound}: the best reaches {:.1} ({}); the limit binds",
                values[k],
                describe(&candidates[best])
            );
        }
    }
    let misses = |values: &Vec<f64>| plan.slo.iter().zip(values.iter()).filter(|((_, l, b), v)| !l.holds(**v, *b)).count();
    let &(closest, values) = simulated.iter().min_by_key(|(i, v)| (misses(v), *i)).expect("not empty");
    let missed: Vec<String> = plan
        .slo
        .iter()
        .zip(values.iter())
        .filter(|((_, l, b), v)| !l.holds(**v, *b))
        .map(|((n, _, b), v)| format!("{n} {v:.1} (limit {b})"))
        .collect();
    if missed.is_empty() {
        return format!(
            "no candidate meets the SLO: the only ones within every limit, such as {}, complete no request",
            describe(&candidates[closest])
        );
    }
    format!(
        "no candidate meets every limit at once (each alone is met by some); the closest, {}, misses {}",
        describe(&candidates[closest]),
        missed.join(", ")
    )
}

/// Runs `blis plan`.
pub fn execute(args: PlanArgs) -> anyhow::Result<()> {
    let (origin, raw, base) = read_inputs("--plan", &args.plan, args.base.as_deref())?;
    // A plan sizes a fleet that is already serving: its MoE servers have
    // compiled their kernels, unless the flags or the base file say otherwise.
    let mut flags = args.knobs.clone();
    if flags.moe_kernel_compile.is_none() && base.as_ref().is_none_or(|(b, _)| b.moe_kernel_compile.is_none()) {
        flags.moe_kernel_compile = Some(String::from("0"));
    }
    let plan = Plan::parse(raw, &origin)?;
    let mut output = args.output.as_deref().map(|p| crate::output::AtomicFile::create("output", p)).transpose()?;
    let report = args.report.as_deref().map(|p| crate::output::AtomicFile::create("report", p)).transpose()?;

    let knob_points = plan.knobs.as_ref().map_or(1, |g| g.points);
    let mut candidates = Vec::new();
    for (offer, o) in plan.gpus.iter().enumerate() {
        for &tp in &plan.tp {
            for &replicas in &plan.replicas {
                for i in 0..knob_points {
                    let knobs = plan.knobs.as_ref().map(|g| g.point(i)).unwrap_or_default();
                    candidates.push(Candidate { offer, tp, replicas, knobs, cost_per_hour: o.gpu_hour_cost * f64::from(tp * replicas) });
                }
            }
        }
    }
    let point_of = |c: &Candidate| {
        let mut p = c.knobs.clone();
        p.insert("hardware".into(), json!(plan.gpus[c.offer].hardware));
        p.insert("tp".into(), json!(c.tp));
        p.insert("num-instances".into(), json!(c.replicas));
        p
    };
    // Fit and roofline, without simulating.
    let checks: Vec<Result<Option<Roofline>, Verdict>> = candidates
        .iter()
        .map(|c| {
            let values = KnobValues::from_yaml(Value::Object(point_of(c)), &origin)
                .map_err(|e| Verdict::DoesNotFit(e.to_string()))?
                .or(flags.clone());
            let scenario = Scenario::from_values(&values, base.iter().cloned().collect());
            let (mut report, mut warnings) = (scenario.knobs.report(), Vec::new());
            let d = Deployment::resolve(&scenario.knobs, scenario.long_context, &mut report, &mut warnings)
                .map_err(|e| Verdict::DoesNotFit(e.to_string()))?;
            let roof = Roofline::of(&d, &scenario.knobs);
            match roof.as_ref().and_then(|r| r.prune(f64::from(c.replicas))) {
                Some(why) => Err(Verdict::Roofline(why)),
                None => Ok(roof),
            }
        })
        .collect();
    let jobs = args.jobs.unwrap_or_else(rayon::current_num_threads);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs).build().context("starting the worker threads")?;
    let verdicts: Vec<Verdict> = pool.install(|| {
        candidates
            .par_iter()
            .zip(&checks)
            .map(|(c, check)| match check {
                Err(Verdict::DoesNotFit(why)) => Verdict::DoesNotFit(why.clone()),
                Err(Verdict::Roofline(why)) => Verdict::Roofline(why.clone()),
                Err(_) => unreachable!("checks only prune"),
                Ok(_) => match run_point(&point_of(c), &flags, &base) {
                    Ok(r) => {
                        let values: Vec<f64> = plan.slo.iter().map(|(_, l, _)| l.value(&r)).collect();
                        // A deployment that completes nothing is never the answer, whatever completed_min allows.
                        let meets =
                            r.summary.requests.completed > 0 && plan.slo.iter().zip(&values).all(|((_, l, bound), &v)| l.holds(v, *bound));
                        Verdict::Simulated(values, meets)
                    }
                    Err(e) => Verdict::Failed(e),
                },
            })
            .collect()
    });

    let describe = |c: &Candidate| {
        let knobs: Vec<String> =
            c.knobs.iter().map(|(k, v)| format!("{k} {}", v.as_str().map_or_else(|| v.to_string(), str::to_string))).collect();
        let extra = if knobs.is_empty() { String::new() } else { format!(" ({})", knobs.join(", ")) };
        format!("{} × {} TP {}{extra}", c.replicas, plan.gpus[c.offer].hardware, c.tp)
    };
    // Every candidate, as the CSV and the report show it.
    let mut header = vec!["hardware".to_string(), "tp".into(), "replicas".into()];
    header.extend(plan.knobs.iter().flat_map(|g| g.columns()).map(str::to_string));
    header.extend(["cost_per_hour".to_string(), "status".into()]);
    header.extend(plan.slo.iter().map(|(k, _, _)| k.clone()));
    header.extend(["meets_slo".to_string(), "reason".into()]);
    let rows: Vec<Vec<String>> = candidates
        .iter()
        .zip(&verdicts)
        .map(|(c, v)| {
            let mut row = vec![plan.gpus[c.offer].hardware.clone(), c.tp.to_string(), c.replicas.to_string()];
            row.extend(
                plan.knobs
                    .iter()
                    .flat_map(|g| g.columns())
                    .map(|k| c.knobs[k].as_str().map_or_else(|| c.knobs[k].to_string(), str::to_string)),
            );
            row.push(c.cost_per_hour.to_string());
            let empty = || vec![String::new(); plan.slo.len()];
            let (status, values, meets, reason) = match v {
                Verdict::DoesNotFit(why) => ("does-not-fit", empty(), String::new(), why.clone()),
                Verdict::Roofline(why) => ("roofline", empty(), String::new(), why.clone()),
                Verdict::Failed(why) => ("failed", empty(), String::new(), why.clone()),
                Verdict::Simulated(values, meets) => (
                    "simulated",
                    values.iter().map(|v| if v.is_nan() { String::new() } else { v.to_string() }).collect(),
                    meets.to_string(),
                    String::new(),
                ),
            };
            row.push(status.into());
            row.extend(values);
            row.push(meets);
            row.push(reason);
            row
        })
        .collect();
    if let Some(file) = output.as_mut() {
        let w = file.writer();
        let line = |cells: &[String]| cells.iter().map(|c| field(c)).collect::<Vec<_>>().join(",");
        writeln!(w, "{}", line(&header)).context("writing --output")?;
        for row in &rows {
            writeln!(w, "{}", line(row)).context("writing --output")?;
        }
    }

    let count = |f: fn(&Verdict) -> bool| verdicts.iter().filter(|v| f(v)).count();
    let limits: Vec<String> =
        plan.slo.iter().map(|(k, l, b)| format!("{k} {} {b}", if matches!(l, Limit::Latency { .. }) { "≤" } else { "≥" })).collect();
    let mut summary = vec![format!(
        "{} candidates: {} do not fit, {} cannot carry the rate (roofline), {} simulated ({} failed), {} meet the SLO ({})",
        candidates.len(),
        count(|v| matches!(v, Verdict::DoesNotFit(_))),
        count(|v| matches!(v, Verdict::Roofline(_))),
        count(|v| matches!(v, Verdict::Simulated(..) | Verdict::Failed(_))),
        count(|v| matches!(v, Verdict::Failed(_))),
        count(|v| matches!(v, Verdict::Simulated(_, true))),
        limits.join(", ")
    )];
    let by_cost = |a: &usize, b: &usize| candidates[*a].cost_per_hour.total_cmp(&candidates[*b].cost_per_hour).then(a.cmp(b));
    let mut simulated: Vec<usize> = (0..candidates.len()).filter(|&i| matches!(verdicts[i], Verdict::Simulated(..))).collect();
    simulated.sort_by(by_cost);
    let metric = |i: usize| match &verdicts[i] {
        Verdict::Simulated(values, _) => values[0],
        _ => f64::NAN,
    };
    match simulated.iter().find(|&&i| matches!(verdicts[i], Verdict::Simulated(_, true))) {
        Some(&i) => summary.push(format!(
            "cheapest meeting the SLO: {}: ${:.2}/h, {} {:.1}",
            describe(&candidates[i]),
            candidates[i].cost_per_hour,
            plan.slo[0].0,
            metric(i)
        )),
        None => return Err(bad_input!("{}", why_infeasible(&plan, &candidates, &verdicts, &describe)).into()),
    }
    let analytical = (0..candidates.len())
        .filter(|&i| matches!(&checks[i], Ok(Some(r)) if r.carries_at_mfu(f64::from(candidates[i].replicas))))
        .min_by(by_cost);
    match analytical {
        Some(i) => summary.push(format!(
            "a throughput-only analytical estimate (prefill at mfu_prefill, decode at mfu_decode or HBM) would pick: {}: ${:.2}/h{}",
            describe(&candidates[i]),
            candidates[i].cost_per_hour,
            match &verdicts[i] {
                Verdict::Simulated(_, true) => ", which the simulation says meets the SLO".to_string(),
                Verdict::Simulated(values, false) => format!(", which the simulation says misses it ({} {:.1})", plan.slo[0].0, values[0]),
                _ => String::new(),
            }
        )),
        None if checks.iter().any(|c| matches!(c, Ok(Some(_)))) => {
            summary.push("a throughput-only analytical estimate finds no candidate that carries the rate".to_string())
        }
        None => {}
    }
    // The frontier: simulated candidates no other beats on both cost and the
    // first limit (by cost, then the metric, so only the best of equal cost can pass).
    let mut by_cost_then_metric = simulated.clone();
    by_cost_then_metric.sort_by(|&a, &b| {
        candidates[a].cost_per_hour.total_cmp(&candidates[b].cost_per_hour).then(metric(a).total_cmp(&metric(b))).then(a.cmp(&b))
    });
    let mut best = f64::INFINITY;
    let frontier: Vec<usize> = by_cost_then_metric
        .into_iter()
        .filter(|&i| {
            metric(i) < best && {
                best = metric(i);
                true
            }
        })
        .collect();
    let frontier_rows: Vec<Vec<String>> = frontier
        .iter()
        .map(|&i| {
            let meets = matches!(verdicts[i], Verdict::Simulated(_, true));
            vec![
                format!("#{i}"),
                format!("{:.2}", candidates[i].cost_per_hour),
                format!("{:.1}", metric(i)),
                (if meets { "yes" } else { "no" }).to_string(),
                describe(&candidates[i]),
            ]
        })
        .collect();
    for line in &summary {
        println!("{line}");
    }
    println!("frontier (cost against {}):", plan.slo[0].0);
    println!("  {:>10}  {:>14}  {:<5}  configuration", "$/h", plan.slo[0].0, "meets");
    for r in &frontier_rows {
        println!("  {:>10}  {:>14}  {:<5}  {}", r[1], r[2], r[3], r[4]);
    }
    if let Some(file) = output {
        file.commit()?;
    }
    if let Some(mut file) = report {
        let points: Vec<(f64, f64, String)> =
            simulated.iter().map(|&i| (candidates[i].cost_per_hour, metric(i), format!("#{i}"))).collect();
        let title = format!("blis plan {}", args.plan.display());
        let svg = crate::plot::sweep::frontier_plot(&title, "cost ($/h)", &plan.slo[0].0, "frontier (candidate #)", &points)?;
        let tables = [
            crate::report_html::Table {
                caption: "frontier",
                header: vec!["#".into(), "$/h".into(), plan.slo[0].0.clone(), "meets".into(), "configuration".into()],
                rows: frontier_rows,
            },
            crate::report_html::Table {
                caption: "every candidate",
                header: std::iter::once("#".to_string()).chain(header).collect(),
                rows: rows.into_iter().enumerate().map(|(i, r)| std::iter::once(format!("#{i}")).chain(r).collect()).collect(),
            },
        ];
        file.writer().write_all(crate::report_html::page(&title, &summary, &svg, &tables).as_bytes()).context("writing --report")?;
        file.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_a_metric_and_a_statistic() {
        assert_eq!(Limit::parse("ttft_p99_ms"), Some(Limit::Latency { metric: "ttft", stat: "p99" }));
        assert_eq!(Limit::parse("e2e_mean_ms"), Some(Limit::Latency { metric: "e2e", stat: "mean" }));
        assert_eq!(Limit::parse("attainment_min"), Some(Limit::AttainmentMin));
        for bad in ["ttft_p99", "ttft_p98_ms", "latency_p99_ms", "ttft_ms"] {
            assert_eq!(Limit::parse(bad), None, "{bad}");
        }
        assert!(Limit::Latency { metric: "ttft", stat: "p99" }.holds(500.0, 500.0));
        assert!(!Limit::CompletedMin.holds(0.99, 1.0));
    }

    #[test]
    fn bad_plans_are_refused_by_field() {
        let ok = json!({"slo": {"ttft_p99_ms": 500}, "gpus": [{"hardware": "H100", "gpu_hour_cost": 4}], "replicas": [1, 2]});
        assert!(Plan::parse(ok.clone(), "p").is_ok());
        for (patch, needle) in [
            (json!({"slo": {"ttft_p98_ms": 5}}), "slo.ttft_p98_ms: unknown"),
            (json!({"slo": {"ttft_p99_ms": -5}}), "must be a positive number"),
            (json!({"slo": {"attainment_min": 0.9}}), "at least one latency limit"),
            (json!({"gpus": []}), "at least one entry"),
            (json!({"gpus": [{"hardware": "H100", "gpu_hour_cost": -1}]}), "gpu_hour_cost -1"),
            (json!({"gpus": [{"hardware": "H100", "price": 1}]}), "unknown field `price`"),
            (json!({"gpus": [{"hardware": "NOPE", "gpu_hour_cost": 1}]}), "gpus[0].hardware NOPE: unknown GPU; allowed: H100"),
            (json!({"replicas": [0]}), "at least 1"),
            (json!({"knobs": {"tp": [1, 2]}}), "knobs.tp: set by gpus"),
            (json!({"knobs": {"tensor_parallel_size": [1, 2]}}), "knobs.tensor_parallel_size: set by gpus"),
            (json!({"knobs": {"max-num-seqz": [1]}}), "max-num-seqz"),
        ] {
            let mut p = ok.clone();
            for (k, v) in patch.as_object().unwrap() {
                p[k] = v.clone();
            }
            let e = Plan::parse(p, "p").err().unwrap_or_else(|| panic!("{patch} accepted")).0;
            assert!(e.contains(needle), "{patch}: {e}");
        }
    }
}
