//! `blis serve`: an OpenAI-compatible HTTP server whose timing comes from the
//! simulator — for testing gateways, routers and load generators without GPUs.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions` (streaming SSE
//! or a single JSON response, `stream_options.include_usage`), `GET
//! /v1/models`, `GET /health`, `GET /metrics` (Prometheus text with vLLM's
//! metric names). Each request enters the simulated engine at its wall-clock
//! arrival (`realtime.rs`); its tokens are sent when the simulated engine emits
//! them. Failures can be injected at a configured rate: HTTP 429, HTTP 503,
//! or a connection dropped mid-response.
//!
//! Connections are bounded in time ([`ServeTimeouts`], `conn.rs`): slow or
//! half-sent requests and idle keep-alive connections are closed, and
//! [`RunningServer::stop`] returns within a stated bound, ending streams in
//! flight with a final error event and `data: [DONE]`.

mod conn;
mod metrics;
pub mod openai;
mod realtime;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc as std_mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use blis_engine::instance::Instance;
use blis_engine::latency::LatencyModel;
use blis_engine::request::{Outcome, RequestId, output_stream_seed};
use blis_engine::rng::{SimRng, subsystem_rng};
use blis_engine::scheduler::InstanceConfig;
use blis_workload::synthetic::{LengthRole, LengthSpec, SpecError};
use futures_util::stream;
use rand::RngExt;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

pub use conn::FLUSH_MS;
use conn::Stage;
use openai::{Api, ApiError, GenerationRequest, ResponseId};
pub use realtime::StreamEvent;
use realtime::{Command, OUTPUT_SALT};

use crate::tokenize::output_token_text;

/// The largest [`ServeConfig::max_body_bytes`], 1 GiB: a request body is
/// buffered whole, and no prompt comes near it.
pub const MAX_BODY_BYTES: usize = 1 << 30;

/// Everything `blis serve` needs.
#[derive(Clone)]
pub struct ServeConfig {
    /// Model name clients must send (and `/v1/models` lists).
    pub model_name: String,
    /// The simulated instance.
    pub instance: InstanceConfig,
    /// Its latency model.
    pub latency: Arc<dyn LatencyModel>,
    /// Simulated seconds per wall-clock second (2 = twice as fast as real time).
    pub time_scale: f64,
    /// Probability that a request fails (429, 503 or a dropped connection, equally likely).
    pub failure_rate: f64,
    /// Seed of failure injection and output lengths.
    pub seed: u64,
    /// Output length when the client does not set `ignore_eos` (capped by
    /// `max_tokens`); `None` means every request generates `max_tokens`.
    pub natural_output: Option<LengthSpec>,
    /// Largest accepted request body, bytes, from 1 to [`MAX_BODY_BYTES`];
    /// a request declaring a longer one is answered 413 without being read.
    pub max_body_bytes: usize,
    /// How long clients may take, and how long shutdown waits.
    pub timeouts: ServeTimeouts,
    /// Publish vLLM's KV events over ZeroMQ (`--kv-events-config`).
    pub kv_events: Option<crate::kv_events::KvEventsConfig>,
}

/// Time limits of `blis serve`'s connections and of its shutdown, ms.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ServeTimeouts {
    /// A connection with no request in flight is closed when a request head
    /// is still incomplete this long after the connection was accepted or
    /// after the head's first byte arrived (≥ 1).
    pub header_read_ms: u64,
    /// A request whose body has not fully arrived this long after its head
    /// gets HTTP 408 and its connection is closed (≥ 1).
    pub body_read_ms: u64,
    /// A kept-alive connection is closed when no byte of a next request
    /// arrives this long after the previous response ended (≥ 1).
    pub keep_alive_idle_ms: u64,
    /// After [`RunningServer::stop`], how long requests in flight may run on
    /// before they are ended (a stream with an error event and
    /// `data: [DONE]`, a whole response with HTTP 503); `stop` returns at
    /// most [`FLUSH_MS`] after that.
    pub shutdown_grace_ms: u64,
}

