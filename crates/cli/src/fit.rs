//! `blis fit`: learn latency coefficients from real experiments.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use blis_calibrate::fit::observed::ObservedRun;
use blis_calibrate::fit::otel::{OtelTrace, fit_steps};
use blis_calibrate::fit::{
    DEFAULT_REFINE_EVALS, DEFAULT_ROUNDS, FitError, FitFrame, FitOptions, Measured, PRIOR_WEIGHT, PriorOverride, fit, with_overrides,
};
use blis_calibrate::validate::suite::Suite;
use blis_net::client::{RunClock, rfc3339_utc};
use blis_physics::coefficients::{CoefficientSet, Provenance};
use blis_physics::latency::ModelKind;
use blis_scenario::Scenario;
use blis_scenario::knobs::KnobValues;
use blis_workload::trace_v2::trace_csv;

use crate::error::bad_input;
use crate::output::{AtomicFile, OutputArgs};

/// Learn latency-model coefficients from real experiments.
#[derive(clap::Args, Debug)]
#[command(
    mut_arg("output", |a| a.value_name("FILE").help("Write the coefficient file here instead of stdout.")),
    mut_arg("quiet", |a| a.help("No progress or fit summary on stderr (warnings still print)."))
)]
#[command(after_help = "Examples:\n  blis fit validation/vllm-h100 --latency-model trained-physics -o trained-physics-h100.yaml\n  \
    blis fit validation/vllm-h100 --latency-model trained-physics --holdout-model Llama-2-70b-hf -o holdout.yaml\n  \
    blis fit --trace traces/run1 --trace traces/run2 -o my-server.yaml      # traces recorded by blis observe")]
pub struct FitArgs {
    /// Experiment directories (inference-perf results), or directories holding them.
    #[arg(value_name = "DIR", required_unless_present_any = ["trace", "otel"])]
    pub dirs: Vec<PathBuf>,

    /// A trace recorded by `blis observe` (PREFIX, or PREFIX.csv with PREFIX.header.yaml beside it), replayed
    /// on the server its header records; repeat for several. Its successful requests are fitted in windows of 100.
    #[arg(long, value_name = "PREFIX")]
    pub trace: Vec<PathBuf>,

    /// Fit by teacher forcing from vLLM's OpenTelemetry journey and step traces (OTLP/JSON lines, as a collector's
    /// file exporter writes them, or `blis run --otel-output`): β from every sampled step's duration and batch, α
    /// from the request journeys. Give the server with --model, --hardware and --tp. It simulates nothing, so
    /// --seed, --rounds and --refine-evals do not apply.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dirs", "trace", "holdout_model", "seed", "rounds", "refine_evals"])]
    pub otel: Option<PathBuf>,

    /// With --otel: the model served (HuggingFace id). [default: the trace's gen_ai.request.model]
    #[arg(long, value_name = "ID", requires = "otel")]
    pub model: Option<String>,

    /// With --otel: the tensor-parallel degree. [default: 1]
    #[arg(long, value_name = "N", requires = "otel")]
    pub tp: Option<u32>,

    /// With --otel: fit only the server whose resource has this `service.instance.id` (one instance of a
    /// `blis run --otel-output` cluster, or one pool of a disaggregated one). [default: every server in the file,
    /// all taken to be the --model/--hardware/--tp server]
    #[arg(long, value_name = "ID", requires = "otel")]
    pub otel_instance: Option<String>,

    #[command(flatten)]
    pub definitions: crate::definitions::DefinitionArgs,

    /// Model to fit: blackbox, trained-physics, unified-5, physics-normalized.
    #[arg(long, default_value = "trained-physics")]
    pub latency_model: String,

    /// Coefficients of the first simulation round (any model). Its GPU, where BLIS has that GPU's kernel efficiencies,
    /// is the one the fitted set is in terms of, with --otel too. [default: the published set for --latency-model, else
    /// the bundled default]
    #[arg(long, value_name = "FILE")]
    pub start: Option<PathBuf>,

    /// Leave this model's experiments out of training (HuggingFace id or the part after '/') and report their errors.
    #[arg(long, value_name = "NAME")]
    pub holdout_model: Option<String>,

    /// Simulation seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Stage-one rounds (simulate, then linear fit).
    #[arg(long, default_value_t = DEFAULT_ROUNDS)]
    pub rounds: usize,

    /// Stage-two (Nelder–Mead) objective evaluations; 0 skips stage two (the bundled sets used 150).
    #[arg(long, default_value_t = DEFAULT_REFINE_EVALS)]
    pub refine_evals: usize,

