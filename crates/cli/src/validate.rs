//! `blis validate`: simulate real experiments and compare with what they measured.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use blis_calibrate::validate::compare::{ExperimentComparison, Metric, aggregate};
use blis_calibrate::validate::report::{CSV_HEADER, REQUESTS_CSV_HEADER, ReportContext, csv_rows, markdown, request_csv_rows, text};
use blis_calibrate::validate::suite::Suite;

use blis_scenario::deployment::{Server, choose_coefficients, hardware_mismatch};

use crate::error::bad_input;
use crate::output::{AtomicFile, warn};

/// Simulate real serving experiments and compare with their measurements.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  blis validate validation/vllm-h100\n  \
    blis validate path/to/one-experiment --latency-model unified-5 --coefficients my.yaml\n  \
    blis validate validation/vllm-h100 --report report.md --csv errors.csv --plots plots/")]
pub struct ValidateArgs {
    /// Experiment directories (inference-perf result directories), or directories holding them.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,

    #[command(flatten)]
    pub definitions: crate::definitions::DefinitionArgs,

    /// Latency model: roofline, blackbox, trained-physics, unified-5, physics-normalized. [default: the bundled default set's]
    #[arg(long)]
    pub latency_model: Option<String>,

    /// Coefficient file (YAML or JSON). [default: the bundled set for --latency-model, or the bundled default]
    #[arg(long, value_name = "FILE")]
    pub coefficients: Option<PathBuf>,

    /// Write the full report as Markdown.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Write one row per (experiment, stage, metric): experiment,model,status,stage,metric,predicted,actual,ape.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Write every recorded request (requests.csv, or inference-perf's per-request report), measured next to simulated:
    /// experiment,request,stage,send_s,input_tokens,actual_ok,actual_ttft_ms,actual_e2e_ms,predicted_ok,predicted_ttft_ms,predicted_e2e_ms.
    #[arg(long, value_name = "FILE")]
    pub requests_csv: Option<PathBuf>,

    /// Write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,

    /// Seed of the simulated prompt contents and arrival draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Fail (exit 1) when the mean E2E APE over active stages exceeds this percentage.
    #[arg(long, value_name = "PCT")]
    pub max_e2e_mape: Option<f64>,