impl ServeTimeouts {
    /// Header 10 s, body 30 s, idle 60 s, shutdown grace 5 s.
    pub const DEFAULT: ServeTimeouts =
        ServeTimeouts { header_read_ms: 10_000, body_read_ms: 30_000, keep_alive_idle_ms: 60_000, shutdown_grace_ms: 5_000 };

    /// The first timeout that is 0 (which would close every connection at once), as its flag.
    fn zero_timeout(&self) -> Option<&'static str> {
        [
            ("--header-timeout-ms", self.header_read_ms),
            ("--body-timeout-ms", self.body_read_ms),
            ("--idle-timeout-ms", self.keep_alive_idle_ms),
        ]
        .into_iter()
        .find_map(|(flag, ms)| (ms == 0).then_some(flag))
    }
}

impl Default for ServeTimeouts {
    /// [`ServeTimeouts::DEFAULT`].
    fn default() -> ServeTimeouts {
        ServeTimeouts::DEFAULT
    }
}

/// Invalid server settings.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ServeConfigError {
    /// Time scale outside (0, 1e6].
    #[error("--time-scale {0:?}: must be in (0, 1e6] (simulated seconds per wall-clock second)")]
    TimeScale(f64),
    /// Failure rate outside [0, 1].
    #[error("--failure-rate {0}: must be between 0 and 1")]
    FailureRate(f64),
    /// The natural output length cannot be sampled.
    #[error(transparent)]
    NaturalOutput(#[from] SpecError),
    /// An empty served model name (no client could name it).
    #[error("--served-model-name: must not be empty")]
    EmptyModelName,
    /// A body limit of 0 bytes (every request would be refused) or over
    /// [`MAX_BODY_BYTES`] (a client could make the server buffer that much).
    #[error("--max-body-bytes {0}: must be from 1 to {MAX_BODY_BYTES} (1Gi) bytes")]
    BodyLimit(usize),
    /// A connection timeout of 0 ms (every connection would be closed at once); names its flag.
    #[error("{0} 0: must be at least 1 ms")]
    ZeroTimeout(&'static str),
    /// The instance cannot run.
    #[error(transparent)]
    Instance(#[from] blis_engine::scheduler::InstanceConfigError),
}

struct AppState {
    model_name: String,
    time_scale: f64,
    max_model_len: u32,
    kv_capacity_tokens: u64,
    commands: std_mpsc::Sender<Command>,
    next_id: AtomicU64,
    faults: Mutex<SimRng>,
    failure_rate: f64,
    seed: u64,
    natural_output: Option<LengthSpec>,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    /// Followed by handlers to end their responses at shutdown.
    stage: watch::Receiver<Stage>,
    health: Health,
}

/// What `/health` reports.
struct Health {
    /// Cleared when the simulation thread ends (see [`spawn_simulation`]).
    sim_alive: Arc<AtomicBool>,
    stage: watch::Receiver<Stage>,
}

impl Health {
    /// 200 while the simulation runs and the server is not shutting down, else 503.
    fn status(&self) -> StatusCode {
        if self.sim_alive.load(Ordering::Acquire) && *self.stage.borrow() == Stage::Serving {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// Clears its flag when dropped: when the thread holding it ends, by
/// returning or by panicking.
struct ClearOnDrop(Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Runs `simulation` on its own thread; the flag is true until that thread ends.
fn spawn_simulation(simulation: impl FnOnce() + Send + 'static) -> std::io::Result<(Arc<AtomicBool>, std::thread::JoinHandle<()>)> {
    let alive = Arc::new(AtomicBool::new(true));
    let guard = ClearOnDrop(alive.clone());
    let thread = std::thread::Builder::new().name("blis-serve-sim".into()).spawn(move || {
        let _guard = guard;
        simulation();
    })?;
    Ok((alive, thread))
}

/// A running server.
pub struct RunningServer {
    /// The address it listens on.
    pub local_addr: SocketAddr,
    /// Where KV events are published (`tcp://HOST:PORT`), when they are.
    pub kv_events_endpoint: Option<String>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// Stops accepting connections, closes those with no request in flight,
    /// lets requests in flight finish for up to
    /// [`ServeTimeouts::shutdown_grace_ms`], ends the rest (a stream with an
    /// error event and `data: [DONE]`, a whole response with HTTP 503), and
    /// returns once every connection is closed: at most `shutdown_grace_ms +`
    /// [`FLUSH_MS`] after the call. Dropping the server without calling it
    /// shuts down the same way, in the background.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.await.map_err(std::io::Error::other)
    }
}

/// Binds `addr` and starts serving. The simulation runs on its own thread.
pub async fn start(config: ServeConfig, addr: SocketAddr) -> Result<RunningServer, StartError> {
    if !(config.time_scale > 0.0 && config.time_scale <= 1e6) {
        return Err(ServeConfigError::TimeScale(config.time_scale).into());
    }
    if !(0.0..=1.0).contains(&config.failure_rate) {
        return Err(ServeConfigError::FailureRate(config.failure_rate).into());
    }
    if let Some(output) = &config.natural_output {
        output.validate(LengthRole::Output).map_err(ServeConfigError::from)?;
    }
    if config.model_name.is_empty() {
        return Err(ServeConfigError::EmptyModelName.into());
    }
    if !(1..=MAX_BODY_BYTES).contains(&config.max_body_bytes) {
        return Err(ServeConfigError::BodyLimit(config.max_body_bytes).into());
    }
    if let Some(flag) = config.timeouts.zero_timeout() {
        return Err(ServeConfigError::ZeroTimeout(flag).into());
    }
    let mut instance_config = config.instance.clone();
    let (publisher, kv_events_endpoint) = match config.kv_events.as_ref().filter(|k| k.publishes()) {
        Some(k) => {
            instance_config.disable_hybrid_kv();
            instance_config.kv_events = true;
            let (p, endpoint) = crate::kv_events::Publisher::start(k).await.map_err(StartError::Io)?;
            (Some(p), Some(endpoint))
        }
        None => (None, None),
    };
    let instance = Instance::new(0, instance_config, config.latency.clone()).map_err(ServeConfigError::from)?;
    let kv_capacity_tokens = u64::from(instance.kv().capacity_blocks()) * u64::from(config.instance.block_size);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(StartError::Io)?;
    let local_addr = listener.local_addr().map_err(StartError::Io)?;
    let (tx, rx) = std_mpsc::channel();
    let (scale, name) = (config.time_scale, config.model_name.clone());
    let (sim_alive, _) = spawn_simulation(move || realtime::run(instance, scale, name, rx, publisher)).map_err(StartError::Io)?;
    let (stage_tx, stage) = watch::channel(Stage::Serving);
    let state = Arc::new(AppState {
        model_name: config.model_name,
        time_scale: config.time_scale,
        max_model_len: config.instance.scheduler.max_model_len,
        kv_capacity_tokens,
        commands: tx,
        next_id: AtomicU64::new(0),
        faults: Mutex::new(subsystem_rng(config.seed, "serve/faults")),
        failure_rate: config.failure_rate,
        seed: config.seed,
        natural_output: config.natural_output,
        max_body_bytes: config.max_body_bytes,
        body_read_timeout: Duration::from_millis(config.timeouts.body_read_ms),
        health: Health { sim_alive, stage: stage.clone() },
        stage,
    });
    let app = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(|State(s): State<Arc<AppState>>| async move { s.health.status() }))
        .route("/metrics", get(prometheus))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        // A known route asked with another method: an error body like every other, not an empty 405.
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            let message = format!("method {method} is not allowed on this route");
            error_response(&ApiError { status: StatusCode::METHOD_NOT_ALLOWED, message, kind: "invalid_request_error", param: None })
        })
        .fallback(|| async {
            error_response(&ApiError {
                status: StatusCode::NOT_FOUND,
                message: "no such route".into(),
                kind: "invalid_request_error",
                param: None,
            })
        })
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state);
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(conn::serve(listener, app, config.timeouts, stage_tx, stop_rx));
    Ok(RunningServer { local_addr, kv_events_endpoint, shutdown: Some(stop_tx), task })
}

/// Serves until a stop is requested (Ctrl-C, SIGTERM or SIGHUP: [`crate::stop`]) on a multi-threaded runtime of its own;
/// calls `on_ready` with the bound address once it accepts connections, and
/// the KV events endpoint if it publishes them.
pub fn run_until_interrupted(
    config: ServeConfig,
    addr: SocketAddr,
    on_ready: impl FnOnce(SocketAddr, Option<&str>),
) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(StartError::Io)?;
    runtime.block_on(async {
        let server = start(config, addr).await?;
        on_ready(server.local_addr, server.kv_events_endpoint.as_deref());
        crate::stop::requested().await;
        server.stop().await.map_err(StartError::Io)
    })
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Bad settings.
    #[error(transparent)]
    Config(#[from] ServeConfigError),
    /// The address could not be bound (or a thread not started).
    #[error("{0}")]
    Io(std::io::Error),
}

fn error_response(e: &ApiError) -> Response {
    (e.status, axum::Json(e.body())).into_response()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn models(State(s): State<Arc<AppState>>) -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{ "id": s.model_name, "object": "model", "created": unix_now(), "owned_by": "blis", "max_model_len": s.max_model_len,
                   "blis_time_scale": s.time_scale }]
    }))
    .into_response()
}

