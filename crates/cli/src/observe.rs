//! `blis observe`: drive a live OpenAI-compatible server with a workload and
//! record a trace v2 of what it did.

use std::path::PathBuf;
use std::time::Duration;

use blis_engine::time::MAX_SPAN_S;
use blis_net::client::{Target, check_api_key, check_http_url};
use blis_net::observe::{ObserveConfig, ObserveError, TraceFiles, observe};
use blis_net::serve::openai::Api;
use blis_scenario::knobs::{KnobId, KnobValues};
use blis_scenario::{Scenario, ScenarioError};

use blis_net::load::LoadSummary;

use crate::error::{BadInput, ServerFailed, bad_input};
use crate::output::{rate_text, warn};

/// Which OpenAI endpoint to drive.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiKind {
    /// `/v1/completions` (prompts sent as token ids: exact input lengths).
    Completions,
    /// `/v1/chat/completions` (prompts sent as text).
    Chat,
}

/// Drive a live OpenAI-compatible server with a workload and record a trace v2.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis observe --server-url http://127.0.0.1:8000 --model meta-llama/llama-3.1-8b-instruct \\\n    \
    --workload-spec w.yaml --api chat --trace-output traces/run1\n\n\
    Writes PREFIX.header.yaml, PREFIX.csv (one row per request, flushed as it finishes), PREFIX.chunks.csv (every\n\
    streamed chunk's arrival time) and, with --prometheus-url, PREFIX.metrics.csv. The workload comes from\n\
    --workload-spec / --workload or the same synthetic flags as `blis run`; --model is the name the server serves.")]
pub struct ObserveArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// Read knob values from a YAML file whose keys are the flag names; flags win.
    #[arg(long, value_name = "PATH", help_heading = "Run")]
    pub config: Option<PathBuf>,

    /// Base URL of the server (http:// or https://), e.g. http://127.0.0.1:8000.
    #[arg(long, value_name = "URL", help_heading = "Observe")]
    pub server_url: String,

    /// API to drive.
    #[arg(long, value_enum, default_value_t = ApiKind::Completions, help_heading = "Observe")]
    pub api: ApiKind,

    /// Output prefix: PREFIX.csv, PREFIX.header.yaml, PREFIX.chunks.csv (, PREFIX.metrics.csv).
    #[arg(long, value_name = "PREFIX", help_heading = "Observe")]
    pub trace_output: PathBuf,

    /// Per-request timeout, seconds (inference-perf's is 300).
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS", allow_negative_numbers = true, help_heading = "Observe")]
    pub timeout: f64,

    /// Bearer token for the server, without control characters (line breaks) [default: $OPENAI_API_KEY when set].
    #[arg(long, value_name = "KEY", help_heading = "Observe")]
    pub api_key: Option<String>,

    /// Ask for whole (non-streamed) responses: no TTFT or ITL.
    #[arg(long, help_heading = "Observe")]
    pub no_stream: bool,

    /// Prometheus endpoint (http:// or https://) to scrape during the run, e.g. http://127.0.0.1:8000/metrics.
    #[arg(long, value_name = "URL", help_heading = "Observe")]
    pub prometheus_url: Option<String>,

    /// Scrape interval, milliseconds, from 10 to 3600000 (an hour).
    #[arg(long, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..=3_600_000), help_heading = "Observe")]
    pub scrape_interval_ms: u64,

    /// Server facts to record in the trace header (a YAML of vLLM flag names, e.g. max-num-seqs: 128,
    /// num-gpu-blocks: 7462, hardware: H100, tp: 1); `blis replay` simulates with them.
    #[arg(long, value_name = "PATH", help_heading = "Observe")]
    pub server_config: Option<PathBuf>,

    /// Leading requests to mark as warm-up (excluded by `blis calibrate`).
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Observe")]
    pub warm_up: u64,

    /// Exit with code 3 when more than this fraction of the requests sent failed (errors and timeouts),
    /// after writing the trace in full. Whatever it is, a run in which no request succeeded exits 3.
    #[arg(long, default_value_t = 1.0, value_name = "FRACTION", allow_negative_numbers = true, help_heading = "Observe")]
    pub max_error_rate: f64,
}

