//! `blis observe`: drive a live OpenAI-compatible server with a workload and
//! record what it did as a trace v2 (`PREFIX.header.yaml` + `PREFIX.csv`),
//! one row per request written and flushed as soon as the request ends, plus
//! `PREFIX.chunks.csv` (the arrival time of every streamed chunk, for ITL)
//! and, with a Prometheus URL, `PREFIX.metrics.csv` (server gauges over
//! time). An interrupted run (Ctrl-C, SIGTERM, SIGHUP, a server crash) leaves valid files
//! holding every request that was sent.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use blis_engine::driver::Workload;
use blis_engine::request::{Outcome as EngineOutcome, RequestRecord};
use blis_engine::time::Micros;
use blis_workload::generator::{GeneratedRequest, Generator};
use blis_workload::plan::Plan as WorkloadPlan;
use blis_workload::trace_v2::{Observed, Status, TraceHeader, TraceWriter, header_path};
use serde_json::{Map as Mapping, Value};

use crate::client::{ExchangeStatus, PromptContent, RunClock, Target, rfc3339_utc};
use crate::load::{LoadSummary, Outcome, Plan, Planned, Sink, run};
use crate::serve::openai::Api;
use crate::tokenize::{prompt_text, prompt_token_ids};

/// Settings of one observation run.
#[derive(Clone, Debug)]
pub struct ObserveConfig {
    /// Server, API and request options.
    pub target: Target,
    /// Most requests in flight at once.
    pub max_concurrency: usize,
    /// Output prefix: `traces/run1` writes `traces/run1.csv` and friends.
    pub trace_prefix: PathBuf,
    /// Prometheus endpoint to scrape during the run, e.g. `http://host:8000/metrics`.
    pub prometheus_url: Option<String>,
    /// Scrape interval.
    pub scrape_interval: Duration,
    /// Leading requests to mark as warm-up (excluded from calibration).
    pub warm_up_requests: u64,
    /// Server facts for the header (`server:` section), e.g. from a YAML file.
    pub server: Option<Value>,
    /// Name of the workload (spec path or preset) for the header.
    pub workload_name: String,
}

/// Why observing failed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// An output file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server lists its models and the requested one is not among them,
    /// so every request would fail.
    #[error("{url} serves {served:?}, not {asked:?}; pass one of them as --model")]
    UnknownModel {
        /// The server's base URL.
        url: String,
        /// The model asked for.
        asked: String,
        /// The models the server lists at `/v1/models`.
        served: Vec<String>,
    },
    /// The server did not answer `GET /v1/models` (nothing listens, a
    /// timeout, a TLS failure): nothing was sent.
    #[error("cannot reach {url}: {message}")]
    Unreachable {
        /// The `/v1/models` URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The server's `/v1/models` answer is not a list of models (an error
    /// status, not JSON, `data` not a list of `{id}`): nothing was sent.
    #[error("{url}: {message}; expected an OpenAI model list, {{\"data\": [{{\"id\": \"MODEL\"}}]}}")]
    ModelList {
        /// The `/v1/models` URL.
        url: String,
        /// What is wrong with the answer.
        message: String,
    },
    /// No HTTP client can be built for a URL (for `https://`: no trusted
    /// root certificates on this system).
    #[error("{url}: cannot set up an HTTP client: {message}")]
    Client {
        /// The server or Prometheus URL.
        url: String,
        /// Why.
        message: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ObserveError + '_ {
    move |source| ObserveError::Io { path: path.to_path_buf(), source }
}

/// The output files of a run.
pub struct TraceFiles {
    /// The request CSV.
    pub csv: PathBuf,
    /// Its YAML header.
    pub header: PathBuf,
    /// Per-chunk arrival times.
    pub chunks: PathBuf,
    /// Scraped server metrics (when a Prometheus URL was given).
    pub metrics: PathBuf,
}

impl TraceFiles {
    /// The files under `prefix`.
    pub fn new(prefix: &Path) -> TraceFiles {
        let with = |ext: &str| {
            let mut name = prefix.file_name().map(|n| n.to_os_string()).unwrap_or_default();
            name.push(ext);
            prefix.with_file_name(name)
        };
        let csv = with(".csv");
        TraceFiles { header: header_path(&csv), csv, chunks: with(".chunks.csv"), metrics: with(".metrics.csv") }
    }
}

/// Adapts a workload plan to the load generator: first rounds in arrival
/// order, later rounds of sessions released when the server answered the
/// previous one.
struct SessionPlan<'a> {
    generator: Generator,
    plan: &'a WorkloadPlan,
    api: Api,
    in_flight: u64,
}

