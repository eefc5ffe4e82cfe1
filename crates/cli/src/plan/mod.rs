//! `blis plan`: the cheapest deployment that meets an SLO.
//!
//! Candidates are every fleet shape the plan allows × point of an optional
//! knob grid. A shape is aggregated (a GPU offer × TP degree × replica
//! count) or disaggregated (a prefill pool and a decode pool, each its own
//! offer, TP degree and replica count: xPyD). Each candidate is first
//! checked without simulating:
//!
//! 1. **Fit**: vLLM's rules for each pool's server (TP divides the heads,
//!    the weights and one request's KV fit in GPU memory), as `blis run`
//!    applies them; a candidate that fails is pruned.
//! 2. **Roofline**: with the workload given by `--rate`, `--prompt-tokens`
//!    and `--output-tokens` (not a spec or trace), a candidate with a pool
//!    whose GPUs, at their peak FLOP/s and HBM bandwidth, could not carry
//!    its share of the offered tokens (a serving pool: prompts and outputs;
//!    a prefill pool: prompts; a decode pool: outputs) is pruned:
//!    `rate × tokens × FLOPs/token > replicas × TP × peak`, or `rate ×
//!    output > replicas × max-num-seqs × TP × HBM / active weight bytes` (a
//!    decode step reads the active weights at least once). Both are
//!    optimistic bounds, so no candidate that could meet the SLO is pruned.
//!
//! The rest are simulated on every core, and a candidate meets the SLO when
//! every limit of the plan's `slo` section holds. The answer is the
//! cheapest that does; the frontier is every simulated candidate (of either
//! kind) within every other limit that no other such beats on both cost
//! and the first limit's metric. For
//! comparison the plan also names what a throughput-only analytical
//! estimator would pick: the cheapest candidate whose pools carry the rate
//! at the spec's MFU.

mod file;
mod roofline;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use blis_scenario::Scenario;
use blis_scenario::knobs::{KnobValues, Source};
use blis_scenario::sweep::{BaseKnobs, field, run_point};
use rayon::prelude::*;

use crate::error::bad_input;
use crate::sweep::read_inputs;
use file::{Candidate, Limit, Plan, SIZED_BY_THE_PLAN, Shape};
use roofline::PoolRoofline;

/// Find the cheapest deployment (GPU, TP, replicas, aggregated or prefill/decode pools, knobs) that meets an SLO for a workload.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  blis plan --model meta-llama/llama-3.1-8b-instruct --rate 40 --num-requests 2000 --plan examples/plan/plan.yaml\n\n\
    plan.yaml:\n    slo: {ttft_p99_ms: 1000, itl_p99_ms: 60}\n    gpus:\n      - {hardware: H100, gpu_hour_cost: 4.0}\n      - {hardware: A100-80GB, gpu_hour_cost: 2.2}\n    tp: [1, 2]\n    replicas: [1, 2, 3, 4]\n    disaggregated:            # optional: xPyD candidates\n      prefill: {replicas: [1, 2], tp: [1, 2]}\n      decode: {replicas: [1, 2, 4]}\n    knobs: {max-num-seqs: [128, 256]}"
)]
pub struct PlanArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// A knob file every candidate starts from (as --config); flags win over it.
    #[arg(long, value_name = "PATH", help_heading = "Plan")]
    pub base: Option<PathBuf>,

    /// The SLO and the candidates: `slo`, `gpus` (hardware, gpu_hour_cost), `tp`, `replicas`, `disaggregated`, `knobs`.
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

/// Why no candidate meets the SLO, in one line: every candidate pruned, or
/// the limit that binds (one no candidate meets alone, with the best value
/// reached), or, when each limit alone is met by some candidate, the
/// candidate that misses the fewest and what it misses.
fn why_infeasible(plan: &Plan, candidates: &[Candidate], verdicts: &[Verdict]) -> String {
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
                Some(format!("; the first, {}: {why}", plan.describe(c)))
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
                plan.describe(&candidates[best])
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
            plan.describe(&candidates[closest])
        );
    }
    format!(
        "no candidate meets every limit at once (each alone is met by some); the closest, {}, misses {}",
        plan.describe(&candidates[closest]),
        missed.join(", ")
    )
}