    /// Replace the physical prior of one coefficient: NAME=MEAN:SCALE (repeatable, once per NAME; MEAN in [0, 3.6e9], SCALE
    /// in [1e-6, 3.6e9]), e.g. weights=1.27:0.03 anchors the
    /// weight-read term at 1/0.786, the HBM efficiency the kernel profiles measure (blis kernels). trained-physics, unified-5.
    /// [default: time terms 1 ± 1, overheads 0 ± 100 µs, α 0 ± 10 ms; trained-physics's allreduce_call_us is one kernel's
    /// measured fixed cost, 7.7 ± 0.77 µs, and where the training GPU was profiled its per_layer_us is the GPU's
    /// kernels.layer_overhead_us ± 10 % (49.5 ± 4.95 on the H100) and prefill_kv, decode_kv 1/kernels.gemm_memory ± 10 %]
    #[arg(long, value_name = "NAME=MEAN:SCALE", value_parser = str::parse::<PriorOverride>)]
    pub prior: Vec<PriorOverride>,

    /// Date recorded as `provenance.fitted_at` (YYYY-MM-DD). [default: today, UTC]
    #[arg(long, value_name = "DATE")]
    pub fitted_at: Option<String>,

    #[command(flatten)]
    pub out: OutputArgs,
}

/// The `--prior` flags that reproduce `priors`.
fn prior_flags(priors: &[PriorOverride]) -> String {
    priors.iter().map(|p| format!(" --prior {}={}:{}", p.name, p.mean, p.scale)).collect()
}

/// Today's date (UTC) as YYYY-MM-DD.
pub(crate) fn today_utc() -> String {
    let mut date = rfc3339_utc(RunClock::start().start_unix_us());
    date.truncate(10);
    date
}

/// Whether `date` is a calendar date written YYYY-MM-DD.
fn is_calendar_date(date: &str) -> bool {
    let b = date.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r.clone()].iter().all(u8::is_ascii_digit).then(|| date[r].parse::<u32>().ok()).flatten();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(year), Some(month), Some(day)) = (digits(0..4), digits(5..7), digits(8..10)) else { return false };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// Progress and summary lines on stderr, each stamped with the seconds
/// since the fit started; none with `--quiet` (warnings still print).
struct Log {
    started: Instant,
    quiet: bool,
}

impl Log {
    fn line(&self, text: std::fmt::Arguments<'_>) {
        if !self.quiet {
            eprintln!("[{:7.1} s] {text}", self.started.elapsed().as_secs_f64());
        }
    }
}