async fn prometheus(State(s): State<Arc<AppState>>) -> Response {
    let (tx, rx) = oneshot::channel();
    if s.commands.send(Command::Metrics(tx)).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match rx.await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// vLLM's `POST /reset_prefix_cache` (served by vLLM in dev mode): 200 when
/// the GPU prefix cache was reset (and, with KV events on, `AllBlocksCleared`
/// published); 409 while requests hold blocks, which vLLM refuses too.
async fn reset_prefix_cache(State(s): State<Arc<AppState>>) -> Response {
    let (tx, rx) = oneshot::channel();
    if s.commands.send(Command::ResetPrefixCache(tx)).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match rx.await {
        Ok(true) => StatusCode::OK.into_response(),
        Ok(false) => error_response(&ApiError {
            status: StatusCode::CONFLICT,
            message: "requests hold KV blocks; the prefix cache can be reset only when none runs".into(),
            kind: "invalid_request_error",
            param: None,
        }),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn completions(State(s): State<Arc<AppState>>, request: Request) -> Response {
    generate(s, Api::Completions, request).await
}

async fn chat_completions(State(s): State<Arc<AppState>>, request: Request) -> Response {
    generate(s, Api::Chat, request).await
}

/// The request body, within the body read timeout and the body limit; else the error response.
/// A body whose `Content-Length` is over the limit is refused with 413 at
/// once, unread (a client that waits for `100 Continue`, or is slow to send,
/// would otherwise wait out the body timeout for a 408).
async fn read_body(s: &AppState, request: Request) -> Result<Bytes, Response> {
    if let Some(declared) = declared_length(&request).filter(|&n| n > s.max_body_bytes as u64) {
        let message = format!(
            "the request body is {declared} bytes, more than the {} bytes this server accepts (--max-body-bytes)",
            s.max_body_bytes
        );
        let mut response =
            error_response(&ApiError { status: StatusCode::PAYLOAD_TOO_LARGE, message, kind: "invalid_request_error", param: None });
        // The body is never read: do not read it as a next request.
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        return Err(response);
    }
    match tokio::time::timeout(s.body_read_timeout, Bytes::from_request(request, &())).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(rejection)) => Err(error_response(&ApiError {
            status: rejection.status(),
            message: rejection.body_text(),
            kind: "invalid_request_error",
            param: None,
        })),
        Err(_) => {
            let message = format!("the request body did not arrive within {} ms", s.body_read_timeout.as_millis());
            let mut response =
                error_response(&ApiError { status: StatusCode::REQUEST_TIMEOUT, message, kind: "invalid_request_error", param: None });
            // The rest of the body may still be on its way: do not read it as a next request.
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            Err(response)
        }
    }
}

/// The request's `Content-Length`, when it declares one that is a number
/// (hyper refuses a malformed one before any handler runs).
fn declared_length(request: &Request) -> Option<u64> {
    request.headers().get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// What a handler waiting on the simulation gets next.
enum Next {
    /// An event of its request.
    Event(StreamEvent),
    /// The simulation thread is gone.
    SimulationGone,
    /// The shutdown grace is over: end the response now.
    ShuttingDown,
}

/// The error a response still running when the shutdown grace ends is ended with.
fn shutting_down() -> ApiError {
    ApiError { status: StatusCode::SERVICE_UNAVAILABLE, message: "the server is shutting down".into(), kind: "server_error", param: None }
}

/// What failure, if any, to inject into one request.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Fault {
    None,
    Status(StatusCode),
    /// Drop the connection after this many tokens.
    DropAfter(u32),
}

impl AppState {
    fn draw_fault(&self, tokens: u32) -> Fault {
        if self.failure_rate == 0.0 {
            return Fault::None;
        }
        let mut rng = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        if rng.random::<f64>() >= self.failure_rate {
            return Fault::None;
        }
        match rng.random_range(0..3u8) {
            0 => Fault::Status(StatusCode::TOO_MANY_REQUESTS),
            1 => Fault::Status(StatusCode::SERVICE_UNAVAILABLE),
            _ => Fault::DropAfter(rng.random_range(0..tokens.max(1))),
        }
    }

    /// Output tokens to generate for request `id`.
    fn output_tokens(&self, id: RequestId, max_tokens: u32, ignore_eos: bool) -> u32 {
        match (&self.natural_output, ignore_eos) {
            (Some(spec), false) => {
                let mut rng = subsystem_rng(self.seed ^ id.0, "serve/output-length");
                spec.sample(&mut rng).min(max_tokens)
            }
            _ => max_tokens,
        }
    }
}

/// Tells the simulation to abort a request whose client went away, unless it finished.
struct AbandonGuard {
    id: RequestId,
    commands: std_mpsc::Sender<Command>,
    done: bool,
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.commands.send(Command::Abandon(self.id));
        }
    }
}

