//! `blis convert servegen`: import a ServeGen data directory as a spec.
//! `blis convert otel`: turn vLLM's OpenTelemetry traces into a trace v2.
//! `blis convert vllm-log`: read a vLLM server's startup log as `server-facts.yaml`.

use std::path::PathBuf;

use anyhow::Context;
use blis_calibrate::experiment::vllm_log::LoggedServer;
use blis_calibrate::fit::otel::OtelTrace;
use blis_scenario::count::parse_count;
use blis_workload::limits::MAX_RATE_PER_S;
use blis_workload::servegen::{ServeGenOptions, convert};
use blis_workload::spec::to_yaml;
use blis_workload::trace_v2::{COLUMNS, Row, TraceHeader, header_path, trace_csv};

use crate::error::bad_input;
use crate::output::{AtomicFile, out, output_dir, warn, write_checked_spec};

/// `blis convert` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ConvertCommand {
    /// Import a ServeGen data directory (chunk-*-trace.csv, chunk-*-dataset.json) as a workload spec.
    #[command(after_help = "Examples:\n  blis convert servegen --path examples/servegen/language-mini --output w.yaml\n  \
    blis convert servegen --path ServeGen/data/language/m-large --span-end 3600 --output w.yaml   (a ServeGen checkout)")]
    Servegen(ServeGenArgs),
    /// Turn vLLM's OpenTelemetry request traces (OTLP/JSON lines: journey tracing's llm_request/llm_core spans, or
    /// standard tracing's llm_request spans with gen_ai.latency.*) into a trace v2 (PREFIX.csv and
    /// PREFIX.header.yaml) that `blis replay`, `blis calibrate --trace` and `blis fit --trace` read.
    #[command(
        after_help = "Examples:\n  blis convert otel --path traces.jsonl --output traces/server1 --model meta-llama/Llama-3.1-8B-Instruct --hardware H100\n  \
    blis fit --trace traces/server1 -o server1.yaml"
    )]
    Otel(OtelArgs),
    /// Read a vLLM server's startup log as the `server-facts.yaml` of an experiment directory (what
    /// inference-perf does not record: KV blocks, parallelism, scheduler limits, caching, quantization).
    #[command(
        after_help = "Examples:\n  blis convert vllm-log --path vllm.log --hardware H100-SXM-80GB --output my-run/server-facts.yaml\n  \
    blis validate my-run"
    )]
    VllmLog(VllmLogArgs),
}

/// `blis convert vllm-log`.
#[derive(clap::Args, Debug)]
pub struct VllmLogArgs {
    /// The server's log (what `vllm serve` printed from its start).
    #[arg(long, value_name = "FILE")]
    path: PathBuf,
    /// The file to write. [default: standard output]
    #[arg(long, short, value_name = "PATH")]
    output: Option<PathBuf>,
    /// The GPU the server ran on (the log does not name it), written as `hardware`.
    #[arg(long, value_name = "GPU")]
    hardware: Option<String>,
}

/// `blis convert otel`.
#[derive(clap::Args, Debug)]
pub struct OtelArgs {
    /// The OTLP/JSON file (one ExportTraceServiceRequest per line, as a collector's file exporter writes).
    #[arg(long, value_name = "FILE")]
    path: PathBuf,
    /// Output prefix: PREFIX.csv and PREFIX.header.yaml.
    #[arg(long, short, value_name = "PREFIX")]
    output: PathBuf,
    /// The model served (HuggingFace id), recorded in the header. [default: the trace's gen_ai.request.model]
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// The GPU, recorded in the header. [default: none; the replay's default]
    #[arg(long, value_name = "GPU")]
    hardware: Option<String>,
    /// The tensor-parallel degree, recorded in the header. [default: none; the replay's default]
    #[arg(long, value_name = "N")]
    tp: Option<u32>,
    /// Only the requests of the server whose resource has this service.instance.id. [default: every server]
    #[arg(long, value_name = "ID")]
    otel_instance: Option<String>,
}