/// Requests `blis observe` keeps in flight unless `--max-concurrency` says otherwise.
const DEFAULT_MAX_CONCURRENCY: u32 = 256;

/// Runs `blis observe`.
pub fn execute(args: ObserveArgs) -> anyhow::Result<()> {
    let scenario = crate::knobs::scenario(&args.knobs, args.config.as_deref())?;
    observe_with(&args, &scenario).map_err(|e| crate::knobs::blame(e, &scenario))
}

fn observe_with(args: &ObserveArgs, scenario: &Scenario) -> anyhow::Result<()> {
    let knobs = &scenario.knobs;
    crate::knobs::reject_unused(knobs, "observe")?;
    let model = knobs
        .model
        .value
        .clone()
        .ok_or_else(|| ScenarioError::knob(KnobId::model, "is required: the model name the server serves".into()))?;
    if !(0.0..=1.0).contains(&args.max_error_rate) {
        return Err(bad_input!("--max-error-rate {}: must be a fraction in [0, 1]", args.max_error_rate).into());
    }
    let timeout = Duration::from_micros(blis_scenario::deployment::flag_seconds("timeout", args.timeout)?.as_us());
    let max_concurrency = blis_scenario::workload::max_concurrency(knobs)?.unwrap_or(DEFAULT_MAX_CONCURRENCY);
    // Checked here, not per request: a URL or key that cannot be sent would
    // fail every request, and the run would blame the server.
    check_http_url(&args.server_url).map_err(|e| bad_input!("--server-url {}: {e}", args.server_url))?;
    if let Some(url) = &args.prometheus_url {
        check_http_url(url).map_err(|e| bad_input!("--prometheus-url {url}: {e}"))?;
    }
    let api_key = match &args.api_key {
        Some(key) => Some((key.clone(), "--api-key")),
        None => std::env::var("OPENAI_API_KEY").ok().filter(|k| !k.is_empty()).map(|k| (k, "$OPENAI_API_KEY (the default of --api-key)")),
    };
    if let Some((key, source)) = &api_key {
        check_api_key(key).map_err(|e| bad_input!("{source}: {e}"))?;
    }
    let api_key = api_key.map(|(key, _)| key);
    // The same workload `blis run` would simulate with these knobs.
    let opened = blis_scenario::workload::open(knobs, &mut knobs.report())?;
    let name = match (&knobs.workload_spec.value, &knobs.workload.value) {
        (Some(p), _) => p.display().to_string(),
        (None, Some(w)) => w.clone(),
        (None, None) => "synthetic".into(),
    };
    let plan = opened.plan.ok_or_else(|| {
        ScenarioError::knob(
            KnobId::workload_spec,
            format!("{name}: an inference-perf configuration is run by inference-perf itself; `blis observe` sends BLIS workload specs, built-ins and the synthetic flags"),
        )
    })?;
    // As `blis run` refuses arrivals past the simulated clock's end, a
    // schedule longer than that is refused here before anything is sent.
    let span_s = plan.expected_requests() as f64 / plan.aggregate_rate;
    if span_s > MAX_SPAN_S {
        return Err(bad_input!(
            "--rate {:e}: {} requests at this rate take about {span_s:.1e} s, longer than the {MAX_SPAN_S:e} s a schedule may span; raise the rate or send fewer requests",
            plan.aggregate_rate,
            plan.expected_requests()
        )
        .into());
    }
    warn(&opened.warnings);
    // The header's `server:` section: the --server-config file (same schema
    // as --config, unknown keys refused) plus the served model name.
    let mut server = match &args.server_config {
        Some(p) => {
            KnobValues::load(p)?;
            let text = blis_data::textfile::read(p).map_err(|e| bad_input!("--server-config {}: {e}", p.display()))?;
            blis_data::yaml::from_str::<serde_json::Map<String, serde_json::Value>>(&text)
                .map_err(|e| bad_input!("--server-config {}: {e}", p.display()))?
        }
        None => serde_json::Map::new(),
    };
    if !server.contains_key("model") {
        server.insert("model".to_string(), model.clone().into());
    }
    let server = Some(serde_json::Value::Object(server));
    let plan_model = model.clone();
    let config = ObserveConfig {
        target: Target {
            base_url: args.server_url.clone(),
            model,
            api: match args.api {
                ApiKind::Completions => Api::Completions,
                ApiKind::Chat => Api::Chat,
            },
            api_key,
            streaming: !args.no_stream,
            timeout,
        },
        max_concurrency: max_concurrency as usize,
        trace_prefix: args.trace_output.clone(),
        prometheus_url: args.prometheus_url.clone(),
        scrape_interval: Duration::from_millis(args.scrape_interval_ms),
        warm_up_requests: args.warm_up,
        server,
        workload_name: name,
    };
    let files = TraceFiles::new(&args.trace_output);
    let announce = || {
        crate::output::print_warnings();
        eprintln!(
            "blis observe: {} requests ({} req/s) against {} ({:?} API); writing {}",
            plan.expected_requests(),
            rate_text(plan.aggregate_rate),
            args.server_url,
            args.api,
            files.csv.display()
        );
    };
    let summary = observe(&plan, config, blis_net::stop::requested(), announce).map_err(|e| match e {
        // A model the server does not serve is bad input (exit 2); a server
        // that cannot be reached or does not list its models failed (exit 3).
        ObserveError::UnknownModel { .. } => anyhow::Error::new(BadInput(e.to_string())),
        ObserveError::Unreachable { .. } | ObserveError::ModelList { .. } => ServerFailed(e.to_string()).into(),
        other => other.into(),
    })?;
    let s = &summary.load;
    let lg = &summary.load_generator;
    eprintln!(
        "sent {} requests: {} ok, {} errors, {} timeouts{}; achieved {:.2} of {:.2} req/s requested; schedule delay p50 {:.2} ms, p99 {:.2} ms{}",
        s.sent,
        s.ok,
        s.errors,
        s.timeouts,
        if s.interrupted { " (interrupted)" } else { "" },
        lg["achieved_rate"].as_f64().unwrap_or(0.0),
        plan.aggregate_rate,
        lg["schedule_delay_p50_ms"].as_f64().unwrap_or(0.0),
        lg["schedule_delay_p99_ms"].as_f64().unwrap_or(0.0),
        if lg["saturated"].as_bool() == Some(true) { " — WARNING: the load generator saturated (median delay > 10 ms)" } else { "" },
    );
    if summary.model != plan_model {
        eprintln!("note: sent model {:?}, the server's spelling of {plan_model:?}", summary.model);
    }
    if summary.scrapes > 0 {
        eprintln!("scraped {} Prometheus samples into {}", summary.scrapes, files.metrics.display());
    }
    eprintln!("trace: {} and {}", files.header.display(), files.csv.display());
    check_failures(s, args.max_error_rate, &args.server_url)
}

/// [`ServerFailed`] when no request sent succeeded, or more than
/// `max_error_rate` of them failed.
fn check_failures(s: &LoadSummary, max_error_rate: f64, server_url: &str) -> anyhow::Result<()> {
    let failed = s.errors + s.timeouts;
    if s.sent == 0 {
        return Ok(());
    }
    let rate = failed as f64 / s.sent as f64;
    if s.ok == 0 {
        return Err(ServerFailed(format!(
            "no request succeeded ({} errors, {} timeouts of {} sent): is the server at {server_url} up and serving this model?",
            s.errors, s.timeouts, s.sent
        ))
        .into());
    }
    if rate > max_error_rate {
        return Err(ServerFailed(format!(
            "{failed} of {} requests failed ({:.1} %), more than --max-error-rate {max_error_rate} allows",
            s.sent,
            100.0 * rate
        ))
        .into());
    }
    Ok(())
}