async fn generate(s: Arc<AppState>, api: Api, request: Request) -> Response {
    let body = match read_body(&s, request).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let json: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error_response(&ApiError::invalid("body", format!("invalid JSON: {e}"))),
    };
    let req = match GenerationRequest::parse(api, &json, &s.model_name) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let prompt_tokens = req.prompt.len() as u32;
    let default_max = match api {
        Api::Completions => 16,
        Api::Chat => s.max_model_len.saturating_sub(prompt_tokens).max(1),
    };
    let max_tokens = req.max_tokens.unwrap_or(default_max);
    let requested = u64::from(prompt_tokens) + u64::from(max_tokens);
    if requested > u64::from(s.max_model_len) {
        return error_response(&ApiError::invalid(
            "max_tokens",
            format!(
                "This model's maximum context length is {} tokens. However, you requested {requested} tokens ({prompt_tokens} in the prompt, {max_tokens} for the completion). Please reduce the length of the prompt or completion.",
                s.max_model_len
            ),
        ));
    }
    let id = RequestId(s.next_id.fetch_add(1, Ordering::Relaxed));
    let output_tokens = s.output_tokens(id, max_tokens, req.ignore_eos);
    if u64::from(prompt_tokens) + u64::from(output_tokens) > s.kv_capacity_tokens {
        return error_response(&ApiError::invalid(
            "prompt",
            format!("the request needs more than the {} tokens the KV cache holds", s.kv_capacity_tokens),
        ));
    }
    let fault = s.draw_fault(output_tokens);
    if let Fault::Status(status) = fault {
        let message = if status == StatusCode::TOO_MANY_REQUESTS {
            "Too many requests (injected failure)"
        } else {
            "Service unavailable (injected failure)"
        };
        let kind = if status == StatusCode::TOO_MANY_REQUESTS { "rate_limit_error" } else { "server_error" };
        return error_response(&ApiError { status, message: message.into(), kind, param: None });
    }
    let (tx, rx) = mpsc::unbounded_channel();
    if s.commands.send(Command::Submit { id, prompt: req.prompt, output_tokens, events: tx }).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let guard = AbandonGuard { id, commands: s.commands.clone(), done: false };
    let rid = ResponseId {
        id: format!("{}-{}", if api == Api::Chat { "chatcmpl" } else { "cmpl" }, id.0),
        created: unix_now(),
        model: s.model_name.clone(),
        api,
    };
    let finish_reason = if output_tokens == max_tokens { "length" } else { "stop" };
    let seed = output_stream_seed(id, OUTPUT_SALT);
    let drop_after = match fault {
        Fault::DropAfter(k) => Some(k),
        _ => None,
    };
    let stage = s.stage.clone();
    let answer = Answer {
        rx,
        stage,
        guard,
        rid,
        seed,
        output_tokens,
        finish_reason,
        prompt_tokens,
        include_usage: req.include_usage,
        drop_after,
        phase: Phase::Tokens,
    };
    if !req.stream {
        return answer.whole().await;
    }
    let body = Body::from_stream(stream::unfold(answer, Answer::next));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

