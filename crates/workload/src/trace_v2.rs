//! Trace v2 (spec section 7): a YAML header plus a CSV with one row per
//! request. `blis workload generate` writes it; `blis run --trace` replays
//! it (spec section 9) by rebuilding each request's synthetic tokens from
//! its client, prefix group and session with [`crate::content`], so a
//! generated trace replays as exactly the requests the spec produced.
//!
//! The header of `requests.csv` is `requests.header.yaml`. Besides the
//! spec's keys it may hold a `blis:` section (prefix lengths per group,
//! context growth per client, label order) that replay needs to rebuild
//! shared prefixes and sessions; without it rows replay with private
//! prompts only.
//!
//! Replay reads the CSV twice, streaming both times: a first pass checks
//! every row (so a bad row fails before the simulation starts) and collects
//! the label names; the second pass feeds the simulation.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use blis_engine::request::{Labels, Request, RequestId, RequestMeta, SloClassId, TenantId, TokenRun, TokenSeq};
use blis_engine::driver::Workload;
use blis_engine::time::Micros;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::content::{ClientContent, Turn, first_prompt, next_prompt, prefix_run, reasoning_tokens};
use crate::error::WorkloadError;
use crate::generator::GeneratedRequest;
use crate::plan::Plan;
use crate::spec::ContextGrowth;
use blis_data::textfile::LineCapped;

/// The CSV columns, in the order written.
pub const COLUMNS: [&str; 22] = [
    "request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index", "prefix_group", "streaming", "input_tokens",
    "output_tokens", "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "reason_ratio", "arrival_time_us", "send_time_us",
    "first_chunk_time_us", "last_chunk_time_us", "num_chunks", "status", "error_message",
];

/// Outcome of a recorded request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Completed.
    Ok,
    /// The server answered with an error.
    Error,
    /// The client gave up.
    Timeout,
}

impl Status {
    /// The column value.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Timeout => "timeout",
        }
    }

    /// Parses a column value.
    pub fn parse(s: &str) -> Result<Status, String> {
        [Status::Ok, Status::Error, Status::Timeout]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("column status: {s:?} is not a status; allowed: ok, error, timeout"))
    }
}

/// One CSV row.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Row<'a> {
    /// Sequential id.
    pub request_id: u64,
    /// Client.
    pub client_id: &'a str,
    /// Tenant.
    pub tenant_id: &'a str,
    /// SLO class.
    pub slo_class: &'a str,
    /// Multi-turn session (empty for single-turn requests).
    pub session_id: &'a str,
    /// 0-based round within the session.
    pub round_index: u32,
    /// Shared-prefix group (empty for none).
    pub prefix_group: &'a str,
    /// Streaming response.
    pub streaming: bool,
    /// Prompt tokens (prefix included).
    pub input_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Text tokens of the prompt.
    pub text_tokens: u32,
    /// Image tokens of the prompt.
    pub image_tokens: u32,
    /// Audio tokens of the prompt.
    pub audio_tokens: u32,
    /// Video tokens of the prompt.
    pub video_tokens: u32,
    /// Fraction of the output that is reasoning.
    pub reason_ratio: f64,
    /// Intended arrival, µs from the start.
    pub arrival_time_us: u64,
    /// Actual send time (real mode).
    pub send_time_us: Option<u64>,
    /// First response chunk (real mode).
    pub first_chunk_time_us: Option<u64>,
    /// Last response chunk (real mode).
    pub last_chunk_time_us: Option<u64>,
    /// Streamed chunks (real mode).
    pub num_chunks: Option<u64>,
    /// Outcome: `ok`, `error` or `timeout` (see [`Status`]).
    pub status: &'a str,
    /// Server error message (empty when ok).
    pub error_message: &'a str,
}

/// Label lists of a trace, in index order.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LabelLists {
    /// Client ids.
    #[serde(default)]
    pub clients: Vec<String>,
    /// Tenant ids.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// SLO classes.
    #[serde(default)]
    pub slo_classes: Vec<String>,
}

/// BLIS's additions to the header: what replay needs to rebuild shared
/// prefixes and multi-turn context.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BlisHeader {
    /// Seed of the spec that generated the trace (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Prefix length of each prefix group, tokens.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prefix_lengths: BTreeMap<String, u32>,
    /// Context growth of each multi-turn client.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context_growth: BTreeMap<String, ContextGrowth>,
    /// Label order, so replayed requests get the generator's label ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<LabelLists>,
}

/// The trace header (`*.header.yaml`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    /// Always 2.
    pub trace_version: u32,
    /// Always `microseconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_unit: Option<String>,
    /// When the trace was recorded (RFC 3339); generated traces omit it so
    /// they are byte-identical run to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// `real` or `generated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Requests to exclude from calibration statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up_requests: Option<u64>,
    /// The spec that generated the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_spec: Option<String>,
    /// Server configuration (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<serde_yaml_ng::Value>,
    /// Hardware (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<serde_yaml_ng::Value>,
    /// Measured network (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<serde_yaml_ng::Value>,
    /// Load-generator health (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_generator: Option<serde_yaml_ng::Value>,
    /// Scraped server metrics (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<serde_yaml_ng::Value>,
    /// BLIS replay metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blis: Option<BlisHeader>,
}

