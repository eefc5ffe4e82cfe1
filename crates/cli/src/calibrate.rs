//! `blis calibrate`: how well a simulated replay matches the live server it
//! replays (per request and per distribution), as a table, JSON and plots.

use std::fmt::Write as _;
use std::path::PathBuf;

use std::path::Path;

use blis_calibrate::fit::observed::ObservedRun;
use blis_calibrate::fit::{DEFAULT_REFINE_EVALS, DEFAULT_ROUNDS, FitOptions, Measured, fit};
use blis_calibrate::validate::live::{CalibrationReport, Matched, MetricComparison, RealTrace, SimDocument, compare, match_requests};
use blis_scenario::deployment::choose_coefficients;
use blis_scenario::knobs::KnobValues;
use blis_workload::trace_v2::trace_csv;
use serde_json::{Map, Value};

use crate::error::bad_input;
use crate::output::{AtomicFile, out, outln, refuse_overwriting_inputs, write_json};
use crate::plot::PlotDir;
use crate::replay::RecordedServer;

/// Compare a recorded trace (blis observe) with its simulated replay (blis replay).
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis calibrate --trace traces/run1 --sim sim.json --report calib.json --plots calib/\n\n\
    Per request (TTFT, E2E, TPOT): MAPE with a bootstrap 95% interval, Pearson r, bias, P50/P90/P95/P99 errors,\n\
    two-sample KS test, QQ data and a quality rating; ITL as distributions. Warm-up requests, errors and timeouts\n\
    are excluded and counted.")]
pub struct CalibrateArgs {
    /// The recorded trace: PREFIX (PREFIX.csv, PREFIX.header.yaml, PREFIX.chunks.csv) or its CSV.
    #[arg(long, value_name = "PREFIX")]
    pub trace: PathBuf,

    /// The replay's JSON (`blis replay --output`).
    #[arg(long, value_name = "PATH")]
    pub sim: PathBuf,

    /// Write the calibration report (JSON) here.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,

    /// Write QQ and CDF plots (SVG) for TTFT, ITL and E2E into this directory.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,

    /// Leading request ids to exclude [default: the header's warm_up_requests].
    #[arg(long, value_name = "N")]
    pub warm_up: Option<u64>,

    /// Bootstrap resamples for the confidence intervals.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub resamples: usize,

    /// Seed of the bootstrap resampling.
    #[arg(long, default_value_t = 42, value_name = "N")]
    pub seed: u64,

    /// Close the loop: refit the latency model's coefficients on this trace (starting from the replay's),
    /// write them to FILE, replay the trace with them and calibrate again, showing the error drop.
    #[arg(long, value_name = "FILE")]
    pub refit: Option<PathBuf>,
}

fn metric_rows(out: &mut String, name: &str, m: &MetricComparison) {
    let ci = m.mape_ci95.map_or(String::new(), |c| format!(" [{:.1}, {:.1}]", c.low, c.high));
    let r = m.pearson_r.map_or("n/a".into(), |r| format!("{r:.3}"));
    let ks = m.ks.map_or("n/a".into(), |k| format!("D={:.3} p={:.3}", k.statistic, k.p_value));
    let _ = writeln!(out, "{name:<6}{:>6}{:>9.2}{:<16}{:>8}  {:<14}{:<24}{:?}", m.n, m.mape, ci, r, m.bias_direction, ks, m.quality);
    let e = &m.error_pct;
    let _ = writeln!(
        out,
        "{:<6}real p50/p90/p99 {:.2}/{:.2}/{:.2} ms, sim {:.2}/{:.2}/{:.2} ms, error {:+.1}/{:+.1}/{:+.1} %",
        "", m.real_ms.p50, m.real_ms.p90, m.real_ms.p99, m.sim_ms.p50, m.sim_ms.p90, m.sim_ms.p99, e.p50, e.p90, e.p99
    );
}