enum Phase {
    Tokens,
    Usage,
    Done,
    End,
}

/// One answer being generated: its simulation events, turned into a whole
/// response or an event stream.
struct Answer {
    rx: mpsc::UnboundedReceiver<StreamEvent>,
    stage: watch::Receiver<Stage>,
    guard: AbandonGuard,
    rid: ResponseId,
    seed: u64,
    output_tokens: u32,
    finish_reason: &'static str,
    prompt_tokens: u32,
    include_usage: bool,
    drop_after: Option<u32>,
    phase: Phase,
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

impl Answer {
    /// The next event of the request, or why there is none.
    async fn next_event(&mut self) -> Next {
        tokio::select! {
            biased;
            // A server whose stage is gone is shutting down too.
            _ = self.stage.wait_for(|s| *s == Stage::Ending) => Next::ShuttingDown,
            event = self.rx.recv() => event.map_or(Next::SimulationGone, Next::Event),
        }
    }

    /// The whole (non-streamed) response, once the request finished.
    async fn whole(mut self) -> Response {
        let mut text = String::new();
        loop {
            match self.next_event().await {
                Next::Event(StreamEvent::Token { index }) => {
                    if self.drop_after.is_some_and(|k| index > k) {
                        // Injected failure: the connection dies before a response is sent.
                        return Response::new(Body::from_stream(stream::once(async {
                            Err::<Bytes, _>(std::io::Error::other("injected connection drop"))
                        })));
                    }
                    text.push(' ');
                    text.push_str(output_token_text(self.seed, index));
                }
                Next::Event(StreamEvent::Finished(record)) => {
                    self.guard.done = true;
                    if let Outcome::Dropped(reason) = record.outcome {
                        return error_response(&ApiError::invalid("prompt", format!("request refused: {}", reason.as_str())));
                    }
                    return axum::Json(self.rid.full(&text, self.finish_reason, self.prompt_tokens, record.output_tokens)).into_response();
                }
                Next::SimulationGone => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
                Next::ShuttingDown => return error_response(&shutting_down()),
            }
        }
    }