/// Runs `blis fit`.
pub fn execute(args: FitArgs) -> anyhow::Result<()> {
    let kind: ModelKind = args.latency_model.parse().map_err(|e| bad_input!("--latency-model: {e}"))?;
    // Each round or evaluation simulates every experiment once (about a second for the shared runs).
    const MAX_SIMULATIONS: usize = 100_000;
    if args.rounds > MAX_SIMULATIONS || args.refine_evals > MAX_SIMULATIONS {
        return Err(bad_input!(
            "--rounds {} --refine-evals {}: each must be at most {MAX_SIMULATIONS} (each simulates every experiment once)",
            args.rounds,
            args.refine_evals
        )
        .into());
    }
    if args.rounds == 0 {
        return Err(bad_input!("--rounds 0: must be at least 1 (each round simulates, then fits)").into());
    }
    if let Some(d) = args.fitted_at.as_deref().filter(|d| !is_calendar_date(d)) {
        return Err(bad_input!("--fitted-at {d:?}: must be a date written YYYY-MM-DD").into());
    }
    if let Some(path) = &args.otel {
        return fit_otel(&args, kind, path);
    }
    // clap waives `requires = "otel"` when --otel would conflict with the
    // directories given, so these are checked here.
    let otel_only = [("--model", args.model.is_some()), ("--tp", args.tp.is_some()), ("--otel-instance", args.otel_instance.is_some())];
    if let Some((flag, _)) = otel_only.iter().find(|(_, given)| *given) {
        return Err(
            bad_input!("{flag} is for --otel: an experiment directory's or trace's own records name its model, TP and server").into()
        );
    }
    let start = start_set(&args, kind)?;
    let definitions = args.definitions.load()?;
    let suite =
        if args.dirs.is_empty() { Suite::default() } else { Suite::load(&args.dirs, &definitions).map_err(|e| bad_input!("{e}"))? };
    crate::output::warn(&suite.warnings());
    let given = KnobValues {
        model_config: definitions.model.clone(),
        hardware_config: definitions.gpu.clone(),
        moe_kernel_compile: definitions.moe_kernel_compile.clone(),
        ..KnobValues::default()
    };
    let traces = args
        .trace
        .iter()
        .map(|t| ObservedRun::load(&trace_csv(t), None, &given).map_err(|e| bad_input!("--trace {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let output = args.out.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    crate::output::print_warnings();
    let opts = FitOptions {
        kind,
        start,
        holdout_model: args.holdout_model.clone(),
        seed: args.seed,
        linear_rounds: args.rounds,
        refine_evals: args.refine_evals,
        prior_overrides: args.prior.clone(),
    };
    let started = Instant::now();
    let runs: Vec<&dyn Measured> =
        suite.cases.iter().map(|c| c as &dyn Measured).chain(traces.iter().map(|t| t as &dyn Measured)).collect();
    let log = Log { started, quiet: args.out.quiet };
    let outcome = fit(&runs, &opts, &mut |line| log.line(format_args!("{line}"))).map_err(|e| match e {
        FitError::Invalid(msg) => anyhow::Error::from(bad_input!("{msg}")),
        FitError::Experiment(e) => anyhow::Error::from(bad_input!("{e}")),
    })?;
    let mut set = outcome.set;
    let mut command: String =
        std::iter::once("blis fit".to_string()).chain(args.dirs.iter().map(|d| d.display().to_string())).collect::<Vec<_>>().join(" ");
    command += &format!(" --latency-model {kind} --seed {} --rounds {} --refine-evals {}", args.seed, args.rounds, args.refine_evals);
    for t in &args.trace {
        command += &format!(" --trace {}", t.display());
    }
    if let Some(p) = &args.start {
        command += &format!(" --start {}", p.display());
    }
    if let Some(m) = &args.holdout_model {
        command += &format!(" --holdout-model {m}");
    }
    command += &prior_flags(&args.prior);
    command += &args.definitions.command_flags();
    set.provenance.command = Some(command);
    set.provenance.fitted_at = Some(args.fitted_at.clone().unwrap_or_else(today_utc));
    log.line(format_args!(
        "done: fitting objective {:.3} after stage one, {:.3} after stage two; E2E MAPE + 0.3·TTFT MAPE on the training stages {:.3}",
        outcome.linear_loss, outcome.final_loss, outcome.train_loss
    ));
    write_set(&set, output)
}

/// Writes `set` to `output` (committed) or stdout.
pub(crate) fn write_set(set: &CoefficientSet, mut output: Option<AtomicFile>) -> anyhow::Result<()> {
    let yaml = format!("# Fitted by `blis fit`; regenerate with provenance.command.\n{}", set.to_yaml());
    match output.as_mut() {
        Some(f) => f.writer().write_all(yaml.as_bytes()).context("writing --output")?,
        None => std::io::stdout().lock().write_all(yaml.as_bytes()).context("writing to stdout")?,
    }
    if let Some(f) = output {
        f.commit()?;
    }
    Ok(())
}

/// `--start`, else the published set of `kind`, else the bundled default.
fn start_set(args: &FitArgs, kind: ModelKind) -> anyhow::Result<CoefficientSet> {
    Ok(match &args.start {
        Some(p) => CoefficientSet::load(p).map_err(|e| bad_input!("--start {e}"))?,
        None => CoefficientSet::bundled(&format!("{kind}-published")).unwrap_or_else(CoefficientSet::default_set),
    })
}

/// `blis fit --otel`: teacher-forced least squares on a journey and step
/// trace, in the terms of the GPU [`FitFrame`] chooses, as `blis fit` on
/// experiments and traces fits.
fn fit_otel(args: &FitArgs, kind: ModelKind, path: &Path) -> anyhow::Result<()> {
    let mut trace = OtelTrace::load(path).map_err(|e| bad_input!("--otel {e}"))?;
    if let Some(id) = &args.otel_instance
        && !trace.retain_instance(id)
    {
        let named: Vec<String> =
            trace.instances().iter().map(|n| if n.is_empty() { "(none)".to_string() } else { (*n).to_string() }).collect();
        return Err(bad_input!(
            "--otel-instance {id}: {} has no steps of that service.instance.id; it has {}",
            path.display(),
            named.join(", ")
        )
        .into());
    }
    let servers = trace.instances().len();
    let roles: std::collections::BTreeSet<&String> = trace.kv_roles.values().collect();
    if roles.len() > 1 {
        eprintln!(
            "warning: {} mixes disaggregated roles ({}); all its servers are fitted as one --model/--hardware/--tp server. \
             Fit one server at a time with --otel-instance ID",
            path.display(),
            trace.kv_roles.iter().map(|(i, r)| format!("{i}: {r}")).collect::<Vec<_>>().join(", ")
        );
    }
    let model = args
        .model
        .clone()
        .or_else(|| trace.model.clone())
        .ok_or_else(|| bad_input!("--otel {}: the trace names no model (gen_ai.request.model); pass --model", path.display()))?;
    let given = KnobValues {
        model: Some(model),
        hardware: args.definitions.hardware.clone(),
        tp: args.tp,
        model_config: args.definitions.model_config.clone(),
        hardware_config: args.definitions.hardware_config.clone(),
        moe_kernel_compile: args.definitions.moe_kernel_compile.clone(),
        ..KnobValues::default()
    };
    // A model the trace named is blamed on the trace, not on a flag not given.
    let blame = |e: String| match &args.model {
        Some(_) => e,
        None => e.replacen("--model ", &format!("--otel {}: the trace's gen_ai.request.model ", path.display()), 1),
    };
    let server =
        Scenario::from_values(&given, Vec::new()).resolve().map_err(|e| bad_input!("{}", blame(e.to_string())))?.primary().server.clone();
    let frame = FitFrame::of([&server], &start_set(args, kind)?);
    let basis = frame
        .empty_set(kind)
        .basis(&server.model, &server.gpu, server.tp, &server.instance)
        .map_err(|e| bad_input!("--otel {}: {e}", path.display()))?
        .ok_or_else(|| bad_input!("--latency-model {kind}: has no coefficients to fit"))?;
    let priors = with_overrides(kind, basis.as_ref(), frame.kernels([&server]).as_ref(), &args.prior)
        .map_err(|e| bad_input!("{e}"))?
        .ok_or_else(|| bad_input!("--otel fits trained-physics or unified-5 (models with physical priors), not {kind}"))?;
    let output = args.out.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    let log = Log { started: Instant::now(), quiet: args.out.quiet };
    if let Some(note) = frame.note() {
        log.line(format_args!("{note}"));
    }
    let found = fit_steps(&trace, basis.as_ref(), &priors, PRIOR_WEIGHT, &server.instance)
        .map_err(|e| bad_input!("--otel {}: {e}", path.display()))?;
    log.line(format_args!(
        "fitted β on {} steps of {servers} server{} ({} rebuilt from their counts, {} left out{}), α on {} journeys; step-time MAPE {:.2} %",
        found.steps_used,
        if servers == 1 { "" } else { "s" },
        found.steps_approximated,
        found.steps_without_batch,
        match found.steps_compiling {
            0 => String::new(),
            n => format!(", {n} compiling a MoE kernel left out"),
        },
        found.journeys_used,
        found.step_mape
    ));
    if found.journeys_without_handoff > 0 {
        eprintln!(
            "warning: {} of {} journeys have no HANDOFF_TO_CORE and are timed from QUEUED: α takes in their wait for the engine loop, which the simulation adds again",
            found.journeys_without_handoff, found.journeys_used
        );
    }
    if found.steps_approximated > 0 {
        match found.prefill_cv2 {
            Some(cv2) => {
                log.line(format_args!("rebuilt steps spread their prefill tokens by cv² = {cv2:.3}, from the steps with snapshots"))
            }
            None => eprintln!(
                "warning: no step has step.REQUEST_SNAPSHOT events, so rebuilt steps split their prefill tokens evenly (cv² = 0), \
                 which under-prices prefill attention when prompt lengths vary; sample some steps in rich mode"
            ),
        }
    }
    let mut command = format!("blis fit --otel {} --latency-model {kind} --model {}", path.display(), server.model_name);
    if let Some(tp) = args.tp {
        command += &format!(" --tp {tp}");
    }
    if let Some(id) = &args.otel_instance {
        command += &format!(" --otel-instance {id}");
    }
    command += &args.definitions.command_flags();
    command += &prior_flags(&args.prior);
    let mut set = CoefficientSet {
        latency_model: kind,
        alpha: found.alpha,
        beta: found.beta,
        provenance: Provenance {
            source: "blis fit --otel".into(),
            hardware: Some(frame.gpu.clone()),
            measured_on: frame.measured_on(),
            fitted_on: vec![path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())],
            loss: Some(found.step_mape),
            train_errors: [("step_time_mape".to_string(), found.step_mape)].into_iter().collect(),
            command: Some(command),
            fitted_at: Some(args.fitted_at.clone().unwrap_or_else(today_utc)),
            ..Provenance::default()
        },
    };
    // The trace's steps come from one server, which `--otel` cannot describe as expert-parallel.
    blis_calibrate::fit::tie_unseen_expert_dispatch(&mut set, false);
    write_set(&set, output)
}

#[cfg(test)]
mod tests {
    use super::is_calendar_date;

    #[test]
    fn fitted_at_takes_calendar_dates_only() {
        for ok in ["2026-11-21", "2024-02-29", "2000-02-29", "1999-12-31"] {
            assert!(is_calendar_date(ok), "{ok}");
        }
        for bad in
            ["yesterday", "2026-13-45", "2026-02-29", "1900-02-29", "2026-04-31", "2026-1-01", "2026-11-21\n", "+026-11-21", "2026-00-10"]
        {
            assert!(!is_calendar_date(bad), "{bad:?}");
        }
    }
}