/// The header file of trace CSV `csv`: `x.csv` → `x.header.yaml`.
pub fn header_path(csv: &Path) -> PathBuf {
    csv.with_extension("header.yaml")
}

/// The trace CSV of a trace prefix or path: `traces/run1` → `traces/run1.csv`.
pub fn trace_csv(path: &Path) -> PathBuf {
    if path.extension().is_some_and(|e| e == "csv") {
        path.to_path_buf()
    } else {
        let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".csv");
        path.with_file_name(name)
    }
}

impl TraceHeader {
    /// The header of a trace generated from `plan` (spec `spec_name`).
    pub fn generated(plan: &Plan, spec_name: &str) -> TraceHeader {
        let blis = BlisHeader {
            seed: Some(plan.seed),
            prefix_lengths: plan.clients.iter().flat_map(|c| c.prefixes.iter().map(|(g, run)| (g.clone(), run.len()))).collect(),
            context_growth: plan.clients.iter().filter_map(|c| c.multi_turn.map(|m| (c.id.clone(), m.growth))).collect(),
            labels: Some(LabelLists {
                clients: plan.labels.clients.clone(),
                tenants: plan.labels.tenants.clone(),
                slo_classes: plan.labels.slo_classes.clone(),
            }),
        };
        TraceHeader {
            trace_version: 2,
            time_unit: Some("microseconds".into()),
            created_at: None,
            mode: Some("generated".into()),
            warm_up_requests: Some(0),
            workload_spec: Some(spec_name.to_string()),
            server: None,
            hardware: None,
            network: None,
            load_generator: None,
            server_metrics: None,
            blis: Some(blis),
        }
    }

    /// The header as YAML.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }

    /// Reads and checks a header file.
    pub fn load(path: &Path) -> Result<TraceHeader, WorkloadError> {
        let text = blis_data::textfile::read(path).map_err(|e| WorkloadError::read(path, e))?;
        let name = path.display().to_string();
        let de = serde_yaml_ng::Deserializer::from_str(&text);
        let h: TraceHeader = serde_path_to_error::deserialize(de).map_err(|e| crate::error::from_serde(&name, e))?;
        if h.trace_version != 2 {
            return Err(WorkloadError::spec(name, "trace_version", format!("{} is not supported; allowed: 2", h.trace_version)));
        }
        if let Some(u) = &h.time_unit
            && u != "microseconds"
        {
            return Err(WorkloadError::spec(name, "time_unit", format!("{u:?} is not supported; allowed: microseconds")));
        }
        if let Some((key, v)) = recorded_time_scale(&h)
            && !v.as_f64().is_some_and(|x| x > 0.0 && x <= 1e6)
        {
            let written = serde_yaml_ng::to_string(v).unwrap_or_default();
            return Err(WorkloadError::spec(name, format!("server.{key}"), format!("{}: must be a number in (0, 1e6] (server seconds per wall-clock second)", written.trim_end())));
        }
        Ok(h)
    }
}

/// Writes trace rows for generated requests.
pub struct TraceWriter<W: Write> {
    csv: csv::Writer<W>,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace (writes the column names).
    pub fn new(w: W) -> std::io::Result<TraceWriter<W>> {
        let mut csv = csv::WriterBuilder::new().has_headers(false).from_writer(w);
        csv.write_record(COLUMNS)?;
        Ok(TraceWriter { csv })
    }

    /// Writes one generated request of `plan`, with what a live server did
    /// with it when `observed` is given (real mode).
    pub fn write(&mut self, plan: &Plan, g: &GeneratedRequest, observed: Option<&Observed<'_>>) -> std::io::Result<()> {
        let r = &g.request;
        let c = &plan.clients[r.meta.client as usize];
        let session = if c.multi_turn.is_some() { format!("{}/{}", c.id, g.k) } else { String::new() };
        let row = Row {
            request_id: r.id.0,
            client_id: &c.id,
            tenant_id: &plan.labels.tenants[r.meta.tenant.0 as usize],
            slo_class: &plan.labels.slo_classes[usize::from(r.meta.slo_class.0)],
            session_id: &session,
            round_index: r.meta.session.map_or(0, |s| s.1),
            prefix_group: c.prefix_name(g.prefix_group),
            streaming: c.streaming,
            input_tokens: observed.map_or(r.prompt_tokens(), |o| o.input_tokens),
            output_tokens: observed.map_or(r.max_output_tokens, |o| o.output_tokens),
            text_tokens: g.text_tokens,
            image_tokens: g.modality_tokens[0],
            audio_tokens: g.modality_tokens[1],
            video_tokens: g.modality_tokens[2],
            reason_ratio: g.reason_ratio,
            arrival_time_us: r.arrival.as_us(),
            send_time_us: observed.map(|o| o.send_time_us),
            first_chunk_time_us: observed.and_then(|o| o.first_chunk_time_us),
            last_chunk_time_us: observed.and_then(|o| o.last_chunk_time_us),
            num_chunks: observed.map(|o| o.num_chunks),
            status: observed.map_or(Status::Ok, |o| o.status).as_str(),
            error_message: observed.map_or("", |o| o.error_message),
        };
        self.csv.serialize(row).map_err(std::io::Error::from)
    }