/// Refuses flags or a base file that size the fleet: the plan's candidates do.
fn refuse_sizing(flags: &KnobValues, base: &Option<BaseKnobs>) -> Result<(), crate::error::BadInput> {
    let given = Scenario::from_values(flags, base.iter().cloned().collect());
    for knob in SIZED_BY_THE_PLAN {
        let by = match given.knobs.source(knob) {
            Source::Flag => format!("--{}", knob.flag()),
            Source::File => format!("{}: {}", base.as_ref().map_or("the base file", |(_, origin)| origin.as_str()), knob.flag()),
            Source::Default | Source::Derived => continue,
        };
        return Err(bad_input!("{by}: the plan sizes the fleet (its replicas and disaggregated sections); drop it"));
    }
    Ok(())
}

/// Fit and roofline, without simulating: the bounds of each pool (none
/// when the workload is not given by rate and lengths), or why the
/// candidate is pruned.
fn check(
    plan: &Plan,
    c: &Candidate,
    flags: &KnobValues,
    base: &Option<BaseKnobs>,
    origin: &str,
) -> Result<Option<Vec<PoolRoofline>>, Verdict> {
    let values = KnobValues::from_yaml(serde_json::Value::Object(plan.point_of(c)), origin)
        .map_err(|e| Verdict::DoesNotFit(e.to_string()))?
        .or(flags.clone());
    let scenario = Scenario::from_values(&values, base.iter().cloned().collect());
    let fleet = scenario.fleet().map_err(|e| Verdict::DoesNotFit(e.to_string()))?;
    let roofs: Option<Vec<PoolRoofline>> = fleet.pools.iter().map(|p| PoolRoofline::of(p, &scenario.knobs)).collect();
    match roofs.as_deref().and_then(roofline::prune) {
        Some(why) => Err(Verdict::Roofline(why)),
        None => Ok(roofs),
    }
}

/// Simulates a candidate that passed [`check`].
fn simulate(plan: &Plan, c: &Candidate, flags: &KnobValues, base: &Option<BaseKnobs>) -> Verdict {
    match run_point(&plan.point_of(c), flags, base) {
        Ok(r) => {
            let values: Vec<f64> = plan.slo.iter().map(|(_, l, _)| l.value(&r)).collect();
            // A deployment that completes nothing is never the answer, whatever completed_min allows.
            let meets = r.summary.requests.completed > 0 && plan.slo.iter().zip(&values).all(|((_, l, bound), &v)| l.holds(v, *bound));
            Verdict::Simulated(values, meets)
        }
        Err(e) => Verdict::Failed(e),
    }
}

/// The CSV's (and the report's) columns.
fn header(plan: &Plan) -> Vec<String> {
    let mut header = plan.shape_columns();
    header.extend(plan.knobs.iter().flat_map(|g| g.columns()).map(str::to_string));
    header.extend(["cost_per_hour".to_string(), "status".into()]);
    header.extend(plan.slo.iter().map(|(k, _, _)| k.clone()));
    header.extend(["meets_slo".to_string(), "reason".into()]);
    header
}