/// The human summary of a calibration report.
pub fn table(c: &CalibrationReport) -> String {
    let mut out = String::new();
    let s = &c.request_summary;
    let _ = writeln!(out, "{:=^96}", " BLIS calibration ");
    let _ = writeln!(out, "trace {} (time scale {})", c.trace, c.time_scale);
    let _ = writeln!(
        out,
        "requests: {} in trace, {} ok, {} errors, {} timeouts, {} warm-up excluded, {} unmatched, {} compared",
        s.total, s.ok, s.error, s.timeout, s.excluded_warm_up, s.unmatched, s.calibrated
    );
    let _ = writeln!(out, "{:<6}{:>6}{:>9}{:<16}{:>8}  {:<14}{:<24}quality", "", "n", "MAPE %", " [95% CI]", "r", "bias", "KS");
    for (name, m) in &c.metrics {
        metric_rows(&mut out, name, m);
    }
    if let Some(itl) = &c.itl {
        let ks = itl.ks.map_or("n/a".into(), |k| format!("D={:.3} p={:.3}", k.statistic, k.p_value));
        let _ = writeln!(
            out,
            "itl   real mean/p50/p99 {:.2}/{:.2}/{:.2} ms, sim {:.2}/{:.2}/{:.2} ms ({} vs {} gaps), {ks}",
            itl.real_ms.mean, itl.real_ms.p50, itl.real_ms.p99, itl.sim_ms.mean, itl.sim_ms.p50, itl.sim_ms.p99, itl.n_real, itl.n_sim
        );
    }
    let t = &c.throughput;
    let _ = writeln!(
        out,
        "output throughput: real {:.1} tok/s, sim {:.1} tok/s ({:+.1} %)",
        t.real_output_tokens_per_s, t.sim_output_tokens_per_s, t.error_pct
    );
    let _ = writeln!(
        out,
        "server config matched: {}",
        if c.config_match.matched.is_empty() { "none".into() } else { c.config_match.matched.join(", ") }
    );
    let _ = writeln!(
        out,
        "defaulted: {}",
        if c.config_match.defaulted.is_empty() { "none".into() } else { c.config_match.defaulted.join(", ") }
    );
    let _ = writeln!(out, "overall quality: {:?}", c.quality);
    for w in &c.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    let _ = writeln!(out, "{:=^96}", "");
    out
}

/// The knobs the replay was given (flags and files, not defaults or derived
/// values), from its report's `config`.
fn replay_knobs(sim: &SimDocument) -> anyhow::Result<KnobValues> {
    replay_knobs_where(sim, |_, source| matches!(source, "flag" | "file"))
}

/// The knobs of the replay's `config` whose name and source `keep` takes.
fn replay_knobs_where(sim: &SimDocument, keep: impl Fn(&str, &str) -> bool) -> anyhow::Result<KnobValues> {
    let given: Map<String, Value> = sim
        .config
        .iter()
        .filter(|(k, v)| keep(k, v.get("source").and_then(Value::as_str).unwrap_or_default()))
        .filter_map(|(k, v)| Some((k.clone(), v.get("value")?.clone())))
        .collect();
    Ok(KnobValues::from_yaml(Value::Object(given), "--sim config").map_err(|e| bad_input!("{e}"))?)
}

/// The knobs that choose the step-time model: the replay's business, not
/// the trace's, and left out of the check of the header (a coefficient file
/// the replay read need not be at hand to compare its results).
const LATENCY_KNOBS: [&str; 4] = ["latency-model", "coefficients", "alpha-coeffs", "beta-coeffs"];

/// The trace at `csv` checked as `blis replay` checks it, under the flags
/// the replay was given (from `sim`'s `config`, read from `sim_path`) and,
/// for knobs the header does not record, the values the replay took from
/// its `--config`: a header the replay refuses (`tp: 0`, a model BLIS does
/// not know, `hardware: 5`) is refused here. Returns the warning when the
/// replay simulated another model than the header records.
fn check_trace(sim: &SimDocument, sim_path: &Path, csv: &Path) -> anyhow::Result<Option<String>> {
    let recorded = RecordedServer::read(csv)?;
    let in_header = recorded.knobs.values.keys();
    let flags = replay_knobs_where(sim, |k, source| source == "flag" && k != "trace" && !LATENCY_KNOBS.contains(&k))?;
    let config = replay_knobs_where(sim, |k, source| source == "file" && !in_header.iter().any(|h| h == k) && !LATENCY_KNOBS.contains(&k))?;
    crate::replay::check(&recorded.replay(&flags, vec![(config, format!("--sim {} config", sim_path.display()))], csv))?;
    Ok(recorded.other_model(sim.config.get("model").and_then(|m| m.get("value")).and_then(Value::as_str)))
}