    /// Pushes written rows to the underlying writer, so a crash after this
    /// point leaves them in the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.csv.flush()
    }

    /// Flushes and returns the writer.
    pub fn finish(self) -> std::io::Result<W> {
        self.csv.into_inner().map_err(|e| e.into_error())
    }
}

/// What a live server did with one request (real mode, `blis observe`).
#[derive(Clone, Debug, PartialEq)]
pub struct Observed<'a> {
    /// Prompt tokens the server reported.
    pub input_tokens: u32,
    /// Output tokens the server reported.
    pub output_tokens: u32,
    /// When the request was sent, µs since the Unix epoch.
    pub send_time_us: u64,
    /// First chunk carrying output, µs since the Unix epoch.
    pub first_chunk_time_us: Option<u64>,
    /// End of the response, µs since the Unix epoch.
    pub last_chunk_time_us: Option<u64>,
    /// Chunks carrying output.
    pub num_chunks: u64,
    /// Outcome.
    pub status: Status,
    /// Error text (empty when ok).
    pub error_message: &'a str,
}

/// What replay learned from a trace before running it.
#[derive(Clone, Debug, Default)]
pub struct ReplayInfo {
    /// Names behind the requests' label ids.
    pub labels: Labels,
    /// Requests that will be replayed.
    pub requests: u64,
    /// Rows skipped, headers missing, ...: one line each.
    pub warnings: Vec<String>,
}

struct SessionState {
    prompt: TokenSeq,
    output_seed: u64,
    output_tokens: u32,
    reasoning_tokens: u32,
    input_tokens: u32,
}

/// Turns rows into requests: label interning, per-client request counters,
/// prefix runs and session context.
struct Rebuilder {
    header: BlisHeader,
    labels: Labels,
    clients: FxHashMap<String, (u32, ClientContent)>,
    tenants: FxHashMap<String, u32>,
    slo_classes: FxHashMap<String, u16>,
    counters: Vec<u64>,
    sessions: FxHashMap<String, (u64, SessionState)>,
    missing_groups: BTreeMap<String, u64>,
}

fn intern<T: Copy>(map: &mut FxHashMap<String, T>, names: &mut Vec<String>, name: &str, id: impl Fn(usize) -> T) -> T {
    if let Some(&i) = map.get(name) {
        return i;
    }
    let i = id(names.len());
    names.push(name.to_string());
    map.insert(name.to_string(), i);
    i
}

impl Rebuilder {
    fn new(header: BlisHeader, labels: &LabelLists) -> Rebuilder {
        let mut r = Rebuilder {
            header,
            labels: Labels::default(),
            clients: FxHashMap::default(),
            tenants: FxHashMap::default(),
            slo_classes: FxHashMap::default(),
            counters: Vec::new(),
            sessions: FxHashMap::default(),
            missing_groups: BTreeMap::new(),
        };
        for c in &labels.clients {
            r.client(c);
        }
        for t in &labels.tenants {
            intern(&mut r.tenants, &mut r.labels.tenants, t, |i| i as u32);
        }
        for s in &labels.slo_classes {
            intern(&mut r.slo_classes, &mut r.labels.slo_classes, s, |i| i as u16);
        }
        r
    }

    fn client(&mut self, name: &str) -> (u32, ClientContent) {
        if let Some(&c) = self.clients.get(name) {
            return c;
        }
        let c = (self.labels.clients.len() as u32, ClientContent::new(name));
        self.labels.clients.push(name.to_string());
        self.clients.insert(name.to_string(), c);
        self.counters.push(0);
        c
    }