/// A candidate's cells under [`header`].
fn row(plan: &Plan, c: &Candidate, v: &Verdict) -> Vec<String> {
    let mut row = plan.shape_cells(c);
    row.extend(
        plan.knobs.iter().flat_map(|g| g.columns()).map(|k| c.knobs[k].as_str().map_or_else(|| c.knobs[k].to_string(), str::to_string)),
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
    refuse_sizing(&flags, &base)?;
    let mut output = args.output.as_deref().map(|p| crate::output::AtomicFile::create("output", p)).transpose()?;
    let report = args.report.as_deref().map(|p| crate::output::AtomicFile::create("report", p)).transpose()?;

    let candidates = plan.candidates();
    let checks: Vec<Result<Option<Vec<PoolRoofline>>, Verdict>> =
        candidates.iter().map(|c| check(&plan, c, &flags, &base, &origin)).collect();
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
                Ok(_) => simulate(&plan, c, &flags, &base),
            })
            .collect()
    });

    // Every candidate, as the CSV and the report show it.
    let header = header(&plan);
    let rows: Vec<Vec<String>> = candidates.iter().zip(&verdicts).map(|(c, v)| row(&plan, c, v)).collect();
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
    let metric = |i: usize| match &verdicts[i] {
        Verdict::Simulated(values, _) => values[0],
        _ => f64::NAN,
    };
    // By cost, then the first limit's metric: of two that cost the same, the better is the answer.
    let by_cost_then_metric = |&a: &usize, &b: &usize| {
        candidates[a].cost_per_hour.total_cmp(&candidates[b].cost_per_hour).then(metric(a).total_cmp(&metric(b))).then(a.cmp(&b))
    };
    let mut simulated: Vec<usize> = (0..candidates.len()).filter(|&i| matches!(verdicts[i], Verdict::Simulated(..))).collect();
    simulated.sort_by(by_cost_then_metric);
    let meets = |i: &&usize| matches!(verdicts[**i], Verdict::Simulated(_, true));
    let answer =
        |i: usize| format!("{}: ${:.2}/h, {} {:.1}", plan.describe(&candidates[i]), candidates[i].cost_per_hour, plan.slo[0].0, metric(i));
    match simulated.iter().find(meets) {
        Some(&i) => summary.push(format!("cheapest meeting the SLO: {}", answer(i))),
        None => return Err(bad_input!("{}", why_infeasible(&plan, &candidates, &verdicts)).into()),
    }
    // With both kinds on offer, the best of each, as aiconfigurator reports them.
    if plan.has_disaggregated() && candidates.iter().any(|c| matches!(c.shape, Shape::Aggregated(_))) {
        for (kind, disaggregated) in [("aggregated", false), ("disaggregated", true)] {
            let of_kind = |i: &&usize| matches!(candidates[**i].shape, Shape::Disaggregated { .. }) == disaggregated;
            let best = simulated.iter().filter(of_kind).find(meets);
            summary.push(match best {
                Some(&i) => format!("cheapest {kind}: {}", answer(i)),
                None => format!("cheapest {kind}: none of the {} simulated meets the SLO", simulated.iter().filter(of_kind).count()),
            });
        }
    }
    let analytical =
        (0..candidates.len()).filter(|&i| matches!(&checks[i], Ok(Some(pools)) if roofline::carries_at_mfu(pools))).min_by(by_cost);
    match analytical {
        Some(i) => summary.push(format!(
            "a throughput-only analytical estimate (prefill at mfu_prefill, decode at mfu_decode or HBM) would pick: {}: ${:.2}/h{}",
            plan.describe(&candidates[i]),
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
    // The frontier: of the simulated candidates within every other limit,
    // those no other beats on both cost and the first limit (by cost, then
    // the metric, so only the best of equal cost can pass).
    let within_the_others = |i: &usize| match &verdicts[*i] {
        Verdict::Simulated(values, _) => plan.slo.iter().zip(values).skip(1).all(|((_, l, bound), &v)| l.holds(v, *bound)),
        _ => false,
    };
    let eligible: Vec<usize> = simulated.iter().copied().filter(within_the_others).collect();
    let mut best = f64::INFINITY;
    let frontier: Vec<usize> = eligible
        .iter()
        .copied()
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
            vec![
                format!("#{i}"),
                format!("{:.2}", candidates[i].cost_per_hour),
                format!("{:.1}", metric(i)),
                (if meets(&&i) { "yes" } else { "no" }).to_string(),
                plan.describe(&candidates[i]),
            ]
        })
        .collect();
    for line in &summary {
        println!("{line}");
    }
    println!("frontier (cost against {}, of the candidates within every other limit):", plan.slo[0].0);
    println!("  {:>10}  {:>14}  {:<5}  configuration", "$/h", plan.slo[0].0, "meets");
    for r in &frontier_rows {
        println!("  {:>10}  {:>14}  {:<5}  {}", r[1], r[2], r[3], r[4]);
    }
    if let Some(file) = output {
        file.commit()?;
    }
    if let Some(mut file) = report {
        let points: Vec<(f64, f64, String)> = eligible.iter().map(|&i| (candidates[i].cost_per_hour, metric(i), format!("#{i}"))).collect();
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
