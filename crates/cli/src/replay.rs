//! `blis replay`: simulate the requests of a recorded trace v2 at their
//! recorded send times, with the server configuration its header records,
//! and keep a per-request result for `blis calibrate`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use blis_calibrate::fit::observed::HeaderKnobs;
use blis_calibrate::validate::live::{ReplayDetail, ReplayedRequest, SimDocument};
use blis_engine::instance::{Observer, TokenEvent};
use blis_engine::metrics::IntCounts;
use blis_engine::request::RequestRecord;
use blis_scenario::Scenario;
use blis_scenario::knobs::{KnobValues, Knobs, Source};
use blis_scenario::report::RunReport;
use blis_workload::trace_v2::{TraceHeader, header_path, trace_csv};
use serde::Serialize;

use crate::error::bad_input;
use crate::output::{AtomicFile, ReportArgs, refuse_overwriting_inputs, warn};
use crate::simulate::{Files, print_report, simulate};

/// Simulate a recorded trace v2 (from `blis observe`) and keep per-request results for `blis calibrate`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("output", |a| a.help("Write the JSON (the run report plus per-request results, what `blis calibrate --sim` reads) to this file.")))]
#[command(after_help = "Example:\n  blis replay --trace traces/run1 --model meta-llama/llama-3.1-8b-instruct --output sim.json\n\n\
    --trace takes the trace prefix (traces/run1 → traces/run1.csv + traces/run1.header.yaml) or the CSV.\n\
    Server knobs come from flags, then --config, then the header's `server:` and `hardware:` sections, then defaults.")]
pub struct ReplayArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// Read knob values from a YAML file whose keys are the flag names; flags win.
    #[arg(long, value_name = "PATH", help_heading = "Run")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub report: ReportArgs,
}

/// The JSON `blis replay` writes.
#[derive(Serialize)]
struct ReplayReport<'a> {
    #[serde(flatten)]
    report: &'a RunReport,
    replay: &'a ReplayDetail,
}

/// Collects per-request results and inter-token gaps.
#[derive(Default)]
struct Detail {
    requests: Vec<ReplayedRequest>,
    itl: IntCounts,
}

impl Observer for Detail {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.requests.push(ReplayedRequest {
            request_id: r.id.0,
            outcome: r.outcome.as_str().to_string(),
            arrival_us: r.arrival.as_us(),
            ttft_us: r.ttft().map(|t| t.as_us()),
            e2e_us: r.e2e().map(|t| t.as_us()),
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
        });
    }

    fn on_token(&mut self, t: &TokenEvent) {
        if let Some(gap) = t.gap {
            self.itl.push(gap.as_us());
        }
    }
}

/// What a trace header records of its server, as `blis replay` reads it:
/// shared with `blis calibrate`, which checks a trace as the replay does.
pub struct RecordedServer {
    /// The header's knobs.
    pub knobs: HeaderKnobs,
    /// The header file.
    pub path: PathBuf,
}

impl RecordedServer {
    /// Reads the header of the trace `csv`. A header that cannot be read,
    /// or whose sections are unusable, is bad input naming the file.
    pub fn read(csv: &Path) -> anyhow::Result<RecordedServer> {
        let path = header_path(csv);
        let header = TraceHeader::load(&path).map_err(|e| bad_input!("{e}"))?;
        let knobs = HeaderKnobs::of(&header, &path).map_err(|e| bad_input!("{e}"))?;
        Ok(RecordedServer { knobs, path })
    }

    /// The replay of `csv`: `given` (flags) over `files` (`--config`,
    /// highest first) over the header's knobs.
    pub fn replay(&self, given: &KnobValues, mut files: Vec<(KnobValues, String)>, csv: &Path) -> Scenario {
        files.push((self.knobs.values.clone(), format!("trace header {}", self.path.display())));
        Scenario::from_values(&KnobValues { trace: Some(csv.to_path_buf()), ..given.clone() }, files)
    }