    /// The request of a row arriving at `arrival_us`, or an error message about the row.
    fn request(&mut self, row: &Row<'_>, arrival_us: u64) -> Result<Request, String> {
        if arrival_us > Micros::MAX_SPAN.as_us() {
            return Err(format!("arrival {arrival_us} µs is after the latest allowed, {} µs (about three years)", Micros::MAX_SPAN.as_us()));
        }
        let (client, content) = self.client(row.client_id);
        let tenant = intern(&mut self.tenants, &mut self.labels.tenants, row.tenant_id, |i| i as u32);
        if self.labels.slo_classes.len() > usize::from(u16::MAX) {
            return Err("too many distinct SLO classes".into());
        }
        let slo = intern(&mut self.slo_classes, &mut self.labels.slo_classes, row.slo_class, |i| i as u16);
        let prefix = match row.prefix_group {
            "" => None,
            g => match self.header.prefix_lengths.get(g) {
                Some(&len) => Some(prefix_run(g, len)),
                None => {
                    *self.missing_groups.entry(g.to_string()).or_default() += 1;
                    None
                }
            },
        };
        let prefix_len = prefix.as_ref().map_or(0, TokenRun::len);
        if row.input_tokens <= prefix_len {
            return Err(format!("input_tokens {} is not above the prefix length {prefix_len} of group {:?}", row.input_tokens, row.prefix_group));
        }
        let ratio_tokens = reasoning_tokens(row.reason_ratio, row.output_tokens);
        let (k, prompt) = if row.round_index == 0 || row.session_id.is_empty() {
            let k = self.counters[client as usize];
            self.counters[client as usize] += 1;
            (k, first_prompt(prefix.as_ref(), content, k, row.input_tokens - prefix_len))
        } else {
            let Some((k, prev)) = self.sessions.get(row.session_id) else {
                return Err(format!("round {} of session {:?} has no earlier round in the trace", row.round_index, row.session_id));
            };
            let k = *k;
            let answer = prev.output_tokens - prev.reasoning_tokens;
            let accumulated = prev.input_tokens.checked_add(answer).filter(|&a| a < row.input_tokens);
            let growth = self.header.context_growth.get(row.client_id).copied().unwrap_or(match accumulated {
                Some(_) => ContextGrowth::Accumulate,
                None => ContextGrowth::Fixed,
            });
            let prompt = match (growth, accumulated) {
                (ContextGrowth::Accumulate, Some(context)) => {
                    let turn = Turn { prompt: &prev.prompt, output_seed: prev.output_seed, output_len: prev.output_tokens, reasoning_tokens: prev.reasoning_tokens };
                    next_prompt(&turn, content, k, row.round_index, row.input_tokens - context)
                }
                (ContextGrowth::Accumulate, None) => {
                    return Err(format!(
                        "input_tokens {} does not exceed the accumulated context {} of session {:?}",
                        row.input_tokens,
                        u64::from(prev.input_tokens) + u64::from(answer),
                        row.session_id
                    ));
                }
                (ContextGrowth::Fixed, _) => {
                    let mut p = TokenSeq::new();
                    if let Some(run) = &prefix {
                        p.push(run.clone());
                    }
                    p.push(TokenRun::synthetic(content.prompt_seed(k, row.round_index), row.input_tokens - prefix_len));
                    p
                }
            };
            (k, prompt)
        };
        let output_seed = content.output_seed(k, row.round_index);
        let session = if row.session_id.is_empty() {
            None
        } else {
            let state = SessionState { prompt: prompt.clone(), output_seed, output_tokens: row.output_tokens, reasoning_tokens: ratio_tokens, input_tokens: row.input_tokens };
            self.sessions.insert(row.session_id.to_string(), (k, state));
            Some(((u64::from(client) << 40) | k, row.round_index))
        };
        Ok(Request {
            id: RequestId(row.request_id),
            arrival: Micros(arrival_us),
            prompt,
            max_output_tokens: row.output_tokens,
            output_seed,
            meta: RequestMeta { client, tenant: TenantId(tenant), slo_class: SloClassId(slo), session, ..RequestMeta::default() },
        })
    }
}

fn check_row(row: &Row<'_>) -> Result<bool, String> {
    if !(row.reason_ratio.is_finite() && (0.0..=1.0).contains(&row.reason_ratio)) {
        return Err(format!("column reason_ratio: {} must be in [0, 1]", row.reason_ratio));
    }
    if row.client_id.is_empty() {
        return Err("column client_id: empty".into());
    }
    Ok(Status::parse(row.status)? != Status::Error && row.output_tokens > 0)
}

fn open_csv(path: &Path) -> Result<(csv::Reader<LineCapped<File>>, csv::StringRecord), WorkloadError> {
    let file = blis_data::textfile::open(path).map_err(|e| WorkloadError::read(path, e))?;
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(file);
    let headers = reader.headers().map_err(|e| WorkloadError::line(path, 1, e.to_string()))?.clone();
    for (i, h) in headers.iter().enumerate() {
        if !COLUMNS.contains(&h) {
            return Err(WorkloadError::line(path, 1, format!("unknown column {h:?} (column {}); allowed: {}", i + 1, COLUMNS.join(", "))));
        }
    }
    for c in COLUMNS {
        if !headers.iter().any(|h| h == c) {
            return Err(WorkloadError::line(path, 1, format!("missing column {c:?}")));
        }
    }
    Ok((reader, headers))
}

fn describe_csv_error(e: &csv::Error, headers: &csv::StringRecord) -> String {
    match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => {
            let column = err.field().and_then(|f| headers.get(f as usize)).unwrap_or("?");
            format!("column {column}: {}", err.kind())
        }
        _ => e.to_string(),
    }
}

/// Which column gives a replayed request's arrival.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ArrivalColumn {
    /// `arrival_time_us`: the planned arrival (generated traces).
    Intended,
    /// `(send_time_us − start) · time_scale`: when a recorded request was
    /// really sent (µs since the Unix epoch, minus the run's start from the
    /// header's `load_generator.start_unix_us`), in the server's time (a
    /// `blis serve --time-scale S` server runs S× faster than the wall
    /// clock; its trace header says so in `server.time-scale`). Rows never
    /// sent are skipped.
    Sent {
        /// The recorded run's start, µs since the Unix epoch.
        start_unix_us: u64,
        /// Server seconds per wall-clock second (1 for a real server).
        time_scale: f64,
    },
}