impl SessionPlan<'_> {
    fn content(&self, g: &GeneratedRequest) -> PromptContent {
        match self.api {
            Api::Completions => PromptContent::TokenIds(prompt_token_ids(&g.request.prompt)),
            Api::Chat => PromptContent::Text(prompt_text(&g.request.prompt)),
        }
    }
}

impl Plan<GeneratedRequest> for SessionPlan<'_> {
    fn peek(&mut self) -> Option<u64> {
        self.generator.peek().map(Micros::as_us)
    }

    fn take(&mut self) -> Option<Planned<GeneratedRequest>> {
        let g = self.generator.next_generated()?;
        self.in_flight += 1;
        Some(Planned { arrival_us: g.request.arrival.as_us(), prompt: self.content(&g), max_tokens: g.request.max_output_tokens, meta: g })
    }

    fn pending(&self) -> bool {
        self.plan.has_sessions() && self.in_flight > 0
    }

    /// Tells the generator the round ended when the server's answer did, with
    /// the server's token count, so the next round follows after think time.
    fn on_result(&mut self, o: &Outcome<GeneratedRequest>, now_us: u64) {
        self.in_flight -= 1;
        let r = &o.planned.meta.request;
        let ok = o.exchange.status == ExchangeStatus::Ok;
        let record = RequestRecord {
            id: r.id,
            meta: r.meta,
            instance: Some(0),
            outcome: if ok { EngineOutcome::Completed } else { EngineOutcome::TimedOut },
            arrival: r.arrival,
            enqueued: None,
            queued: None,
            first_scheduled: None,
            first_token: None,
            last_token: None,
            finished: Micros(now_us),
            input_tokens: o.exchange.usage.map_or(r.prompt_tokens(), |u| u.prompt_tokens),
            output_tokens: o.exchange.usage.map_or(0, |u| u.completion_tokens),
            cached_prompt_tokens: 0,
            preemptions: 0,
            loaded_prompt_tokens: 0,
            kv_load_wait: Micros::ZERO,
            pd: None,
        };
        self.generator.on_finish(&record);
    }
}

/// Writes each outcome as a trace row and its chunk times, flushing both.
struct TraceSink<'a> {
    plan: &'a WorkloadPlan,
    rows: TraceWriter<BufWriter<File>>,
    chunks: BufWriter<File>,
    files: &'a TraceFiles,
}

impl Sink<GeneratedRequest> for TraceSink<'_> {
    fn record(&mut self, o: &Outcome<GeneratedRequest>) -> std::io::Result<()> {
        let g = &o.planned.meta;
        let x = &o.exchange;
        let status = match x.status {
            ExchangeStatus::Ok => Status::Ok,
            ExchangeStatus::Error => Status::Error,
            ExchangeStatus::Timeout => Status::Timeout,
        };
        let observed = Observed {
            input_tokens: x.usage.map_or(g.request.prompt_tokens(), |u| u.prompt_tokens),
            output_tokens: x.usage.map_or(g.request.max_output_tokens, |u| u.completion_tokens),
            send_time_us: x.send_time_us,
            first_chunk_time_us: x.first_chunk_time_us,
            last_chunk_time_us: x.last_chunk_time_us,
            num_chunks: x.chunk_times_us.len() as u64,
            status,
            error_message: &x.error_message,
        };
        self.rows.write(self.plan, g, Some(&observed))?;
        self.rows.flush()?;
        for (i, t) in x.chunk_times_us.iter().enumerate() {
            writeln!(self.chunks, "{},{},{t}", g.request.id.0, i + 1)?;
        }
        self.chunks.flush()
    }
}

/// Sums the samples of each wanted metric in a Prometheus text exposition.
pub fn parse_prometheus(text: &str, wanted: &[&str]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        if !wanted.contains(&name) {
            continue;
        }
        let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else { continue };
        match out.iter_mut().find(|(n, _)| n == name) {
            Some((_, sum)) => *sum += v,
            None => out.push((name.to_string(), v)),
        }
    }
    out
}

/// The server gauges `blis observe` scrapes.
pub const SCRAPED_METRICS: &[&str] = &[
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
];

