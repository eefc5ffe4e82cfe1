//! `blis run`: simulate one deployment on a workload and report.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use blis_cluster::trace::DecisionSink;
use blis_engine::instance::Fanout;
use blis_workload::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};

use crate::breakdown::{ClientLatencyReport, GroupObservers};
use crate::cluster::{ClusterSetup, TraceWriter};
use crate::error::{BadInput, bad_input};
use crate::knobs::{KnobArgs, KnobFile, Knobs};
use crate::output::{AtomicFile, Progress, RequestCsv, peak_rss_mib, refuse_overwriting_inputs};
use crate::report::{DeploymentInfo, RunReport, SCHEMA_VERSION, SimulatorInfo, table};
use crate::setup::{Deployment, seconds};
use crate::workload_source::{self, WorkloadSource};

/// Simulate a vLLM deployment serving a workload.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  blis run --model meta-llama/llama-3.1-8b-instruct\n  \
    blis run --model meta-llama/llama-3.1-8b-instruct --rate 10 --num-requests 2000 --prompt-tokens 512 \
    --output-tokens 256 --max-num-seqs 256 --max-num-batched-tokens 2048 --seed 7 --output results.json")]
pub struct RunArgs {
    #[command(flatten)]
    pub knobs: KnobArgs,

    /// Read knob values from a YAML file whose keys are the flag names
    /// (e.g. `max-num-seqs: 128`); flags given on the command line win.
    #[arg(long, value_name = "PATH", help_heading = "Run")]
    pub config: Option<PathBuf>,

    /// Write the JSON report to this file instead of stdout.
    #[arg(long, short, value_name = "PATH", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// Write one CSV row per request to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub requests_csv: Option<PathBuf>,

    /// Write the decision trace (one JSON line per admission and routing
    /// decision, then a summary line) to this file; implies --trace-level decisions.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub trace_output: Option<PathBuf>,

    /// Do not print the summary table (or progress) on stderr.
    #[arg(long, short, help_heading = "Output")]
    pub quiet: bool,
}

fn length(mean: Option<f64>, stdev: Option<f64>, min: Option<u32>, max: Option<u32>) -> LengthSpec {
    LengthSpec { mean: mean.unwrap_or(1.0), stdev: stdev.unwrap_or(0.0), min: min.unwrap_or(1), max: max.unwrap_or(u32::MAX) }
}

/// The synthetic workload the knobs describe.
pub fn synthetic_workload(k: &Knobs) -> Result<SyntheticSpec, BadInput> {
    let arrival = match k.arrival.value.as_deref().unwrap_or("poisson") {
        "poisson" => ArrivalProcess::Poisson,
        "constant" => ArrivalProcess::Constant,
        other => return Err(bad_input!("--arrival {other}: unknown; allowed: poisson, constant")),
    };
    let spec = SyntheticSpec {
        rate_per_s: k.rate.value.unwrap_or(f64::NAN),
        arrival,
        num_requests: k.num_requests.value.unwrap_or(0),
        prompt: length(k.prompt_tokens.value, k.prompt_tokens_stdev.value, k.prompt_tokens_min.value, k.prompt_tokens_max.value),
        output: length(k.output_tokens.value, k.output_tokens_stdev.value, k.output_tokens_min.value, k.output_tokens_max.value),
        prefix_tokens: k.prefix_tokens.value.unwrap_or(0),
        prefix_groups: k.prefix_groups.value.unwrap_or(1),
        seed: k.seed.value.unwrap_or(0),
    };
    spec.validate().map_err(|e| bad_input!("{e}"))?;
    Ok(spec)
}

/// Runs `blis run`.
pub fn execute(args: RunArgs) -> anyhow::Result<()> {
    let (file, origins) = crate::knobs::load_config(args.config.as_deref())?;
    let knobs = Knobs::resolve(&args.knobs, &file);
    run_with(&args, &file).map_err(|e| crate::knobs::blame_files(e, &knobs, &origins))
}

fn run_with(args: &RunArgs, file: &KnobFile) -> anyhow::Result<()> {
    let mut output = args.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    let (report, wall_s) = simulate(args, file, None)?;
    write_json(&report, output.as_mut())?;
    if let Some(f) = output {
        f.commit()?;
    }
    print_table(&report, args.quiet, wall_s);
    Ok(())
}

/// Writes a report as pretty JSON to `output`, or stdout.
pub fn write_json<T: serde::Serialize>(report: &T, output: Option<&mut AtomicFile>) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report).context("serialising the report")?;
    match output {
        Some(f) => writeln!(f.writer(), "{json}").context("writing --output"),
        None => writeln!(std::io::stdout().lock(), "{json}").context("writing the report to stdout"),
    }
}

