//! `blis replay`: simulate the requests of a recorded trace v2 at their
//! recorded send times, with the server configuration its header records,
//! and keep a per-request result for `blis calibrate`.

use std::path::{Path, PathBuf};

use blis_engine::instance::{Observer, TokenEvent};
use blis_engine::metrics::IntCounts;
use blis_engine::request::RequestRecord;
use blis_calibrate::live::{ReplayDetail, ReplayedRequest};
use blis_scenario::Scenario;
use blis_scenario::knobs::{KnobValues, Knobs, Source};
use blis_scenario::report::RunReport;
use blis_workload::trace_v2::{TraceHeader, header_path, trace_csv};
use serde::Serialize;
use serde_json::{Map as Mapping, Value};

use crate::error::{BadInput, bad_input};
use crate::output::{AtomicFile, refuse_overwriting_inputs, warn};
use crate::simulate::{Files, Format, print_report, simulate};

/// Simulate a recorded trace v2 (from `blis observe`) and keep per-request results for `blis calibrate`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis replay --trace traces/run1 --model meta-llama/llama-3.1-8b-instruct --output sim.json\n\n\
    --trace takes the trace prefix (traces/run1 → traces/run1.csv + traces/run1.header.yaml) or the CSV.\n\
    Server knobs come from flags, then --config, then the header's `server:` and `hardware:` sections, then defaults.")]
pub struct ReplayArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// Read knob values from a YAML file whose keys are the flag names; flags win.
    #[arg(long, value_name = "PATH", help_heading = "Run")]
    pub config: Option<PathBuf>,

    /// Write the JSON (the run report plus per-request results, what `blis calibrate --sim` reads) to this file.
    #[arg(long, short, value_name = "PATH", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// What stdout gets: the human summary, or the JSON (the summary then goes to stderr).
    #[arg(long, value_enum, default_value_t = Format::Table, help_heading = "Output")]
    pub format: Format,

    /// Do not print the summary table or timing (only what --format json or --output ask for).
    #[arg(long, short, help_heading = "Output")]
    pub quiet: bool,
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

/// Knob names that a trace header's `server:` section may spell differently
/// (the spec's example header), mapped onto BLIS's flags.
const HEADER_ALIASES: [(&str, &str); 3] = [("tensor_parallel", "tp"), ("tensor_parallel_size", "tp"), ("num_gpu_blocks_override", "num-gpu-blocks")];

/// Server knobs from a trace header: its `server:` section (BLIS flag names
/// or the spec's names) plus `hardware.gpu`. Entries that name no knob are
/// returned as ignored rather than refused: headers come from other tools.
fn header_knobs(header: &TraceHeader) -> Result<(KnobValues, Vec<String>, Vec<String>), BadInput> {
    let mut map = Mapping::new();
    let (mut matched, mut ignored) = (Vec::new(), Vec::new());
    let known = |k: &str| KnobValues::from_yaml(Value::Object(Mapping::from_iter([(k.to_string(), Value::Null)])), "").is_ok();
    if let Some(Value::Object(server)) = &header.server {
        for (key, v) in server {
            let key = key.as_str();
            let key = HEADER_ALIASES.iter().find(|(a, _)| *a == key).map_or(key, |(_, b)| b).replace('_', "-");
            if v.is_null() || key == "time-scale" {
                continue; // time-scale is applied to the trace's times, not a knob
            }
            if known(&key) {
                matched.push(format!("{key}={}", serde_yaml_ng::to_string(v).unwrap_or_default().trim()));
                map.insert(key, v.clone());
            } else {
                ignored.push(format!("server.{key}"));
            }
        }
    }
    if let Some(gpu) = header.hardware.as_ref().and_then(|h| h.get("gpu")).filter(|g| !g.is_null())
        && !map.contains_key("hardware")
    {
        matched.push(format!("hardware={}", serde_yaml_ng::to_string(gpu).unwrap_or_default().trim()));
        map.insert("hardware".to_string(), gpu.clone());
    }
    // The recording client's cap on requests in flight holds in the replay too: a
    // request is sent at its recorded time, or later if the simulated server
    // still holds every connection.
    if let Some(cap) = header.load_generator.as_ref().and_then(|lg| lg.get("max_concurrency")).filter(|c| c.as_u64().is_some_and(|c| c >= 1)) {
        matched.push(format!("max-concurrency={}", serde_yaml_ng::to_string(cap).unwrap_or_default().trim()));
        map.insert("max-concurrency".to_string(), cap.clone());
    }
    let file = KnobValues::from_yaml(Value::Object(map), "trace header `server:`")?;
    Ok((file, matched, ignored))
}