/// `blis convert servegen`.
#[derive(clap::Args, Debug)]
pub struct ServeGenArgs {
    /// The ServeGen data directory.
    #[arg(long, value_name = "DIR")]
    path: PathBuf,
    /// The spec to write (dataset files are referenced relative to it).
    #[arg(long, short, value_name = "PATH")]
    output: PathBuf,
    /// Start of the imported span, seconds into the data. [default: 0]
    #[arg(long, value_name = "SECONDS", value_parser = parse_count::<u64>, allow_negative_numbers = true)]
    span_start: Option<u64>,
    /// End of the imported span, seconds into the data. [default: the end of the data]
    #[arg(long, value_name = "SECONDS", value_parser = parse_count::<u64>, allow_negative_numbers = true)]
    span_end: Option<u64>,
    /// The spec's aggregate_rate. [default: the data's mean rate over the span]
    #[arg(long, value_name = "REQ_PER_S", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// The spec's seed. [default: 42]
    #[arg(long, value_name = "N", value_parser = parse_count::<u64>, allow_negative_numbers = true)]
    seed: Option<u64>,
}

/// Runs a `blis convert` subcommand.
pub fn execute(cmd: ConvertCommand) -> anyhow::Result<()> {
    match cmd {
        ConvertCommand::Servegen(a) => servegen(a),
        ConvertCommand::Otel(a) => otel(a),
        ConvertCommand::VllmLog(a) => vllm_log(a),
    }
}

/// `blis convert vllm-log`: the facts the log gives, the GPU from
/// `--hardware` (a warning when BLIS does not bundle it), notes on what
/// BLIS does not simulate on standard error.
fn vllm_log(a: VllmLogArgs) -> anyhow::Result<()> {
    let text = blis_data::textfile::read(&a.path).map_err(|e| bad_input!("--path {}: {e}", a.path.display()))?;
    let server = LoggedServer::read(&text).map_err(|e| bad_input!("--path {}: {e}", a.path.display()))?;
    let unknown_gpu =
        a.hardware.as_deref().filter(|g| blis_physics::catalog::find_gpu(g).is_none()).map(|g| {
            format!("--hardware {g}: {}; `blis validate` will need --hardware-config for it", blis_physics::catalog::unknown_gpu(g))
        });
    warn(&server.notes().into_iter().chain(unknown_gpu).collect::<Vec<_>>());
    let yaml = server.server_facts_yaml(&a.path.display().to_string(), a.hardware.as_deref());
    match &a.output {
        Some(path) => {
            let mut file = AtomicFile::create("output", path)?;
            std::io::Write::write_all(file.writer(), yaml.as_bytes()).context("writing the server facts")?;
            file.commit()?;
            eprintln!("wrote {}{}", path.display(), if a.hardware.is_none() { " (no --hardware: set `hardware` there)" } else { "" });
        }
        None => out!("{yaml}")?,
    }
    Ok(())
}

