//! `blis run`: simulate one deployment on a workload and report.

use std::path::PathBuf;

use std::io::Write as _;

use anyhow::Context as _;
use blis_scenario::knobs::KnobValues;

use crate::error::bad_input;
use crate::output::{AtomicFile, ReportArgs, refuse_overwriting_inputs};
use crate::simulate::{Files, print_report, simulate};

/// Simulate a vLLM deployment serving a workload.
#[derive(clap::Args, Debug)]
#[command(mut_arg("output", |a| a.help("Write the JSON report to this file.")))]
#[command(after_help = "Examples:\n  blis run --model meta-llama/llama-3.1-8b-instruct\n  \
    blis run --model meta-llama/llama-3.1-8b-instruct --rate 10 --num-requests 2000 --prompt-tokens 512 \
    --output-tokens 256 --max-num-seqs 256 --max-num-batched-tokens 2048 --seed 7 --output results.json\n  \
    blis run --model meta-llama/llama-3.1-8b-instruct --format json | jq .latency_ms.ttft")]
pub struct RunArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// Read knob values from a YAML file whose keys are the flag names
    /// (e.g. `max-num-seqs: 128`); flags given on the command line win.
    #[arg(long, value_name = "PATH", help_heading = "Run")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub report: ReportArgs,

    /// Write one CSV row per request to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub requests_csv: Option<PathBuf>,

    /// Write the decision trace (one JSON line per admission and routing
    /// decision, then a summary line) to this file; implies --trace-level decisions.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub trace_output: Option<PathBuf>,

    /// Write vLLM's KV-cache events (BlockStored, BlockRemoved, AllBlocksCleared; GPU and
    /// offload tiers) to this file, one JSON line per instance step.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub kv_events_output: Option<PathBuf>,

    /// Write vLLM's OpenTelemetry journey and step traces (OTLP/JSON, one ExportTraceServiceRequest per
    /// line, as a collector's file exporter writes them) to this file; `blis fit --otel` reads them.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub otel_output: Option<PathBuf>,

    /// With autoscaling: draw load, replicas and TTFT over the run to this SVG file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub plot_timeline: Option<PathBuf>,
}

/// Runs `blis run`.
pub fn execute(args: RunArgs) -> anyhow::Result<()> {
    let mut scenario = crate::knobs::scenario(&args.knobs, args.config.as_deref())?;
    scenario.trace_decisions = args.trace_output.is_some();
    run_with(&args, &scenario).map_err(|e| crate::knobs::blame(e, &scenario))
}

fn run_with(args: &RunArgs, scenario: &blis_scenario::Scenario) -> anyhow::Result<()> {
    let k = &scenario.knobs;
    refuse_overwriting_inputs(
        &[
            ("output", args.report.to.output.as_deref()),
            ("requests-csv", args.requests_csv.as_deref()),
            ("trace-output", args.trace_output.as_deref()),
            ("plot-timeline", args.plot_timeline.as_deref()),
            ("kv-events-output", args.kv_events_output.as_deref()),
            ("otel-output", args.otel_output.as_deref()),
        ],
        &[
            ("config", args.config.as_deref()),
            ("workload-spec", k.workload_spec.value.as_deref()),
            ("trace", k.trace.value.as_deref()),
            ("policy-config", k.policy_config.value.as_deref()),
            ("coefficients", k.coefficients.value.as_deref()),
            ("model-config", k.model_config.value.as_deref()),
            ("hardware-config", k.hardware_config.value.as_deref()),
        ],
    )?;
    let output = args.report.to.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    let files = Files {
        requests_csv: args.requests_csv.as_deref(),
        trace_output: args.trace_output.as_deref(),
        kv_events_output: args.kv_events_output.as_deref(),
        otel_output: args.otel_output.as_deref(),
        quiet: args.report.to.quiet,
    };
    let plot = args.plot_timeline.as_deref().map(|p| AtomicFile::create("plot-timeline", p)).transpose()?;
    let (report, wall_s) = simulate(scenario, files, None)?;
    if let Some(mut file) = plot {
        let Some(a) = &report.cluster.autoscaling else {
            return Err(bad_input!(
                "--plot-timeline needs autoscaling (--autoscale-policy NAME, or an autoscale section in --policy-config)"
            )
            .into());
        };
        let title = format!("{} on {}: {} autoscaling", report.deployment.model, report.deployment.hardware, a.policy);
        let svg = crate::plot::autoscale::timeline(&title, &a.timeline)?;
        file.writer().write_all(svg.as_bytes()).context("writing --plot-timeline")?;
        file.commit()?;
    }
    print_report(&report, &report, args.report.format, output, args.report.to.quiet, wall_s)
}