    /// The next piece of the event stream; an `Err` aborts the connection.
    async fn next(mut self) -> Option<(Result<Bytes, std::io::Error>, Answer)> {
        loop {
            match self.phase {
                Phase::End => return None,
                Phase::Usage => {
                    self.phase = Phase::Done;
                    let chunk = sse(&self.rid.usage_chunk(self.prompt_tokens, self.output_tokens));
                    return Some((Ok(chunk), self));
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    return Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), self));
                }
                Phase::Tokens => {}
            }
            match self.next_event().await {
                Next::Event(StreamEvent::Token { index }) => {
                    if self.drop_after.is_some_and(|k| index > k) {
                        // The guard aborts the simulated request when the stream is dropped.
                        self.phase = Phase::End;
                        return Some((Err(std::io::Error::other("injected connection drop")), self));
                    }
                    let text = format!(" {}", output_token_text(self.seed, index));
                    let last = index == self.output_tokens;
                    let mut bytes = Vec::new();
                    if index == 1 && self.rid.api == Api::Chat {
                        bytes.extend_from_slice(&sse(&self.rid.role_chunk(self.include_usage)));
                    }
                    let finish = last.then_some(self.finish_reason);
                    bytes.extend_from_slice(&sse(&self.rid.chunk(&text, finish, self.include_usage)));
                    return Some((Ok(Bytes::from(bytes)), self));
                }
                Next::Event(StreamEvent::Finished(_)) => {
                    self.guard.done = true;
                    self.phase = if self.include_usage { Phase::Usage } else { Phase::Done };
                }
                Next::SimulationGone => {
                    self.phase = Phase::End;
                    return Some((Err(std::io::Error::other("the simulation stopped")), self));
                }
                Next::ShuttingDown => {
                    // The guard aborts the simulated request when the stream is dropped.
                    self.phase = Phase::Done;
                    return Some((Ok(sse(&shutting_down().body())), self));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(sim_alive: Arc<AtomicBool>, stage: Stage) -> StatusCode {
        // The receiver keeps the value after its sender is gone.
        let (_, stage) = watch::channel(stage);
        Health { sim_alive, stage }.status()
    }

    #[test]
    fn health_is_503_once_the_simulation_thread_has_died() {
        // resume_unwind panics without running the panic hook, so nothing is printed.
        let (alive, thread) = spawn_simulation(|| std::panic::resume_unwind(Box::new("simulated crash"))).unwrap();
        assert!(thread.join().is_err(), "the thread panicked");
        assert_eq!(health(alive, Stage::Serving), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn health_is_200_while_the_simulation_runs_and_503_after_it_returns() {
        let (release, wait) = std_mpsc::channel::<()>();
        let (alive, thread) = spawn_simulation(move || {
            let _ = wait.recv();
        })
        .unwrap();
        assert_eq!(health(alive.clone(), Stage::Serving), StatusCode::OK);
        drop(release);
        thread.join().unwrap();
        assert_eq!(health(alive, Stage::Serving), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn health_is_503_while_shutting_down() {
        for stage in [Stage::Draining, Stage::Ending] {
            assert_eq!(health(Arc::new(AtomicBool::new(true)), stage), StatusCode::SERVICE_UNAVAILABLE);
        }
    }

    #[test]
    fn zero_timeouts_are_named_by_their_flag() {
        assert_eq!(ServeTimeouts::DEFAULT.zero_timeout(), None);
        assert_eq!(ServeTimeouts { shutdown_grace_ms: 0, ..ServeTimeouts::DEFAULT }.zero_timeout(), None);
        assert_eq!(ServeTimeouts { keep_alive_idle_ms: 0, ..ServeTimeouts::DEFAULT }.zero_timeout(), Some("--idle-timeout-ms"));
    }
}