/// `blis convert otel`: one trace row per request that arrived, in order
/// of arrival; a request that did not complete is an `error` row.
fn otel(a: OtelArgs) -> anyhow::Result<()> {
    let mut trace = OtelTrace::load_requests(&a.path).map_err(|e| bad_input!("--path {e}"))?;
    if let Some(id) = &a.otel_instance
        && !trace.retain_instance(id)
    {
        // Requests without steps: keep the journeys of that server.
        trace.journeys.retain(|_, j| &j.instance == id);
    }
    let requests = trace.requests();
    if requests.is_empty() {
        return Err(bad_input!(
            "--path {}: no request with an arrival time (api.ARRIVED of vLLM's journey tracing, or an llm_request span with gen_ai.latency.e2e){}",
            a.path.display(),
            a.otel_instance.as_ref().map_or(String::new(), |id| format!(" on server {id}"))
        )
        .into());
    }
    // What a trace v2 row must hold, checked before anything is written.
    let first = requests[0].arrival_us;
    if let Some((i, r)) = requests.iter().enumerate().find(|(_, r)| r.prompt_tokens == 0) {
        return Err(bad_input!(
            "--path {}: request {i} (in order of arrival, at {} µs) has no prompt token count in [1, 2^30] (prefill_total_tokens, prefill.total_tokens or gen_ai.usage.prompt_tokens)",
            a.path.display(),
            r.arrival_us
        )
        .into());
    }
    if let Some((i, r)) = requests.iter().enumerate().find(|(_, r)| r.arrival_us - first > blis_engine::time::Micros::MAX_SPAN.as_us()) {
        return Err(bad_input!(
            "--path {}: request {i} arrives {} µs after the first, beyond the simulated clock's 1e14 µs (1e8 s)",
            a.path.display(),
            r.arrival_us - first
        )
        .into());
    }
    let model = a.model.clone().or_else(|| trace.model.clone());
    let mut server = serde_json::Map::new();
    if let Some(m) = &model {
        server.insert("model".into(), m.clone().into());
    }
    if let Some(tp) = a.tp {
        server.insert("tp".into(), tp.into());
    }
    let header = TraceHeader {
        trace_version: 2,
        time_unit: Some("microseconds".into()),
        mode: Some("real".into()),
        warm_up_requests: Some(0),
        server: (!server.is_empty()).then_some(serde_json::Value::Object(server)),
        hardware: a.hardware.as_ref().map(|g| serde_json::json!({ "gpu": g })),
        created_at: None,
        workload_spec: None,
        network: None,
        load_generator: None,
        server_metrics: None,
        blis: None,
    };
    let csv_path = trace_csv(&a.output);
    if let Some(dir) = csv_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| bad_input!("--output {}: cannot create its directory: {e}", a.output.display()))?;
    }
    let mut header_file = AtomicFile::create("output", &header_path(&csv_path))?;
    let mut csv_file = AtomicFile::create("output", &csv_path)?;
    std::io::Write::write_all(header_file.writer(), header.to_yaml().as_bytes()).context("writing the trace header")?;
    let first_us = requests[0].arrival_us;
    let mut failed = 0;
    {
        let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(csv_file.writer());
        w.write_record(COLUMNS).context("writing the trace")?;
        for (i, r) in requests.iter().enumerate() {
            failed += u64::from(r.done.is_none());
            let row = Row {
                request_id: i as u64,
                client_id: "otel",
                tenant_id: "default",
                slo_class: "default",
                session_id: "",
                round_index: 0,
                prefix_group: "",
                streaming: true,
                input_tokens: r.prompt_tokens,
                output_tokens: r.output_tokens,
                text_tokens: r.prompt_tokens,
                image_tokens: 0,
                audio_tokens: 0,
                video_tokens: 0,
                reason_ratio: 0.0,
                arrival_time_us: r.arrival_us - first_us,
                send_time_us: Some(r.arrival_us),
                first_chunk_time_us: r.done.map(|d| d.0),
                last_chunk_time_us: r.done.map(|d| d.1),
                num_chunks: r.done.map(|_| u64::from(r.output_tokens)),
                status: if r.done.is_some() { "ok" } else { "error" },
                error_message: if r.done.is_some() { "" } else { "did not complete in the OpenTelemetry trace" },
            };
            w.serialize(row).context("writing the trace")?;
        }
        w.flush().context("writing the trace")?;
    }
    header_file.commit()?;
    csv_file.commit()?;
    eprintln!(
        "wrote {} and {}: {} requests ({failed} did not complete){}",
        header_path(&csv_path).display(),
        csv_path.display(),
        requests.len(),
        if model.is_none() { "; the trace names no model (gen_ai.request.model): give --model, or `blis replay --model`" } else { "" }
    );
    Ok(())
}

/// `blis convert servegen`.
fn servegen(a: ServeGenArgs) -> anyhow::Result<()> {
    if let Some(r) = a.rate
        && !(r.is_finite() && r > 0.0 && r <= MAX_RATE_PER_S)
    {
        return Err(bad_input!("--rate {r}: must be a positive number of requests per second, at most {MAX_RATE_PER_S:e}").into());
    }
    let opts = ServeGenOptions { span_start_s: a.span_start, span_end_s: a.span_end, aggregate_rate: a.rate, seed: a.seed };
    let (spec, warnings) = convert(&a.path, &output_dir(&a.output), &opts).map_err(|e| bad_input!("{e}"))?;
    warn(&warnings);
    let comment = format!(
        "# Imported from the ServeGen data in {} by `blis convert servegen`.\n# Each client is one chunk; its lifecycle windows carry the recorded rate (rate_scale)\n# and fitted arrival process; lengths reference the dataset files.\n",
        a.path.display()
    );
    write_checked_spec(&a.output, &comment, &to_yaml(&spec))?;
    eprintln!("wrote {} ({} clients)", a.output.display(), spec.clients.len());
    Ok(())
}
