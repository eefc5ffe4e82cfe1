//! Replaying a trace: every row checked in a first streaming pass, then the
//! requests rebuilt, in arrival order, as the simulation asks for them.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use blis_data::textfile::LineCapped;
use blis_engine::request::{Labels, Request, RequestId, RequestMeta, SloClassId, TenantId, TokenRun, TokenSeq};
use blis_engine::time::Micros;
use rustc_hash::FxHashMap;

use super::header::{BlisHeader, LabelLists, TraceHeader, header_path, header_time_scale};
use super::{COLUMNS, Row, Status};
use crate::content::{ClientContent, Turn, first_prompt, next_prompt, prefix_run, reasoning_tokens};
use crate::error::WorkloadError;
use crate::spec::ContextGrowth;

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
            return Err(format!(
                "arrival {arrival_us} µs is after the latest allowed, {} µs (about three years)",
                Micros::MAX_SPAN.as_us()
            ));
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
            return Err(format!(
                "input_tokens {} is not above the prefix length {prefix_len} of group {:?}",
                row.input_tokens, row.prefix_group
            ));
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
                    let turn = Turn {
                        prompt: &prev.prompt,
                        output_seed: prev.output_seed,
                        output_len: prev.output_tokens,
                        reasoning_tokens: prev.reasoning_tokens,
                    };
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
            let state = SessionState {
                prompt: prompt.clone(),
                output_seed,
                output_tokens: row.output_tokens,
                reasoning_tokens: ratio_tokens,
                input_tokens: row.input_tokens,
            };
            self.sessions.insert(row.session_id.to_string(), (k, state));
            Some(((u64::from(client) << 40) | k, row.round_index))
        };
        Ok(Request {
            id: RequestId(row.request_id),
            arrival: Micros(arrival_us),
            prompt,
            max_output_tokens: row.output_tokens,
            output_seed,
            meta: RequestMeta {
                client,
                tenant: TenantId(tenant),
                slo_class: SloClassId(slo),
                session,
                // As the generator promises: outside sessions each row's
                // private tokens come from a stream keyed by its client
                // and a per-client counter, so no other row's prompt
                // holds them.
                own_prompt_from: session.is_none().then_some(prefix_len),
                ..RequestMeta::default()
            },
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
        if headers.iter().take(i).any(|earlier| earlier == h) {
            return Err(WorkloadError::line(path, 1, format!("column {h:?} is given twice (column {}); give each column once", i + 1)));
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

impl ArrivalColumn {
    /// Recorded traces (header `mode: real` with a `load_generator.start_unix_us`)
    /// replay their real send times; everything else its planned arrivals.
    pub fn for_header(header: Option<&TraceHeader>) -> ArrivalColumn {
        let start = header
            .filter(|h| h.mode.as_deref() == Some("real"))
            .and_then(|h| h.load_generator.as_ref())
            .and_then(|lg| lg.get("start_unix_us"))
            .and_then(serde_json::Value::as_u64);
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
                let row: Row<'_> =
                    record.deserialize(Some(&headers)).map_err(|e| WorkloadError::line(path, line, describe_csv_error(&e, &headers)))?;
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
                let row: Row<'_> =
                    record.deserialize(Some(&headers)).map_err(|e| WorkloadError::line(path, line, describe_csv_error(&e, &headers)))?;
                if let (true, Some(t)) = (check_row(&row).map_err(|m| WorkloadError::line(path, line, m))?, arrivals.of(&row)) {
                    check.request(&row, t).map_err(|m| WorkloadError::line(path, line, m))?;
                    built += 1;
                }
            }
        }
        let requests = kept.len() as u64;
        let mut warnings = Vec::new();
        if skipped > 0 {
            warnings
                .push(format!("{}: {skipped} rows with status error, no output tokens or no send time are not replayed", path.display()));
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
        let all_labels = LabelLists {
            clients: check.labels.clients.clone(),
            tenants: check.labels.tenants.clone(),
            slo_classes: check.labels.slo_classes.clone(),
        };
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

crate::buffered_replay!(TraceReplay);