/// The `server.time-scale` (or `time_scale`) entry of a header, with its key.
fn recorded_time_scale(header: &TraceHeader) -> Option<(&'static str, &serde_yaml_ng::Value)> {
    let server = header.server.as_ref()?;
    ["time-scale", "time_scale"].into_iter().find_map(|key| server.get(key).map(|v| (key, v)))
}

/// The server's seconds per wall-clock second recorded in a trace header
/// (`server.time-scale`, written by `blis observe` against `blis serve`,
/// checked by [`TraceHeader::load`]); 1 when absent.
pub fn header_time_scale(header: Option<&TraceHeader>) -> f64 {
    header.and_then(recorded_time_scale).and_then(|(_, v)| v.as_f64()).unwrap_or(1.0)
}

impl ArrivalColumn {
    /// Recorded traces (header `mode: real` with a `load_generator.start_unix_us`)
    /// replay their real send times; everything else its planned arrivals.
    pub fn for_header(header: Option<&TraceHeader>) -> ArrivalColumn {
        let start = header
            .filter(|h| h.mode.as_deref() == Some("real"))
            .and_then(|h| h.load_generator.as_ref())
            .and_then(|lg| lg.get("start_unix_us"))
            .and_then(serde_yaml_ng::Value::as_u64);
        match start {
            Some(start_unix_us) => ArrivalColumn::Sent { start_unix_us, time_scale: header_time_scale(header) },
            None => ArrivalColumn::Intended,
        }
    }

    /// The row's arrival, µs from the start; `None` for a row that never ran.
    fn of(self, row: &Row<'_>) -> Option<u64> {
        match self {
            ArrivalColumn::Intended => Some(row.arrival_time_us),
            ArrivalColumn::Sent { start_unix_us, time_scale } => {
                row.send_time_us.map(|t| (t.saturating_sub(start_unix_us) as f64 * time_scale).round() as u64)
            }
        }
    }
}

/// Fails on the first `request_id` two replayed rows share (naming both
/// lines): a replayed request keeps its id, and per-request outputs,
/// anomaly tracking and `blis calibrate`'s pairing of real and simulated
/// requests all need ids to be unique.
fn check_unique_ids(path: &Path, kept: &[(u64, u64, csv::Position)]) -> Result<(), WorkloadError> {
    let mut ids: Vec<(u64, u64)> = kept.iter().map(|(_, id, pos)| (*id, pos.line())).collect();
    ids.sort_unstable();
    match ids.windows(2).find(|w| w[0].0 == w[1].0) {
        Some(w) => Err(WorkloadError::line(
            path,
            w[1].1,
            format!("request_id {} is also on line {}: request ids must be unique (renumber the rows)", w[0].0, w[0].1),
        )),
        None => Ok(()),
    }
}

/// Rows in replay order: streamed as they are when the file is already in
/// arrival order (generated traces), else an index of row positions sorted
/// by (arrival, request id) and read by seeking (recorded traces are written
/// in completion order).
enum Order {
    Stream,
    Sorted(std::vec::IntoIter<(u64, u64, csv::Position)>),
}

/// Reads the next row in replay order into `record`; returns its line, or
/// `None` at the end.
fn read_in_order(
    path: &Path,
    reader: &mut csv::Reader<LineCapped<File>>,
    headers: &csv::StringRecord,
    order: &mut Order,
    record: &mut csv::StringRecord,
) -> Result<Option<u64>, WorkloadError> {
    let line = reader.position().line();
    match order {
        Order::Stream => match reader.read_record(record) {
            Ok(false) => Ok(None),
            Ok(true) => Ok(Some(record.position().map_or(line, |p| p.line()))),
            Err(e) => Err(WorkloadError::line(path, line, describe_csv_error(&e, headers))),
        },
        Order::Sorted(rows) => {
            let Some((_, _, pos)) = rows.next() else { return Ok(None) };
            reader.seek(pos.clone()).map_err(|e| WorkloadError::line(path, pos.line(), e.to_string()))?;
            match reader.read_record(record) {
                Ok(true) => Ok(Some(pos.line())),
                Ok(false) => Err(WorkloadError::line(path, pos.line(), "the file changed while it was read".to_string())),
                Err(e) => Err(WorkloadError::line(path, pos.line(), describe_csv_error(&e, headers))),
            }
        }
    }
}

/// Replays a trace v2 CSV as an engine workload. Request ids are the rows'
/// `request_id`s, so results can be matched back to the trace.
pub struct TraceReplay {
    path: PathBuf,
    reader: csv::Reader<LineCapped<File>>,
    headers: csv::StringRecord,
    record: csv::StringRecord,
    rebuilder: Rebuilder,
    arrivals: ArrivalColumn,
    order: Order,
    next: Option<Request>,
    emitted: u64,
    limit: u64,
    error: Option<WorkloadError>,
}