async fn scrape(
    url: String,
    http: reqwest::Client,
    interval: Duration,
    path: PathBuf,
    clock: RunClock,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<u64> {
    let mut out = BufWriter::new(File::create(&path)?);
    writeln!(out, "time_us,metric,value")?;
    let mut ticker = tokio::time::interval(interval);
    let mut scrapes = 0;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = ticker.tick() => {}
        }
        let t = clock.now_unix_us();
        let Ok(resp) = http.get(&url).timeout(interval.max(Duration::from_millis(200))).send().await else { continue };
        let Ok(text) = resp.text().await else { continue };
        for (name, v) in parse_prometheus(&text, SCRAPED_METRICS) {
            writeln!(out, "{t},{name},{v}")?;
        }
        out.flush()?;
        scrapes += 1;
    }
    Ok(scrapes)
}

fn percentile(sorted: &[i64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] as f64 + (sorted[hi] - sorted[lo]) as f64 * (rank - lo as f64)
}

/// Load-generator health for the header (`load_generator:`), spec §8: the
/// generator is saturated when its median schedule delay exceeds 10 ms.
fn load_generator_section(summary: &LoadSummary, requested_rate: f64, start_unix_us: u64, max_concurrency: usize) -> Value {
    let mut delays = summary.schedule_delays_us.clone();
    delays.sort_unstable();
    let p50 = percentile(&delays, 50.0) / 1e3;
    let achieved = if summary.send_duration_s > 0.0 { summary.sent.saturating_sub(1) as f64 / summary.send_duration_s } else { 0.0 };
    let mut m = Mapping::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("start_unix_us", Value::from(start_unix_us));
    put("requested_rate", Value::from(requested_rate));
    put("achieved_rate", Value::from(achieved));
    put("max_concurrency", Value::from(max_concurrency as u64));
    put("schedule_delay_p50_ms", Value::from(p50));
    put("schedule_delay_p99_ms", Value::from(percentile(&delays, 99.0) / 1e3));
    put("saturated", Value::from(p50 > 10.0));
    put("sent", Value::from(summary.sent));
    put("ok", Value::from(summary.ok));
    put("errors", Value::from(summary.errors));
    put("timeouts", Value::from(summary.timeouts));
    put("interrupted", Value::from(summary.interrupted));
    Value::Object(m)
}

fn write_header(path: &Path, header: &TraceHeader) -> Result<(), ObserveError> {
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, header.to_yaml()).map_err(io_err(path))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// What a finished observation run reports.
#[derive(Clone, Debug)]
pub struct ObserveSummary {
    /// Load-generator counters.
    pub load: LoadSummary,
    /// The `load_generator:` header section.
    pub load_generator: Value,
    /// Prometheus scrapes taken.
    pub scrapes: u64,
    /// The model name sent in every request: the one asked for, or the
    /// server's spelling of it when they differ only in case.
    pub model: String,
}