/// `--refit`: fits the replay's latency model on the trace, writes the set
/// to `output` (opened at `path`), replays with it and returns the new comparison.
fn refit(
    args: &CalibrateArgs,
    csv: &Path,
    real: &RealTrace,
    sim: &SimDocument,
    path: &Path,
    output: AtomicFile,
) -> anyhow::Result<(CalibrationReport, Matched)> {
    let given = replay_knobs(sim)?;
    let chosen = choose_coefficients(
        given.latency_model.as_deref(),
        given.coefficients.as_deref(),
        given.alpha_coeffs.as_deref(),
        given.beta_coeffs.as_deref(),
    )
    .map_err(|e| bad_input!("--sim config: {e}"))?;
    let kind = chosen.set.latency_model;
    // The replay's own seed (a default is not among the given knobs), so before and after differ only in coefficients.
    let seed = sim.config.get("seed").and_then(|v| v.get("value")).and_then(Value::as_u64).unwrap_or_default();
    let run = ObservedRun::of(csv, real, &given).map_err(|e| bad_input!("{e}"))?;
    let opts = FitOptions {
        kind,
        start: chosen.set,
        holdout_model: None,
        seed,
        linear_rounds: DEFAULT_ROUNDS,
        refine_evals: DEFAULT_REFINE_EVALS,
        prior_overrides: Vec::new(),
    };
    let outcome = fit(&[&run as &dyn Measured], &opts, &mut |line| eprintln!("refit: {line}")).map_err(|e| bad_input!("--refit: {e}"))?;
    let mut set = outcome.set;
    set.provenance.command =
        Some(format!("blis calibrate --trace {} --sim {} --refit {}", args.trace.display(), args.sim.display(), path.display()));
    set.provenance.fitted_at = Some(crate::fit::today_utc());
    crate::fit::write_set(&set, Some(output))?;
    let header = run.header();
    let (report, replay, _) =
        crate::replay::replay_detail(&run.scenario(&set, seed), csv, header.matched.clone(), header.ignored.clone(), true)?;
    let refitted = crate::replay::sim_document(&report, &replay)?;
    let matched = match_requests(real, &refitted);
    Ok((compare(&csv.display().to_string(), real, &refitted, &matched, args.seed, args.resamples), matched))
}

/// One line: how a metric's MAPE moved.
fn moved(name: &str, before: &CalibrationReport, after: &CalibrationReport) -> Option<String> {
    let (b, a) = (before.metrics.get(name)?, after.metrics.get(name)?);
    Some(format!("{name} MAPE {:.2} % → {:.2} %", b.mape, a.mape))
}

/// Runs `blis calibrate`.
pub fn execute(args: CalibrateArgs) -> anyhow::Result<()> {
    if args.resamples == 0 || args.resamples > 100_000 {
        return Err(bad_input!("--resamples {}: must be between 1 and 100000", args.resamples).into());
    }
    let csv = trace_csv(&args.trace);
    let real = RealTrace::load(&csv, args.warm_up).map_err(|e| bad_input!("{e}"))?;
    let sim = SimDocument::load(&args.sim).map_err(|e| bad_input!("{e}"))?;
    refuse_overwriting_inputs(&[("refit", args.refit.as_deref())], &[("trace", Some(&csv)), ("sim", Some(&args.sim))])?;
    let other_model = check_trace(&sim, &args.sim, &csv)?;
    // Every output is opened before the work, so an unusable path fails now, not after a refit.
    let refit_file = args.refit.as_deref().map(|p| AtomicFile::create("refit", p)).transpose()?;
    let mut report_file = args.report.as_deref().map(|p| AtomicFile::create("report", p)).transpose()?;
    let plot_dir = args.plots.as_deref().map(PlotDir::create).transpose()?;
    let matched = match_requests(&real, &sim);
    let mut report = compare(&csv.display().to_string(), &real, &sim, &matched, args.seed, args.resamples);
    report.warnings.extend(other_model.clone());
    out!("{}", table(&report))?;
    let (report, matched) = match (&args.refit, refit_file) {
        (Some(path), Some(file)) => {
            let (mut after, after_matched) = refit(&args, &csv, &real, &sim, path, file)?;
            after.warnings.extend(other_model);
            outln!("after refitting on this trace (coefficients in {}):", path.display())?;
            out!("{}", table(&after))?;
            let lines: Vec<String> = ["e2e", "ttft", "tpot"].iter().filter_map(|m| moved(m, &report, &after)).collect();
            outln!("refit: {}", lines.join(", "))?;
            (after, after_matched)
        }
        _ => (report, matched),
    };
    if let Some(f) = report_file.as_mut() {
        write_json(&report, Some(f))?;
    }
    if let Some(f) = report_file {
        f.commit()?;
    }
    if let Some(dir) = &plot_dir {
        let samples: Vec<(&str, Vec<f64>, Vec<f64>)> =
            matched.samples.iter().filter(|m| m.metric != "tpot").map(|m| (m.metric, m.real_ms.clone(), m.sim_ms.clone())).collect();
        crate::plot::calibrate::write_all(dir, &report, &samples)?;
    }
    Ok(())
}