/// Runs `blis replay`.
pub fn execute(mut args: ReplayArgs) -> anyhow::Result<()> {
    crate::knobs::reject_unused(&Knobs::layered(&[(&args.knobs, Source::Flag)]), "replay")?;
    let trace = args.knobs.trace.clone().ok_or_else(|| bad_input!("--trace is required: the trace prefix written by `blis observe` (or its .csv)"))?;
    let csv = trace_csv(&trace);
    refuse_overwriting_inputs(&[("output", args.output.as_deref())], &[("trace", Some(&csv)), ("config", args.config.as_deref())])?;
    let hp = header_path(&csv);
    let header = TraceHeader::load(&hp).map_err(|e| bad_input!("{e}"))?;
    let (from_header, matched, ignored) = header_knobs(&header)?;
    if !ignored.is_empty() {
        warn(&[format!("{}: not simulated, ignored: {}", hp.display(), ignored.join(", "))]);
    }
    let mut files = Vec::new();
    if let Some(path) = &args.config {
        files.push((KnobValues::load(path)?, format!("--config {}", path.display())));
    }
    files.push((from_header, format!("trace header {}", hp.display())));
    args.knobs.trace = Some(csv.clone());
    let scenario = Scenario::from_values(&args.knobs, files);
    replay_with(&args, &scenario, &csv, matched, ignored).map_err(|e| crate::knobs::blame(e, &scenario))
}

fn replay_with(args: &ReplayArgs, scenario: &Scenario, csv: &Path, matched: Vec<String>, ignored: Vec<String>) -> anyhow::Result<()> {
    let output = args.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    let mut detail = Detail::default();
    let (report, wall_s) = simulate(scenario, Files { quiet: args.quiet, ..Files::default() }, Some(&mut detail))?;
    let mut requests = detail.requests;
    requests.sort_by_key(|r| r.request_id);
    let replay = ReplayDetail { trace: csv.display().to_string(), matched, ignored, requests, itl_us: detail.itl.value_counts() };
    print_report(&ReplayReport { report: &report, replay: &replay }, &report, args.format, output, args.quiet, wall_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_server_sections_map_onto_knobs() {
        let header: TraceHeader = blis_data::yaml::from_str(
            "trace_version: 2\nserver:\n  type: vllm\n  model: meta-llama/Llama-3.1-8B-Instruct\n  tensor_parallel: 2\n  max_num_seqs: 64\n  quantization: null\n  enforce_eager: false\nhardware:\n  gpu: H100\n  gpu_count: 2\n",
        )
        .unwrap();
        let (file, matched, ignored) = header_knobs(&header).unwrap();
        assert_eq!(file.tp, Some(2));
        assert_eq!(file.max_num_seqs, Some(64));
        assert_eq!(file.hardware.as_deref(), Some("H100"));
        assert_eq!(file.model.as_deref(), Some("meta-llama/Llama-3.1-8B-Instruct"));
        assert!(matched.contains(&"tp=2".to_string()), "{matched:?}");
        assert_eq!(ignored, ["server.type", "server.enforce-eager"]);
        assert_eq!(file.max_concurrency, None, "no load generator, no cap");
        let recorded: TraceHeader = blis_data::yaml::from_str("trace_version: 2\nmode: real\nload_generator:\n  start_unix_us: 5\n  max_concurrency: 8\n").unwrap();
        let (file, matched, _) = header_knobs(&recorded).unwrap();
        assert_eq!(file.max_concurrency, Some(8));
        assert!(matched.contains(&"max-concurrency=8".to_string()), "{matched:?}");
    }
}