/// Runs `plan` against the server until it ends or `interrupt` resolves,
/// writing the trace files. Blocking: it runs its own async runtime.
/// `started` is called once the server's `/v1/models` answered, before any
/// file is written or request sent (to announce the run), and after
/// `interrupt` was first polled.
pub fn observe(
    plan: &WorkloadPlan,
    mut config: ObserveConfig,
    interrupt: impl std::future::Future<Output = ()> + Send + 'static,
    started: impl FnOnce(),
) -> Result<ObserveSummary, ObserveError> {
    let files = TraceFiles::new(&config.trace_prefix);
    let client = |url: &str, builder: reqwest::ClientBuilder| {
        builder.build().map_err(|e| ObserveError::Client { url: url.to_string(), message: crate::client::with_causes(&e) })
    };
    let base = &config.target.base_url;
    let http = client(base, crate::client::http_builder(base).pool_max_idle_per_host(config.max_concurrency))?;
    let scraper_http = config.prometheus_url.as_deref().map(|url| client(url, crate::client::http_builder(url))).transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(io_err(&files.csv))?;
    let discovered = runtime.block_on(discover(&http, &config.target))?;
    let mut server = match config.server.clone() {
        Some(Value::Object(m)) => m,
        _ => Mapping::new(),
    };
    if let Some(served) = discovered.spelling_of(&config.target.model, &config.target.base_url)? {
        let asked = Value::from(std::mem::replace(&mut config.target.model, served.clone()));
        if server.get("model") == Some(&asked) {
            server.insert("model".to_string(), Value::from(served));
        }
    }
    if let Some(scale) = discovered.time_scale {
        server.insert("time-scale".to_string(), Value::from(scale));
    }
    // Polled once now, so that signal handlers it installs are in place
    // before the run is announced (a stop asked for from then on is seen).
    let mut interrupt: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(interrupt);
    if runtime.block_on(std::future::poll_fn(|cx| Poll::Ready(interrupt.as_mut().poll(cx).is_ready()))) {
        interrupt = Box::pin(std::future::ready(()));
    }
    started();
    if let Some(dir) = files.csv.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let clock = RunClock::start();
    let mut header = TraceHeader::generated(plan, &config.workload_name);
    header.mode = Some("real".into());
    header.created_at = Some(rfc3339_utc(clock.start_unix_us()));
    header.warm_up_requests = Some(config.warm_up_requests);
    header.server = (!server.is_empty()).then_some(Value::Object(server));
    write_header(&files.header, &header)?;

    let rows = TraceWriter::new(BufWriter::new(File::create(&files.csv).map_err(io_err(&files.csv))?)).map_err(io_err(&files.csv))?;
    let mut chunks = BufWriter::new(File::create(&files.chunks).map_err(io_err(&files.chunks))?);
    writeln!(chunks, "request_id,chunk_index,time_us").map_err(io_err(&files.chunks))?;
    let mut sink = TraceSink { plan, rows, chunks, files: &files };
    let mut session_plan = SessionPlan { generator: plan.generator(), plan, api: config.target.api, in_flight: 0 };

    let (load, scrapes) = runtime.block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let scraper = config
            .prometheus_url
            .clone()
            .zip(scraper_http)
            .map(|(url, http)| tokio::spawn(scrape(url, http, config.scrape_interval, files.metrics.clone(), clock, stop_rx)));
        let target = Arc::new(config.target.clone());
        let load = run(&mut session_plan, http, target, config.max_concurrency, clock, &mut sink, interrupt).await;
        let _ = stop_tx.send(());
        let scrapes = match scraper {
            Some(task) => task.await.ok().and_then(Result::ok).unwrap_or(0),
            None => 0,
        };
        (load, scrapes)
    });
    let load = load.map_err(io_err(&sink.files.csv))?;
    let load_generator = load_generator_section(&load, plan.aggregate_rate, clock.start_unix_us(), config.max_concurrency);
    header.load_generator = Some(load_generator.clone());
    write_header(&files.header, &header)?;
    Ok(ObserveSummary { load, load_generator, scrapes, model: config.target.model })
}

/// What `GET /v1/models` told us.
#[derive(Default)]
struct Discovered {
    /// The served model names; `None` when the server has no `/v1/models` (HTTP 404).
    models: Option<Vec<String>>,
    time_scale: Option<f64>,
}

impl Discovered {
    /// How the server spells `asked`: `None` when it has no model list or
    /// lists `asked` itself, the listed name when exactly one differs from
    /// it only in case (BLIS's model ids are case-insensitive, vLLM's are
    /// not), an error when none matches (an empty list included).
    fn spelling_of(&self, asked: &str, url: &str) -> Result<Option<String>, ObserveError> {
        let Some(models) = &self.models else { return Ok(None) };
        if models.iter().any(|m| m == asked) {
            return Ok(None);
        }
        let mut same = models.iter().filter(|m| m.eq_ignore_ascii_case(asked));
        match (same.next(), same.next()) {
            (Some(m), None) => Ok(Some(m.clone())),
            _ => Err(ObserveError::UnknownModel { url: url.to_string(), asked: asked.to_string(), served: models.clone() }),
        }
    }

    /// Reads a `/v1/models` answer (`url` names it in errors): `data`, a
    /// list of `{id}` (and, from `blis serve`, `blis_time_scale`).
    fn parse(body: &[u8], url: &str) -> Result<Discovered, ObserveError> {
        let malformed = |message: &str| ObserveError::ModelList { url: url.to_string(), message: message.to_string() };
        let v: Value = serde_json::from_slice(body).map_err(|_| malformed("the answer is not JSON"))?;
        let data = v.get("data").and_then(Value::as_array).ok_or_else(|| malformed("the answer has no `data` list"))?;
        let models = data.iter().map(|m| m.get("id").and_then(Value::as_str).map(str::to_string)).collect::<Option<Vec<_>>>();
        Ok(Discovered {
            models: Some(models.ok_or_else(|| malformed("an entry of `data` has no string `id`"))?),
            time_scale: data.iter().find_map(|m| m.get("blis_time_scale").and_then(Value::as_f64)),
        })
    }
}