impl TraceReplay {
    /// Checks the whole trace and opens it for replay of at most `limit`
    /// requests, in arrival order. Rows with status `error`, no output
    /// tokens or (recorded traces) no send time are skipped: they never ran.
    pub fn open(path: &Path, limit: Option<u64>) -> Result<(TraceReplay, ReplayInfo), WorkloadError> {
        let hp = header_path(path);
        let header = if hp.exists() { Some(TraceHeader::load(&hp)?) } else { None };
        let arrivals = ArrivalColumn::for_header(header.as_ref());
        let blis = header.as_ref().and_then(|h| h.blis.clone()).unwrap_or_default();
        let label_lists = blis.labels.clone().unwrap_or_default();
        let limit = limit.unwrap_or(u64::MAX);

        // First pass: every row is checked, and the kept rows' arrivals and
        // positions are indexed in case the file is not in arrival order.
        let mut kept: Vec<(u64, u64, csv::Position)> = Vec::new();
        let (mut skipped, mut sorted, mut last) = (0u64, true, 0u64);
        {
            let (mut reader, headers) = open_csv(path)?;
            let mut record = csv::StringRecord::new();
            loop {
                let line = reader.position().line();
                let pos = reader.position().clone();
                match reader.read_record(&mut record) {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => return Err(WorkloadError::line(path, line, describe_csv_error(&e, &headers))),
                }
                let line = record.position().map_or(line, |p| p.line());
                let row: Row<'_> = record.deserialize(Some(&headers)).map_err(|e| WorkloadError::line(path, line, describe_csv_error(&e, &headers)))?;
                let keep = check_row(&row).map_err(|m| WorkloadError::line(path, line, m))?;
                match (keep, arrivals.of(&row)) {
                    (true, Some(t)) => {
                        sorted &= t >= last;
                        last = t;
                        kept.push((t, row.request_id, pos));
                    }
                    _ => skipped += 1,
                }
            }
        }
        check_unique_ids(path, &kept)?;
        if !sorted {
            kept.sort_by_key(|&(t, id, _)| (t, id));
        }
        kept.truncate(usize::try_from(limit).unwrap_or(usize::MAX));

        // Second pass: rebuild every request once, in replay order, so content
        // errors (a session round without its predecessor) fail before the
        // simulation starts.
        let mut check = Rebuilder::new(blis.clone(), &label_lists);
        {
            let (mut reader, headers) = open_csv(path)?;
            let mut order = if sorted { Order::Stream } else { Order::Sorted(kept.clone().into_iter()) };
            let mut record = csv::StringRecord::new();
            let mut built = 0usize;
            while built < kept.len() {
                let Some(line) = read_in_order(path, &mut reader, &headers, &mut order, &mut record)? else { break };
                let row: Row<'_> = record.deserialize(Some(&headers)).map_err(|e| WorkloadError::line(path, line, describe_csv_error(&e, &headers)))?;
                if let (true, Some(t)) = (check_row(&row).map_err(|m| WorkloadError::line(path, line, m))?, arrivals.of(&row)) {
                    check.request(&row, t).map_err(|m| WorkloadError::line(path, line, m))?;
                    built += 1;
                }
            }
        }
        let requests = kept.len() as u64;
        let mut warnings = Vec::new();
        if skipped > 0 {
            warnings.push(format!("{}: {skipped} rows with status error, no output tokens or no send time are not replayed", path.display()));
        }
        if !check.missing_groups.is_empty() {
            let groups: Vec<&str> = check.missing_groups.keys().map(String::as_str).collect();
            warnings.push(format!(
                "{}: no prefix length for prefix group(s) {} (no `blis.prefix_lengths` in {}); their prompts replay unshared",
                path.display(),
                groups.join(", "),
                hp.display()
            ));
        }
        let all_labels = LabelLists { clients: check.labels.clients.clone(), tenants: check.labels.tenants.clone(), slo_classes: check.labels.slo_classes.clone() };
        let info = ReplayInfo { labels: check.labels, requests, warnings };
        let (reader, headers) = open_csv(path)?;
        let order = if sorted { Order::Stream } else { Order::Sorted(kept.into_iter()) };
        let replay = TraceReplay {
            path: path.to_path_buf(),
            reader,
            headers,
            record: csv::StringRecord::new(),
            rebuilder: Rebuilder::new(blis, &all_labels),
            arrivals,
            order,
            next: None,
            emitted: 0,
            limit,
            error: None,
        };
        Ok((replay, info))
    }

    fn fill(&mut self) {
        while self.next.is_none() && self.error.is_none() && self.emitted < self.limit {
            let line = match read_in_order(&self.path, &mut self.reader, &self.headers, &mut self.order, &mut self.record) {
                Ok(Some(line)) => line,
                Ok(None) => return,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            };
            let row: Row<'_> = match self.record.deserialize(Some(&self.headers)) {
                Ok(r) => r,
                Err(e) => {
                    self.error = Some(WorkloadError::line(&self.path, line, describe_csv_error(&e, &self.headers)));
                    return;
                }
            };
            let arrival = self.arrivals.of(&row);
            let built = check_row(&row).and_then(|keep| match (keep, arrival) {
                (true, Some(t)) => self.rebuilder.request(&row, t).map(Some),
                _ => Ok(None),
            });
            match built {
                Ok(Some(r)) => {
                    self.emitted += 1;
                    self.next = Some(r);
                }
                Ok(None) => {}
                Err(m) => self.error = Some(WorkloadError::line(&self.path, line, m)),
            }
        }
    }
}

