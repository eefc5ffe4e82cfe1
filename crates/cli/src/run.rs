//! `blis run`: simulate one deployment on a workload and report.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use blis_engine::instance::Instance;
use blis_engine::metrics::{Collector, RunSummary};
use blis_engine::sim::{IterWorkload, run_single};
use blis_workload::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};

use crate::error::{BadInput, bad_input};
use crate::knobs::{KnobArgs, KnobFile, Knobs};
use crate::output::{AtomicFile, Fanout, Progress, RequestCsv};
use crate::report::{DeploymentInfo, RunReport, SCHEMA_VERSION, SimulatorInfo, table};
use crate::setup::{Deployment, seconds};

/// Simulate a vLLM deployment serving a workload.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  blis run --model meta-llama/llama-3.1-8b-instruct\n  \
    blis run --model meta-llama/llama-3.1-8b-instruct --rate 10 --num-requests 2000 --prompt-tokens 512 \
    --output-tokens 256 --max-num-seqs 256 --max-num-batched-tokens 2048 --seed 7 --output results.json")]
pub struct RunArgs {
    /// Read knob values from a YAML file whose keys are the flag names
    /// (e.g. `max-num-seqs: 128`); flags given on the command line win.
    #[arg(long, value_name = "PATH", help_heading = "Run")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub knobs: KnobArgs,

    /// Write the JSON report to this file instead of stdout.
    #[arg(long, short, value_name = "PATH", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// Write one CSV row per request to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub requests_csv: Option<PathBuf>,

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
    let file = match &args.config {
        Some(path) => KnobFile::load(path)?,
        None => KnobFile::default(),
    };
    let knobs = Knobs::resolve(&args.knobs, &file);
    let mut config = knobs.report();
    let deployment = Deployment::resolve(&knobs, &mut config)?;
    let workload = synthetic_workload(&knobs)?;
    let horizon = knobs.horizon.value.map(|s| seconds("horizon", s)).transpose()?;
    let seed = workload.seed;

    // Open outputs before simulating so a bad path fails fast, but only move
    // them into place once everything succeeded.
    let mut output = args.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    let mut csv = args.requests_csv.as_deref().map(RequestCsv::create).transpose()?;

    let mut instance =
        Instance::new(0, deployment.instance.clone(), deployment.latency.clone()).map_err(|e| bad_input!("{e}"))?;
    let mut collector = Collector::default();
    let mut progress = Progress::new(workload.num_requests, args.quiet);
    let end = {
        let mut observers: Vec<&mut dyn blis_engine::instance::Observer> = vec![&mut collector, &mut progress];
        if let Some(c) = csv.as_mut() {
            observers.push(c);
        }
        let mut fanout = Fanout(observers);
        run_single(&mut instance, &mut IterWorkload::new(workload.generate()), horizon, &mut fanout)
    };
    progress.finish();

    let summary = RunSummary::build(&collector, &[instance.stats()], end.end, u64::from(end.queued), u64::from(end.running));
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
        },
        config,
        summary,
    };
    let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
    if let Some(c) = csv {
        c.commit()?;
    }
    match output.as_mut() {
        Some(f) => writeln!(f.writer(), "{json}").context("writing --output")?,
        None => writeln!(std::io::stdout().lock(), "{json}").context("writing the report to stdout")?,
    }
    if let Some(f) = output {
        f.commit()?;
    }
    if !args.quiet {
        eprint!("{}", table(&report));
    }
    Ok(())
}