/// Server discovery (spec §8), before anything is sent: the served model
/// names and, for `blis serve`, its time scale. A server without
/// `/v1/models` (HTTP 404) yields nothing; one that cannot be reached, or
/// answers with another error or with something other than a model list,
/// is an error.
async fn discover(http: &reqwest::Client, target: &Target) -> Result<Discovered, ObserveError> {
    let url = format!("{}/v1/models", target.base_url.trim_end_matches('/'));
    let mut req = http.get(&url).timeout(Duration::from_secs(10));
    if let Some(key) = &target.api_key {
        req = req.bearer_auth(key);
    }
    let unreachable = |e: reqwest::Error| ObserveError::Unreachable { url: url.clone(), message: crate::client::with_causes(&e) };
    let resp = req.send().await.map_err(unreachable)?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(Discovered::default());
    }
    if !status.is_success() {
        return Err(ObserveError::ModelList { url, message: format!("HTTP {status}") });
    }
    Discovered::parse(&resp.bytes().await.map_err(unreachable)?, &url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_samples_are_summed_per_metric() {
        let text = "# HELP x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"a\",engine=\"0\"} 3\n\
                    vllm:num_requests_running{model_name=\"a\",engine=\"1\"} 2\nvllm:other 9\nvllm:kv_cache_usage_perc 0.25\n";
        assert_eq!(
            parse_prometheus(text, SCRAPED_METRICS),
            [("vllm:num_requests_running".to_string(), 5.0), ("vllm:kv_cache_usage_perc".to_string(), 0.25)]
        );
    }

    #[test]
    fn a_model_list_that_is_not_one_is_an_error_naming_the_url() {
        let url = "http://h/v1/models";
        for (body, needle) in [
            ("{\"data\": 5}", "no `data` list"),
            ("{}", "no `data` list"),
            ("<html>", "not JSON"),
            ("{\"data\": [{\"name\": \"m\"}]}", "no string `id`"),
        ] {
            let err = Discovered::parse(body.as_bytes(), url).err().unwrap_or_else(|| panic!("{body} accepted")).to_string();
            assert!(err.starts_with(url) && err.contains(needle), "{body}: {err}");
        }
        let empty = Discovered::parse(b"{\"data\": []}", url).unwrap();
        assert!(empty.spelling_of("m", url).is_err(), "a server that lists no model serves none");
        let listed = Discovered::parse(b"{\"data\": [{\"id\": \"m\", \"blis_time_scale\": 2.0}]}", url).unwrap();
        assert_eq!((listed.spelling_of("m", url).unwrap(), listed.time_scale), (None, Some(2.0)));
    }

    #[test]
    fn the_model_is_sent_as_the_server_spells_it() {
        let d = Discovered { models: Some(vec!["meta-llama/Llama-3.1-8B-Instruct".into(), "other".into()]), time_scale: None };
        let url = "http://h";
        assert_eq!(d.spelling_of("meta-llama/Llama-3.1-8B-Instruct", url).unwrap(), None);
        assert_eq!(d.spelling_of("meta-llama/llama-3.1-8b-instruct", url).unwrap().as_deref(), Some("meta-llama/Llama-3.1-8B-Instruct"));
        let err = d.spelling_of("qwen", url).unwrap_err().to_string();
        assert!(err.contains("\"qwen\"") && err.contains("other") && err.contains("--model"), "{err}");
        assert_eq!(Discovered::default().spelling_of("anything", url).unwrap(), None, "a server without /v1/models takes any name");
        let twins = Discovered { models: Some(vec!["MODEL".into(), "model".into()]), time_scale: None };
        assert!(twins.spelling_of("Model", url).is_err(), "two spellings: ambiguous");
        assert_eq!(twins.spelling_of("model", url).unwrap(), None);
    }

    #[test]
    fn trace_files_share_the_prefix() {
        let f = TraceFiles::new(Path::new("traces/run1"));
        assert_eq!(f.csv, Path::new("traces/run1.csv"));
        assert_eq!(f.header, Path::new("traces/run1.header.yaml"));
        assert_eq!(f.chunks, Path::new("traces/run1.chunks.csv"));
    }
}