impl crate::RequestSource for TraceReplay {
    /// The first error met after [`TraceReplay::open`] checked the file (it
    /// changed underneath us); the stream ends at it.
    fn take_error(&mut self) -> Option<WorkloadError> {
        self.error.take()
    }
}

impl Workload for TraceReplay {
    fn peek_arrival(&mut self) -> Option<Micros> {
        self.fill();
        self.next.as_ref().map(|r| r.arrival)
    }

    fn next_request(&mut self) -> Option<Request> {
        self.fill();
        self.next.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RequestSource;
    use crate::spec::parse;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-trace-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn trace_prefixes_and_paths() {
        assert_eq!(trace_csv(Path::new("traces/run1")), Path::new("traces/run1.csv"));
        assert_eq!(trace_csv(Path::new("traces/run1.csv")), Path::new("traces/run1.csv"));
        assert_eq!(header_path(&trace_csv(Path::new("traces/run1"))), Path::new("traces/run1.header.yaml"));
    }

    fn write_trace(plan: &Plan, path: &Path) {
        let mut w = TraceWriter::new(File::create(path).unwrap()).unwrap();
        for g in plan.generator() {
            w.write(plan, &g, None).unwrap();
        }
        w.finish().unwrap();
        std::fs::write(header_path(path), TraceHeader::generated(plan, "spec.yaml").to_yaml()).unwrap();
    }

    fn replay_all(path: &Path) -> (Vec<Request>, ReplayInfo) {
        let (mut r, info) = TraceReplay::open(path, None).unwrap();
        let mut out = Vec::new();
        while let Some(req) = r.next_request() {
            out.push(req);
        }
        assert!(r.take_error().is_none());
        (out, info)
    }

    const SPEC: &str = "seed: 9\ncategory: reasoning\naggregate_rate: 40\nnum_requests: 3000\nclients:
  - id: chat
    tenant_id: t1
    slo_class: interactive
    rate_fraction: 2
    arrival: {process: gamma, cv: 2}
    prefix_group: sys
    prefix_length: 300
    input_distribution: {type: lognormal, params: {mu: 5, sigma: 1}}
    output_distribution: {type: exponential, params: {mean: 100}}
    reasoning:
      reason_ratio_distribution: {type: empirical, pdf: {0.1: 0.5, 0.85: 0.5}}
      multi_turn: {max_rounds: 3, think_time_us: 1000}
  - id: batch, with comma
    tenant_id: t2
    slo_class: batch
    streaming: false
    input_distribution: {type: gaussian, params: {mean: 700, std_dev: 100}}
    output_distribution: {type: constant, params: {value: 64}}
";

    #[test]
    fn spec_to_trace_to_replay_gives_identical_requests() {
        let dir = scratch("roundtrip");
        let plan = parse(SPEC, "spec.yaml", Path::new(".")).unwrap().plan().unwrap();
        let path = dir.join("requests.csv");
        write_trace(&plan, &path);
        let generated: Vec<Request> = plan.generator().map(|g| g.request).collect();
        let (replayed, info) = replay_all(&path);
        assert_eq!(replayed.len(), 3000);
        assert_eq!(info.requests, 3000);
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
        assert_eq!(info.labels, plan.labels);
        assert_eq!(generated, replayed);
    }

    #[test]
    fn sessions_are_rebuilt_from_their_rows() {
        // A recorded session: round 1 re-sends round 0's prompt and answer.
        let dir = scratch("sessions");
        let path = dir.join("t.csv");
        let mut w = csv::Writer::from_path(&path).unwrap();
        w.write_record(COLUMNS).unwrap();
        for (id, round, input, output, ratio, t) in [(0, 0, 100, 40, "0.25", 0), (1, 1, 100 + 30 + 20, 10, "0", 5000)] {
            w.write_record([
                &id.to_string(), "c", "t", "s", "sess", &round.to_string(), "", "true", &input.to_string(), &output.to_string(),
                &input.to_string(), "0", "0", "0", ratio, &t.to_string(), "", "", "", "", "ok", "",
            ])
            .unwrap();
        }
        w.flush().unwrap();
        drop(w);
        let (reqs, info) = replay_all(&path);
        assert!(info.warnings.is_empty());
        let c = ClientContent::new("c");
        assert_eq!(reqs[1].prompt.runs()[..reqs[0].prompt.runs().len()], reqs[0].prompt.runs()[..]);
        assert_eq!(reqs[1].prompt.runs()[1], TokenRun::Synthetic { seed: c.output_seed(0, 0), offset: 10, len: 30 });
        assert_eq!(reqs[1].meta.session, Some((0, 1)));
    }

    /// Recorded traces are written in completion order; replay sorts them
    /// by arrival (send time) and keeps the rows' request ids.
    #[test]
    fn recorded_traces_replay_in_send_order_with_their_ids() {
        let dir = scratch("recorded");
        let plan = parse(SPEC, "spec.yaml", Path::new(".")).unwrap().plan().unwrap();
        let path = dir.join("run.csv");
        let start = 1_700_000_000_000_000u64;
        let generated: Vec<_> = plan.generator().take(20).collect();
        let mut w = TraceWriter::new(File::create(&path).unwrap()).unwrap();
        // Completion order: reversed; real sends 500 µs after the plan.
        for g in generated.iter().rev() {
            let send = start + g.request.arrival.as_us() + 500;
            let o = Observed {
                input_tokens: g.request.prompt_tokens(),
                output_tokens: g.request.max_output_tokens,
                send_time_us: send,
                first_chunk_time_us: Some(send + 10),
                last_chunk_time_us: Some(send + 20),
                num_chunks: u64::from(g.request.max_output_tokens),
                status: Status::Ok,
                error_message: "",
            };
            w.write(&plan, g, Some(&o)).unwrap();
        }
        w.finish().unwrap();
        let mut header = TraceHeader::generated(&plan, "spec.yaml");
        header.mode = Some("real".into());
        let mut lg = serde_yaml_ng::Mapping::new();
        lg.insert("start_unix_us".into(), start.into());
        header.load_generator = Some(serde_yaml_ng::Value::Mapping(lg));
        std::fs::write(header_path(&path), header.to_yaml()).unwrap();
        let (reqs, info) = replay_all(&path);
        assert_eq!(info.requests, 20);
        for (r, g) in reqs.iter().zip(&generated) {
            assert_eq!(r.id, g.request.id);
            assert_eq!(r.arrival, g.request.arrival + Micros(500));
            assert_eq!(r.prompt, g.request.prompt);
        }
        // The recorded server time scale must be one a server can run at.
        let mut server = serde_yaml_ng::Mapping::new();
        server.insert("time-scale".into(), (-5.0).into());
        header.server = Some(serde_yaml_ng::Value::Mapping(server));
        std::fs::write(header_path(&path), header.to_yaml()).unwrap();
        let e = TraceReplay::open(&path, None).err().expect("refused").to_string();
        assert!(e.contains("server.time-scale: -5.0: must be a number in (0, 1e6]"), "{e}");
    }

    #[test]
    fn bad_rows_name_file_line_and_column() {
        let dir = scratch("bad");
        let plan = parse(SPEC, "spec.yaml", Path::new(".")).unwrap().plan().unwrap();
        let good = dir.join("good.csv");
        write_trace(&plan, &good);
        let text = std::fs::read_to_string(&good).unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let case = |name: &str, lines: &[String]| -> String {
            let p = dir.join(name);
            std::fs::write(&p, lines.join("\n")).unwrap();
            match TraceReplay::open(&p, None) {
                Ok(_) => panic!("{name} accepted"),
                Err(e) => e.to_string(),
            }
        };
        let mut bad = lines.clone();
        bad[3] = bad[3].replacen(",ok,", ",maybe,", 1);
        let e = case("status.csv", &bad);
        assert!(e.contains("status.csv:4:") && e.contains("column status"), "{e}");
        let mut bad = lines.clone();
        bad[0] = bad[0].replace("num_chunks", "chunks");
        let e = case("column.csv", &bad);
        assert!(e.contains("column.csv:1:") && e.contains("unknown column \"chunks\""), "{e}");
        // Line 6 reuses line 3's request id (ids are the first column).
        let mut bad = lines.clone();
        let id_of_3 = bad[2].split(',').next().unwrap().to_string();
        let rest_of_6 = bad[5].split_once(',').unwrap().1.to_string();
        bad[5] = format!("{id_of_3},{rest_of_6}");
        let e = case("dup.csv", &bad);
        assert!(e.contains("dup.csv:6:") && e.contains(&format!("request_id {id_of_3} is also on line 3")), "{e}");
        // An arrival where the µs clock would saturate.
        let column = lines[0].split(',').position(|c| c == "arrival_time_us").unwrap();
        let mut bad = lines.clone();
        let row = csv::ReaderBuilder::new().has_headers(false).from_reader(bad[1].as_bytes()).records().next().unwrap().unwrap();
        let mut cells: Vec<&str> = row.iter().collect();
        cells[column] = "18446744073709551615";
        let mut out = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b' ')).from_writer(Vec::new());
        out.write_record(&cells).unwrap();
        bad[1] = String::from_utf8(out.into_inner().unwrap()).unwrap().trim_end().to_string();
        let e = case("late.csv", &bad);
        assert!(e.contains("late.csv:2:") && e.contains("after the latest allowed, 100000000000000 µs"), "{e}");
        lines[2] = lines[2].replacen(",ok,", ",error,", 1);
        let p = dir.join("skips.csv");
        std::fs::write(&p, lines.join("\n")).unwrap();
        let (_, info) = TraceReplay::open(&p, Some(10)).unwrap();
        assert_eq!(info.requests, 10);
        assert!(info.warnings.iter().any(|w| w.contains("1 rows with status error")), "{:?}", info.warnings);
    }
}