/// The human table and timing line on stderr, unless `quiet`.
pub fn print_table(report: &RunReport, quiet: bool, wall_s: f64) {
    if !quiet {
        eprint!("{}", table(report));
        let memory = peak_rss_mib().map_or(String::new(), |m| format!(", peak memory {m:.1} MiB"));
        eprintln!("Simulated in {wall_s:.3} s wall time{memory}.");
    }
}

/// Resolves the knobs (flags over `file` over defaults), runs the
/// simulation and builds the report; writes `--requests-csv` and
/// `--trace-output` (only once everything succeeded). `extra` sees every
/// engine callback too. Returns the report and the wall time, seconds.
pub fn simulate(args: &RunArgs, file: &KnobFile, extra: Option<&mut dyn blis_engine::instance::Observer>) -> anyhow::Result<(RunReport, f64)> {
    let knobs = Knobs::resolve(&args.knobs, file);
    refuse_overwriting_inputs(
        &[("output", args.output.as_deref()), ("requests-csv", args.requests_csv.as_deref()), ("trace-output", args.trace_output.as_deref())],
        &[
            ("config", args.config.as_deref()),
            ("workload-spec", knobs.workload_spec.value.as_deref()),
            ("trace", knobs.trace.value.as_deref()),
            ("policy-config", knobs.policy_config.value.as_deref()),
            ("coefficients", knobs.coefficients.value.as_deref()),
            ("model-config", knobs.model_config.value.as_deref()),
            ("hardware-config", knobs.hardware_config.value.as_deref()),
        ],
    )?;
    let mut config = knobs.report();
    let mut deployment = Deployment::resolve(&knobs, &mut config)?;
    let WorkloadSource { mut source, labels, expected_requests, seed, stages, mut client_latency, client_timeout } =
        workload_source::resolve(&knobs, &mut config)?;
    if let (None, Some(t)) = (deployment.instance.client_timeout, client_timeout) {
        deployment.instance.client_timeout = Some(t);
        crate::knobs::report_entry(&mut config, "client-timeout", &t.as_secs_f64(), crate::knobs::Source::Derived);
    }
    let horizon = knobs.horizon.value.map(|s| seconds("horizon", s)).transpose()?;
    let cluster = ClusterSetup::resolve(&knobs, &deployment, &mut config, args.trace_output.is_some(), &labels)?;

    // Open outputs before simulating so a bad path fails fast, but only move
    // them into place once everything succeeded.
    let mut csv = args.requests_csv.as_deref().map(RequestCsv::create).transpose()?;
    let mut trace = match (&args.trace_output, cluster.trace) {
        (Some(path), true) => Some(TraceWriter::create(path, cluster.config.labels.clone())?),
        _ => None,
    };

    // Every run is a cluster run (one instance by default): one code path.
    let wall = std::time::Instant::now();
    let mut sim = cluster.build(trace.as_mut().map(|t| t as &mut dyn DecisionSink))?;
    let mut progress = Progress::new(expected_requests, args.quiet);
    let mut groups = GroupObservers::new(&labels, stages);
    let end = {
        let mut observers: Vec<&mut dyn blis_engine::instance::Observer> = vec![&mut progress];
        if let Some(c) = csv.as_mut() {
            observers.push(c);
        }
        if let Some(c) = client_latency.as_mut() {
            observers.push(c);
        }
        if let Some(e) = extra {
            observers.push(e);
        }
        observers.extend(groups.observers());
        let mut fanout = Fanout::new(observers);
        let mut requests = cluster.mix.apply_workload(source, seed);
        let end = sim.run(&mut requests, horizon, &mut fanout);
        source = requests.into_inner();
        end
    };
    progress.finish();
    if let Some(e) = source.take_error() {
        return Err(bad_input!("reading the workload: {e}").into());
    }

    let summary = sim.summary(&end);
    let cluster_summary = sim.cluster_summary(&end, &summary, cluster.fitness.as_ref());
    drop(sim);
    let report = RunReport {
        schema_version: SCHEMA_VERSION,
        simulator: SimulatorInfo::current(),
        seed,
        deployment: DeploymentInfo {
            model: deployment.model_name.clone(),
            hardware: deployment.gpu_name.clone(),
            tp: deployment.tp,
            latency_model: deployment.latency.name().to_string(),
            coefficients: deployment.coefficients.clone(),
            num_gpu_blocks: deployment.instance.num_gpu_blocks,
            kv_memory_per_gpu: deployment.kv_budget,
        },
        config,
        summary,
        breakdowns: groups.report(&labels),
        client_latency_ms: client_latency.as_ref().map(|c| ClientLatencyReport::of(c, &labels)),
        cluster: cluster_summary,
    };
    if let Some(c) = csv {
        c.commit()?;
    }
    if let Some(t) = trace {
        t.finish(report.cluster.counterfactual.as_ref())?;
    }
    Ok((report, wall.elapsed().as_secs_f64()))
}