    /// The warning when a replay simulates `simulated`, another model than the header records.
    pub fn other_model(&self, simulated: Option<&str>) -> Option<String> {
        self.knobs.other_model(&format!("trace header {}", self.path.display()), simulated?)
    }
}

/// Everything checked before a replay's first simulated event (model, GPU,
/// server knobs, the trace's rows), as one bad-input line naming the flag
/// or the file (the trace header included) the offending value came from.
pub fn check(scenario: &Scenario) -> anyhow::Result<()> {
    scenario.check().map_err(|e| crate::knobs::blame(e.into(), scenario))
}

/// Runs `blis replay`.
pub fn execute(args: ReplayArgs) -> anyhow::Result<()> {
    crate::knobs::reject_unused(&Knobs::layered(&[(&args.knobs, Source::Flag)]), "replay")?;
    let trace = args
        .knobs
        .trace
        .clone()
        .ok_or_else(|| bad_input!("--trace is required: the trace prefix written by `blis observe` (or its .csv)"))?;
    if trace.extension().is_some_and(|e| e == "jsonl") {
        return Err(bad_input!(
            "--trace {}: replay reads a trace v2 (its header records the server and the send times); simulate a Mooncake JSONL with `blis run --trace FILE`",
            trace.display()
        )
        .into());
    }
    let csv = trace_csv(&trace);
    refuse_overwriting_inputs(
        &[("output", args.report.to.output.as_deref())],
        &[("trace", Some(&csv)), ("config", args.config.as_deref())],
    )?;
    let mut files = Vec::new();
    if let Some(path) = &args.config {
        files.push((KnobValues::load(path)?, format!("--config {}", path.display())));
    }
    let recorded = RecordedServer::read(&csv)?;
    let scenario = recorded.replay(&args.knobs, files, &csv);
    let HeaderKnobs { matched, ignored, .. } = &recorded.knobs;
    let mut warnings = Vec::new();
    if !ignored.is_empty() {
        warnings.push(format!("{}: not simulated, ignored: {}", recorded.path.display(), ignored.join(", ")));
    }
    warnings.extend(recorded.other_model(scenario.knobs.model.value.as_deref()));
    if !warnings.is_empty() {
        warn(&warnings);
    }
    replay_with(&args, &scenario, &csv, matched.clone(), ignored.clone()).map_err(|e| crate::knobs::blame(e, &scenario))
}

/// Simulates `scenario` (a trace replay) and collects the per-request
/// results `blis calibrate` compares; also the wall time, seconds.
pub fn replay_detail(
    scenario: &Scenario,
    csv: &Path,
    matched: Vec<String>,
    ignored: Vec<String>,
    quiet: bool,
) -> anyhow::Result<(RunReport, ReplayDetail, f64)> {
    let mut detail = Detail::default();
    let (report, wall_s) = simulate(scenario, Files { quiet, ..Files::default() }, Some(&mut detail))?;
    let mut requests = detail.requests;
    requests.sort_by_key(|r| r.request_id);
    Ok((report, ReplayDetail { trace: csv.display().to_string(), matched, ignored, requests, itl_us: detail.itl.value_counts() }, wall_s))
}

/// The document `blis replay --output` writes, as `blis calibrate --sim` reads it.
pub fn sim_document(report: &RunReport, replay: &ReplayDetail) -> anyhow::Result<SimDocument> {
    let json = serde_json::to_value(ReplayReport { report, replay }).context("serializing the replay")?;
    serde_json::from_value(json).context("reading back the replay")
}

fn replay_with(args: &ReplayArgs, scenario: &Scenario, csv: &Path, matched: Vec<String>, ignored: Vec<String>) -> anyhow::Result<()> {
    let output = args.report.to.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    let (report, replay, wall_s) = replay_detail(scenario, csv, matched, ignored, args.report.to.quiet)?;
    print_report(&ReplayReport { report: &report, replay: &replay }, &report, args.report.format, output, args.report.to.quiet, wall_s)
}