    /// Print only the aggregate table.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `blis validate`.
pub fn execute(args: ValidateArgs) -> anyhow::Result<()> {
    let chosen = choose_coefficients(args.latency_model.as_deref(), args.coefficients.as_deref(), None, None)?;
    if let Some(t) = args.max_e2e_mape
        && !(t.is_finite() && t >= 0.0)
    {
        return Err(bad_input!("--max-e2e-mape {t}: must be a non-negative percentage").into());
    }
    let (suite, mut failed) = Suite::load_each(&args.dirs, &args.definitions.load()?).map_err(|e| bad_input!("{e}"))?;
    warn(&suite.warnings());
    // Once per GPU and TP degree the suite ran on, as `blis run` says it.
    let mut gpus: Vec<&Server> = suite.cases.iter().map(|c| &c.setup.server).collect();
    gpus.sort_by(|a, b| (&a.gpu_name, a.tp).cmp(&(&b.gpu_name, b.tp)));
    gpus.dedup_by(|a, b| a.gpu_name == b.gpu_name && a.tp == b.tp);
    warn(&gpus.iter().filter_map(|s| hardware_mismatch(&chosen.set, &s.gpu, &s.gpu_name, s.tp, &chosen.origin)).collect::<Vec<_>>());
    let mut report_file = args.report.as_deref().map(|p| AtomicFile::create("report", p)).transpose()?;
    let mut csv_file = args.csv.as_deref().map(|p| AtomicFile::create("csv", p)).transpose()?;
    let mut requests_file = args.requests_csv.as_deref().map(|p| AtomicFile::create("requests-csv", p)).transpose()?;
    let plot_dir = args.plots.as_deref().map(crate::plot::PlotDir::create).transpose()?;
    crate::output::print_warnings();

    let started = Instant::now();
    let (comparisons, unsimulated) = suite.validate_each(&chosen.set, args.seed);
    failed.extend(unsimulated);
    warn(&comparisons.iter().flat_map(ExperimentComparison::warnings).collect::<Vec<_>>());
    let wall_s = started.elapsed().as_secs_f64();
    // One broken experiment must not hide the others: each failure is
    // reported, the rest are compared, and the exit code says it happened.
    let report_failures = |failed: &[blis_calibrate::error::ExperimentError]| {
        failed.iter().for_each(|e| eprintln!("error: {}", crate::error::tidy_numbers(&e.to_string())))
    };
    if comparisons.is_empty()
        && let Some(last) = failed.pop()
    {
        report_failures(&failed);
        return Err(bad_input!("{last}").into());
    }

    let out = text(&comparisons);
    let mut stdout = std::io::stdout().lock();
    if args.quiet {
        let aggregate_only = out.rsplit_once("== Aggregate").map_or(out.as_str(), |(_, tail)| tail);
        writeln!(stdout, "== Aggregate{aggregate_only}").context("writing to stdout")?;
    } else {
        write!(stdout, "{out}").context("writing to stdout")?;
    }
    let experiments = |n: usize| if n == 1 { "1 experiment".to_string() } else { format!("{n} experiments") };
    writeln!(
        stdout,
        "\n{} simulated in {wall_s:.2} s with {} ({})",
        experiments(comparisons.len()),
        chosen.set.latency_model,
        chosen.origin
    )
    .context("writing to stdout")?;
    if !failed.is_empty() {
        writeln!(stdout, "{} could not be validated (errors on stderr)", experiments(failed.len())).context("writing to stdout")?;
    }

    if let Some(f) = csv_file.as_mut() {
        write_csv(f, "--csv", CSV_HEADER, csv_rows(&comparisons))?;
    }
    if let Some(f) = requests_file.as_mut() {
        write_csv(f, "--requests-csv", REQUESTS_CSV_HEADER, request_csv_rows(&comparisons))?;
    }
    if let Some(f) = report_file.as_mut() {
        let mut command = String::from("blis validate");
        for d in &args.dirs {
            command += &format!(" {}", d.display());
        }
        if let Some(m) = &args.latency_model {
            command += &format!(" --latency-model {m}");
        }
        if let Some(c) = &args.coefficients {
            command += &format!(" --coefficients {}", c.display());
        }
        command += &format!(" --report {}", args.report.as_deref().map_or(String::new(), |p| p.display().to_string()));
        let ctx = ReportContext { coefficients: format!("{} ({})", chosen.set.latency_model, chosen.origin), command, seed: args.seed };
        write!(f.writer(), "{}", markdown(&comparisons, &ctx)).context("writing --report")?;
    }
    if let Some(dir) = &plot_dir {
        crate::plot::validate::write_all(dir, &comparisons)?;
    }
    for f in [csv_file, requests_file, report_file].into_iter().flatten() {
        f.commit()?;
    }
    if !failed.is_empty() {
        report_failures(&failed);
        return Err(bad_input!(
            "{} of {} experiments could not be validated (errors above); the others were compared",
            failed.len(),
            failed.len() + comparisons.len()
        )
        .into());
    }
    if let Some(limit) = args.max_e2e_mape
        && let Some(e2e) = aggregate(&comparisons).into_iter().find(|a| a.metric == Metric::E2eMean)
        && e2e.mean_ape > limit
    {
        anyhow::bail!("mean E2E APE over active stages is {:.2}%, above --max-e2e-mape {limit}%", e2e.mean_ape);
    }
    Ok(())
}

/// Writes `header` and `rows`, one per line, into the file of `flag`.
fn write_csv(f: &mut AtomicFile, flag: &str, header: &str, rows: Vec<String>) -> anyhow::Result<()> {
    let w = f.writer();
    for line in std::iter::once(header).chain(rows.iter().map(String::as_str)) {
        writeln!(w, "{line}").with_context(|| format!("writing {flag}"))?;
    }
    Ok(())
}
