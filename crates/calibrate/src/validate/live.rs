//! Calibration against a live server (workload-observe-calibrate.md §11):
//! a trace v2 recorded by `blis observe` compared request by request with
//! its simulated replay (`blis replay`).
//!
//! Per metric (TTFT, E2E, TPOT): MAPE, Pearson r, bias direction, real and
//! simulated P50/P90/P95/P99 and their errors, the two-sample KS test, QQ
//! data, bootstrap 95 % intervals of MAPE and r, and a quality rating. ITL is
//! compared as a distribution (there is no per-token pairing). Warm-up
//! requests, errors and timeouts are excluded and counted.

use std::collections::BTreeMap;
use std::path::Path;

use blis_cluster::policy::admission::RejectReason;
use blis_engine::metrics::percentile_sorted;
use blis_engine::request::DropReason;
use blis_engine::time::MAX_SPAN_S;
use blis_workload::trace_v2::{Row, Status, TraceHeader, TraceReplay, header_path, header_time_scale};
use serde::{Deserialize, Serialize};

use crate::validate::distribution::{Interval, KsTest, bootstrap_mape_pearson, ks_two_sample, qq, sorted};
use blis_data::DataError;

use crate::error::ExperimentError;
use crate::experiment::requests::csv_message;
use crate::validate::stats::{ape, mean, pearson};

/// One replayed request, as `blis replay` writes it and calibration reads it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayedRequest {
    /// The trace row's `request_id`.
    pub request_id: u64,
    /// `completed`, `timed_out` or a drop reason.
    pub outcome: String,
    /// Simulated arrival, µs from the start.
    pub arrival_us: u64,
    /// Simulated TTFT, µs.
    pub ttft_us: Option<u64>,
    /// Simulated end-to-end latency, µs.
    pub e2e_us: Option<u64>,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
}

/// What `blis replay` adds to its run report (key `replay`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayDetail {
    /// The trace CSV replayed.
    pub trace: String,
    /// Header knobs that were used, `name=value`.
    pub matched: Vec<String>,
    /// Header entries BLIS does not simulate.
    pub ignored: Vec<String>,
    /// Per request, by request id.
    pub requests: Vec<ReplayedRequest>,
    /// Every simulated inter-token gap: (µs, count), ascending.
    pub itl_us: Vec<(u64, u64)>,
}

/// The parts of a `blis replay` JSON document calibration uses.
#[derive(Clone, Debug, Deserialize)]
pub struct SimDocument {
    /// Knob → {value, source}.
    pub config: BTreeMap<String, serde_json::Value>,
    /// Throughput block of the run report.
    pub throughput: SimThroughput,
    /// Simulated duration, s.
    pub simulated_duration_s: f64,
    /// Per-request results.
    pub replay: ReplayDetail,
}

/// Throughput block of the run report.
#[derive(Clone, Debug, Deserialize)]
pub struct SimThroughput {
    /// Generated tokens per second.
    pub output_tokens_per_s: f64,
}

impl SimDocument {
    /// Reads a `blis replay --output` file.
    pub fn load(path: &Path) -> Result<SimDocument, ExperimentError> {
        let text = blis_data::textfile::read(path)
            .map_err(|e| ExperimentError::File(DataError::Io { path: path.to_path_buf(), message: e.to_string() }))?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let doc: SimDocument = serde_path_to_error::deserialize(de).map_err(|e| {
            let message = format!("{} (expected the JSON `blis replay --output` writes)", blis_data::locate::located_message(&e));
            ExperimentError::File(DataError::Format { path: path.to_path_buf(), message })
        })?;
        doc.replay.check().map_err(|message| ExperimentError::File(DataError::Format { path: path.to_path_buf(), message }))?;
        Ok(doc)
    }
}

impl ReplayDetail {
    /// Why these results are not ones `blis replay` can have written, as an
    /// error message naming the field: no request, an outcome it does not
    /// write, two results for one request, a TTFT longer than the E2E.
    fn check(&self) -> Result<(), String> {
        if self.requests.is_empty() {
            return Err("field `replay.requests` is empty: the replay simulated no request".into());
        }
        let outcomes: Vec<&str> = ["completed", "timed_out"]
            .into_iter()
            .chain(DropReason::ALL.map(DropReason::as_str))
            .chain(RejectReason::ALL.map(RejectReason::as_str))
            .collect();
        let mut ids = std::collections::BTreeSet::new();
        for (i, r) in self.requests.iter().enumerate() {
            let field = format!("replay.requests[{i}]");
            if !outcomes.contains(&r.outcome.as_str()) {
                return Err(format!("field `{field}.outcome` = {:?}: not one of {}", r.outcome, outcomes.join(", ")));
            }
            if !ids.insert(r.request_id) {
                return Err(format!("field `{field}.request_id` = {}: a second result for this request", r.request_id));
            }
            if let (Some(ttft), Some(e2e)) = (r.ttft_us, r.e2e_us)
                && ttft > e2e
            {
                return Err(format!("field `{field}.ttft_us` = {ttft}: longer than its e2e_us {e2e}"));
            }
            // A completed request has an end to end time the simulated clock can hold.
            let span = blis_engine::time::Micros::MAX_SPAN.as_us();
            match (r.outcome.as_str(), r.e2e_us) {
                ("completed", None) => return Err(format!("field `{field}.e2e_us` is missing: a completed request has one")),
                (_, Some(e2e)) if e2e > span => {
                    return Err(format!("field `{field}.e2e_us` = {e2e}: longer than the simulated clock's 1e14 µs"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A request as the client measured it, in server time (wall time × the
/// server's time scale).
#[derive(Clone, Debug, PartialEq)]
pub struct RealRequest {
    /// `request_id`.
    pub request_id: u64,
    /// Send → first chunk with text, µs (streaming).
    pub ttft_us: Option<f64>,
    /// Send → end of response, µs.
    pub e2e_us: f64,
    /// Output tokens (server usage).
    pub output_tokens: u32,
}

/// A recorded trace, reduced to what calibration compares.
#[derive(Clone, Debug)]
pub struct RealTrace {
    /// Its header.
    pub header: TraceHeader,
    /// Server seconds per wall-clock second.
    pub time_scale: f64,
    /// OK requests after warm-up.
    pub requests: Vec<RealRequest>,
    /// Inter-chunk gaps of those requests, µs (from the chunks file).
    pub itl_us: Vec<f64>,
    /// Row counts.
    pub counts: RequestCounts,
    /// First send to last chunk, s (server time).
    pub duration_s: f64,
    /// Output tokens of OK requests.
    pub output_tokens: u64,
}

/// How the trace's rows were used.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestCounts {
    /// Rows in the trace.
    pub total: u64,
    /// Status ok.
    pub ok: u64,
    /// Status error (excluded).
    pub error: u64,
    /// Status timeout (excluded).
    pub timeout: u64,
    /// OK rows among the first `warm_up_requests` ids (excluded).
    pub excluded_warm_up: u64,
    /// OK rows the replay has no completed result for (excluded).
    pub unmatched: u64,
    /// Rows compared.
    pub calibrated: u64,
}

fn csv_err(path: &Path, line: u64, message: impl Into<String>) -> ExperimentError {
    ExperimentError::Csv { path: path.to_path_buf(), line: line as usize, message: message.into() }
}

impl RealTrace {
    /// Reads `PREFIX.csv`, its header and (when present) `PREFIX.chunks.csv`.
    /// `warm_up` overrides the header's `warm_up_requests`.
    pub fn load(csv_path: &Path, warm_up: Option<u64>) -> Result<RealTrace, ExperimentError> {
        // The replay's checks first (columns, values, unique ids), so a trace
        // calibrates only if `blis replay` accepts it.
        TraceReplay::open(csv_path, None).map_err(|e| ExperimentError::Workload(e.to_string()))?;
        let header = TraceHeader::load(&header_path(csv_path)).map_err(|e| ExperimentError::Workload(e.to_string()))?;
        let time_scale = header_time_scale(Some(&header));
        let warm_up = warm_up.or(header.warm_up_requests).unwrap_or(0);
        let file = blis_data::textfile::open(csv_path)
            .map_err(|e| ExperimentError::File(DataError::Io { path: csv_path.to_path_buf(), message: e.to_string() }))?;
        let mut reader = csv::Reader::from_reader(file);
        let headers = reader.headers().map_err(|e| csv_err(csv_path, 1, e.to_string()))?.clone();
        let mut record = csv::StringRecord::new();
        let mut counts = RequestCounts::default();
        let mut requests = Vec::new();
        // Send and last-chunk time of each kept request, which its chunks fall between.
        let mut spans = BTreeMap::new();
        let (mut first_send, mut last_end, mut output_tokens) = (u64::MAX, 0u64, 0u64);
        loop {
            let line = reader.position().line();
            match reader.read_record(&mut record) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => return Err(csv_err(csv_path, line, e.to_string())),
            }
            let row: Row<'_> =
                record.deserialize(Some(&headers)).map_err(|e| csv_err(csv_path, line, csv_message(&e, &headers, &record)))?;
            counts.total += 1;
            match Status::parse(row.status).map_err(|m| csv_err(csv_path, line, m))? {
                Status::Error => counts.error += 1,
                Status::Timeout => counts.timeout += 1,
                Status::Ok => {
                    counts.ok += 1;
                    let (Some(send), Some(last)) = (row.send_time_us, row.last_chunk_time_us) else {
                        return Err(csv_err(
                            csv_path,
                            line,
                            "an ok row needs send_time_us and last_chunk_time_us (was the trace recorded by `blis observe`?)",
                        ));
                    };
                    check_times(send, row.first_chunk_time_us, last).map_err(|m| csv_err(csv_path, line, m))?;
                    first_send = first_send.min(send);
                    last_end = last_end.max(last);
                    if last_end - first_send > MAX_SPAN_US {
                        return Err(csv_err(
                            csv_path,
                            line,
                            format!(
                                "its times are more than {MAX_SPAN_S:e} s from another row's: a send_time_us or last_chunk_time_us is wrong"
                            ),
                        ));
                    }
                    if row.request_id < warm_up {
                        counts.excluded_warm_up += 1;
                        continue;
                    }
                    output_tokens += u64::from(row.output_tokens);
                    spans.insert(row.request_id, (send, last));
                    let scaled = |a: u64, b: u64| (b - a) as f64 * time_scale;
                    requests.push(RealRequest {
                        request_id: row.request_id,
                        ttft_us: row.streaming.then_some(()).and(row.first_chunk_time_us).map(|f| scaled(send, f)),
                        e2e_us: scaled(send, last),
                        output_tokens: row.output_tokens,
                    });
                }
            }
        }
        if requests.is_empty() {
            return Err(csv_err(
                csv_path,
                1,
                format!(
                    "no ok request after the {warm_up} warm-up requests to compare ({} rows: {} ok, {} error, {} timeout)",
                    counts.total, counts.ok, counts.error, counts.timeout
                ),
            ));
        }
        requests.sort_by_key(|r| r.request_id);
        let itl_us = Self::chunk_gaps(csv_path, &spans, time_scale)?;
        let duration_s = if last_end > first_send { (last_end - first_send) as f64 * time_scale / 1e6 } else { 0.0 };
        Ok(RealTrace { header, time_scale, requests, itl_us, counts, duration_s, output_tokens })
    }

    /// Gaps between consecutive chunks of the kept requests, from
    /// `PREFIX.chunks.csv` (rows `request_id,chunk_index,time_us`); `spans`
    /// gives each kept request's send and last-chunk times, between which
    /// its chunks must fall, in order.
    fn chunk_gaps(csv_path: &Path, spans: &BTreeMap<u64, (u64, u64)>, time_scale: f64) -> Result<Vec<f64>, ExperimentError> {
        let mut name = csv_path.file_stem().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".chunks.csv");
        let path = csv_path.with_file_name(name);
        let Ok(file) = blis_data::textfile::open(&path) else { return Ok(Vec::new()) };
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        let mut gaps = Vec::new();
        let mut reader = csv::Reader::from_reader(file);
        let headers = reader.headers().map_err(|e| csv_err(&path, 1, e.to_string()))?.clone();
        for (i, rec) in reader.records().enumerate() {
            let line = i as u64 + 2;
            let rec = rec.map_err(|e| csv_err(&path, line, e.to_string()))?;
            let field = |k: usize| {
                let raw = rec.get(k).unwrap_or_default();
                let name = headers.get(k).map_or_else(|| format!("column {}", k + 1), |h| format!("field `{h}`"));
                raw.parse::<u64>().map_err(|_| csv_err(&path, line, format!("{name} = `{raw}`: not a whole number")))
            };
            let (id, t) = (field(0)?, field(2)?);
            let Some(&(send, end)) = spans.get(&id) else { continue };
            if !(send..=end).contains(&t) {
                return Err(csv_err(
                    &path,
                    line,
                    format!(
                        "field `time_us` = {t}: outside request {id}'s send_time_us {send} .. last_chunk_time_us {end} in {}",
                        csv_path.display()
                    ),
                ));
            }
            if let Some(prev) = last.insert(id, t) {
                if t < prev {
                    return Err(csv_err(&path, line, format!("field `time_us` = {t}: before request {id}'s previous chunk at {prev}")));
                }
                gaps.push((t - prev) as f64 * time_scale);
            }
        }
        Ok(gaps)
    }
}

/// [`MAX_SPAN_S`] in µs: the longest a request, or a trace, may take.
const MAX_SPAN_US: u64 = MAX_SPAN_S as u64 * 1_000_000;

/// An ok row's times as an error message naming the field, unless they
/// are in order (send ≤ first chunk ≤ last chunk) and the request took at
/// most [`MAX_SPAN_S`].
fn check_times(send_us: u64, first_chunk_us: Option<u64>, last_chunk_us: u64) -> Result<(), String> {
    if let Some(first) = first_chunk_us {
        if first < send_us {
            return Err(format!("field `first_chunk_time_us` = {first}: before send_time_us {send_us}"));
        }
        if last_chunk_us < first {
            return Err(format!("field `last_chunk_time_us` = {last_chunk_us}: before first_chunk_time_us {first}"));
        }
    }
    match last_chunk_us.checked_sub(send_us) {
        None => Err(format!("field `last_chunk_time_us` = {last_chunk_us}: before send_time_us {send_us}")),
        Some(took) if took > MAX_SPAN_US => {
            Err(format!("field `last_chunk_time_us` = {last_chunk_us}: more than {MAX_SPAN_S:e} s after send_time_us {send_us}"))
        }
        Some(_) => Ok(()),
    }
}

/// A warning when the replay compared is of another trace than the one
/// recorded (paths compared once resolved, so `./t.csv` is `t.csv`).
fn other_trace(trace: &str, replayed: &str) -> Option<String> {
    let resolved = |p: &str| std::fs::canonicalize(p).unwrap_or_else(|_| Path::new(p).to_path_buf());
    (resolved(trace) != resolved(replayed)).then(|| {
        format!("The replay (--sim) is of the trace {replayed}, not {trace}: its requests are matched by id with another recording's.")
    })
}

/// Real and simulated quantiles, in ms.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Percentiles {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Percentiles {
    fn of(sorted_ms: &[f64]) -> Percentiles {
        let p = |q| percentile_sorted(sorted_ms, q);
        Percentiles { mean: mean(sorted_ms), p50: p(50.0), p90: p(90.0), p95: p(95.0), p99: p(99.0) }
    }

    fn error_pct(sim: &Percentiles, real: &Percentiles) -> Percentiles {
        let e = |s: f64, r: f64| if r != 0.0 { (s - r) / r * 100.0 } else { 0.0 };
        Percentiles {
            mean: e(sim.mean, real.mean),
            p50: e(sim.p50, real.p50),
            p90: e(sim.p90, real.p90),
            p95: e(sim.p95, real.p95),
            p99: e(sim.p99, real.p99),
        }
    }
}

/// The spec's quality guidance (§11): thresholds on MAPE and Pearson r.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Quality {
    /// MAPE < 10 % and r > 0.95.
    Excellent,
    /// MAPE < 20 % and r > 0.85.
    Good,
    /// MAPE < 35 % and r > 0.70.
    Fair,
    /// Anything worse.
    Poor,
}

impl Quality {
    /// The rating of a MAPE (%) and correlation (a missing r counts as 0).
    pub fn rate(mape: f64, r: Option<f64>) -> Quality {
        let r = r.unwrap_or(0.0);
        if mape < 10.0 && r > 0.95 {
            Quality::Excellent
        } else if mape < 20.0 && r > 0.85 {
            Quality::Good
        } else if mape < 35.0 && r > 0.70 {
            Quality::Fair
        } else {
            Quality::Poor
        }
    }
}

/// Comparison of one per-request metric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricComparison {
    /// Requests compared.
    pub n: usize,
    /// Real distribution, ms.
    pub real_ms: Percentiles,
    /// Simulated distribution, ms.
    pub sim_ms: Percentiles,
    /// (sim − real) / real per statistic, %.
    pub error_pct: Percentiles,
    /// Mean absolute percentage error over requests, %.
    pub mape: f64,
    /// Bootstrap 95 % interval of the MAPE.
    pub mape_ci95: Option<Interval>,
    /// Pearson correlation of real and simulated values.
    pub pearson_r: Option<f64>,
    /// Bootstrap 95 % interval of r.
    pub pearson_ci95: Option<Interval>,
    /// Mean signed percentage error, %.
    pub mean_signed_error_pct: f64,
    /// `over-predict`, `under-predict` or `neutral` (|mean signed error| < 2 %).
    pub bias_direction: &'static str,
    /// Two-sample KS test of the distributions.
    pub ks: Option<KsTest>,
    /// (real, sim) quantiles at 100 probabilities, ms.
    pub qq_ms: Vec<(f64, f64)>,
    /// Quality rating.
    pub quality: Quality,
}

/// Comparison of a metric known only as a distribution (ITL).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DistributionComparison {
    /// Real samples.
    pub n_real: usize,
    /// Simulated samples.
    pub n_sim: usize,
    /// Real distribution, ms.
    pub real_ms: Percentiles,
    /// Simulated distribution, ms.
    pub sim_ms: Percentiles,
    /// (sim − real) / real per statistic, %.
    pub error_pct: Percentiles,
    /// Two-sample KS test.
    pub ks: Option<KsTest>,
    /// (real, sim) quantiles at 100 probabilities, ms.
    pub qq_ms: Vec<(f64, f64)>,
}

/// Throughput, real and simulated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThroughputComparison {
    /// Real generated tokens per second (server time).
    pub real_output_tokens_per_s: f64,
    /// Simulated generated tokens per second.
    pub sim_output_tokens_per_s: f64,
    /// (sim − real) / real, %.
    pub error_pct: f64,
}

/// Which server settings the simulation took from the trace and which it defaulted.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConfigMatch {
    /// Knobs with values from the trace header, flags or files.
    pub matched: Vec<String>,
    /// Knobs left at BLIS's defaults.
    pub defaulted: Vec<String>,
    /// Header entries BLIS does not simulate.
    pub ignored: Vec<String>,
}

/// The calibration report (`blis calibrate --report`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibrationReport {
    /// The trace compared.
    pub trace: String,
    /// Server seconds per wall-clock second applied to real times.
    pub time_scale: f64,
    /// Row accounting.
    pub request_summary: RequestCounts,
    /// Per-request metrics (`ttft`, `e2e`, `tpot`).
    pub metrics: BTreeMap<&'static str, MetricComparison>,
    /// Inter-token latency distribution.
    pub itl: Option<DistributionComparison>,
    /// Throughput.
    pub throughput: ThroughputComparison,
    /// Server settings matched vs defaulted.
    pub config_match: ConfigMatch,
    /// The worst rating among the per-request metrics.
    pub quality: Quality,
    /// Things that make the numbers less reliable, one line each.
    pub warnings: Vec<String>,
    /// What the simulation does not model (always included).
    pub known_limitations: Vec<&'static str>,
}

/// The limitations every calibration report states (spec §11).
pub const KNOWN_LIMITATIONS: [&str; 3] = [
    "Prefix cache divergence: the simulation builds synthetic prefix token ids; prefix-cache hit rates may differ from the real server's, especially after evictions.",
    "Speculative decoding is not modeled: if the real server uses it, real token generation differs from the simulation's one token per step.",
    "Client-side overheads not in the latency model (HTTP, tokenization, scheduling jitter of the load generator) appear as a small TTFT bias.",
];

/// Knobs a calibration cares about being matched to the real server.
const SERVER_KNOBS: [&str; 11] = [
    "model",
    "hardware",
    "tp",
    "max-num-seqs",
    "max-num-batched-tokens",
    "max-model-len",
    "block-size",
    "quantization",
    "kv-cache-dtype",
    "num-gpu-blocks",
    "gpu-memory-utilization",
];

fn compare_paired(real_ms: &[f64], sim_ms: &[f64], seed: u64, resamples: usize, label: &str) -> MetricComparison {
    let (real_ms, sim_ms) = (real_ms.to_vec(), sim_ms.to_vec());
    let errors: Vec<f64> = sim_ms.iter().zip(&real_ms).filter_map(|(s, r)| ape(*s, *r)).collect();
    let signed: Vec<f64> = sim_ms.iter().zip(&real_ms).filter(|(_, r)| **r != 0.0).map(|(s, r)| (s - r) / r * 100.0).collect();
    let mape = if errors.is_empty() { 0.0 } else { mean(&errors) };
    let mean_signed = if signed.is_empty() { 0.0 } else { mean(&signed) };
    let r = pearson(&real_ms, &sim_ms);
    let (mape_ci95, pearson_ci95) = bootstrap_mape_pearson(&real_ms, &sim_ms, resamples, seed, label);
    let (real_p, sim_p) = (Percentiles::of(&sorted(&real_ms)), Percentiles::of(&sorted(&sim_ms)));
    MetricComparison {
        n: real_ms.len(),
        error_pct: Percentiles::error_pct(&sim_p, &real_p),
        real_ms: real_p,
        sim_ms: sim_p,
        mape,
        mape_ci95,
        pearson_r: r,
        pearson_ci95,
        mean_signed_error_pct: mean_signed,
        bias_direction: if mean_signed > 2.0 {
            "over-predict"
        } else if mean_signed < -2.0 {
            "under-predict"
        } else {
            "neutral"
        },
        ks: ks_two_sample(&real_ms, &sim_ms),
        qq_ms: qq(&real_ms, &sim_ms, 100),
        quality: Quality::rate(mape, r),
    }
}

/// Real and simulated samples of one metric, in ms; per-request metrics are
/// paired index by index.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSamples {
    /// `ttft`, `e2e`, `tpot` or `itl`.
    pub metric: &'static str,
    /// Real values.
    pub real_ms: Vec<f64>,
    /// Simulated values.
    pub sim_ms: Vec<f64>,
}

/// The trace's requests matched with their replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Matched {
    /// Row accounting (with `unmatched` and `calibrated` filled in).
    pub counts: RequestCounts,
    /// TTFT, E2E and TPOT paired per request, then ITL as two distributions.
    pub samples: Vec<MetricSamples>,
}

/// Pairs every kept trace request with its replayed result (by request id).
pub fn match_requests(real: &RealTrace, sim: &SimDocument) -> Matched {
    let by_id: BTreeMap<u64, &ReplayedRequest> =
        sim.replay.requests.iter().filter(|r| r.outcome == "completed").map(|r| (r.request_id, r)).collect();
    let mut counts = real.counts.clone();
    let mut samples: Vec<MetricSamples> = ["ttft", "e2e", "tpot", "itl"]
        .into_iter()
        .map(|metric| MetricSamples { metric, real_ms: Vec::new(), sim_ms: Vec::new() })
        .collect();
    for r in &real.requests {
        let Some(s) = by_id.get(&r.request_id) else {
            counts.unmatched += 1;
            continue;
        };
        counts.calibrated += 1;
        let Some(s_e2e) = s.e2e_us else { continue };
        samples[1].real_ms.push(r.e2e_us / 1e3);
        samples[1].sim_ms.push(s_e2e as f64 / 1e3);
        if let (Some(rt), Some(st)) = (r.ttft_us, s.ttft_us) {
            samples[0].real_ms.push(rt / 1e3);
            samples[0].sim_ms.push(st as f64 / 1e3);
            if r.output_tokens >= 2 && s.output_tokens >= 2 {
                samples[2].real_ms.push((r.e2e_us - rt) / f64::from(r.output_tokens - 1) / 1e3);
                samples[2].sim_ms.push((s_e2e - st) as f64 / f64::from(s.output_tokens - 1) / 1e3);
            }
        }
    }
    samples[3].real_ms = real.itl_us.iter().map(|v| v / 1e3).collect();
    samples[3].sim_ms = sim.replay.itl_us.iter().flat_map(|&(v, n)| std::iter::repeat_n(v as f64 / 1e3, n as usize)).collect();
    Matched { counts, samples }
}

/// Compares a recorded trace with its replay, from the matched samples.
/// `seed` and `resamples` drive the bootstrap.
pub fn compare(trace_name: &str, real: &RealTrace, sim: &SimDocument, matched: &Matched, seed: u64, resamples: usize) -> CalibrationReport {
    let counts = matched.counts.clone();
    let mut metrics = BTreeMap::new();
    for m in matched.samples.iter().filter(|m| m.metric != "itl" && !m.real_ms.is_empty()) {
        metrics.insert(m.metric, compare_paired(&m.real_ms, &m.sim_ms, seed, resamples, m.metric));
    }
    let itl = matched.samples.iter().find(|m| m.metric == "itl").filter(|m| !m.real_ms.is_empty() && !m.sim_ms.is_empty()).map(|m| {
        let (rs, ss) = (sorted(&m.real_ms), sorted(&m.sim_ms));
        let (real_p, sim_p) = (Percentiles::of(&rs), Percentiles::of(&ss));
        DistributionComparison {
            n_real: rs.len(),
            n_sim: ss.len(),
            error_pct: Percentiles::error_pct(&sim_p, &real_p),
            real_ms: real_p,
            sim_ms: sim_p,
            ks: ks_two_sample(&rs, &ss),
            qq_ms: qq(&rs, &ss, 100),
        }
    });
    let real_tput = if real.duration_s > 0.0 { real.output_tokens as f64 / real.duration_s } else { 0.0 };
    let sim_tput = sim.throughput.output_tokens_per_s;
    let mut config_match = ConfigMatch { ignored: sim.replay.ignored.clone(), ..ConfigMatch::default() };
    for knob in SERVER_KNOBS {
        match sim.config.get(knob) {
            Some(v) if v["source"] == "default" => config_match.defaulted.push(format!("{knob}={}", v["value"])),
            Some(v) if v["source"] == "derived" => config_match.defaulted.push(format!("{knob}={} (derived)", v["value"])),
            Some(v) => config_match.matched.push(format!("{knob}={} ({})", v["value"], v["source"].as_str().unwrap_or(""))),
            None => {}
        }
    }
    let mut warnings = Vec::new();
    if counts.calibrated < 30 {
        warnings.push(format!("Insufficient requests for statistical significance (N = {} < 30).", counts.calibrated));
    }
    if counts.unmatched > 0 {
        warnings.push(format!("{} requests have no completed result in the replay; they are excluded.", counts.unmatched));
    }
    if let Some(lg) = &real.header.load_generator
        && lg.get("saturated").and_then(serde_json::Value::as_bool) == Some(true)
    {
        warnings.push(
            "The load generator saturated during the recording (median schedule delay > 10 ms): arrivals were later than planned.".into(),
        );
    }
    warnings.extend(other_trace(trace_name, &sim.replay.trace));
    if real.itl_us.is_empty() {
        warnings.push("No chunk timestamps (PREFIX.chunks.csv) or no streaming requests: ITL is not compared.".into());
    }
    let quality = metrics.values().map(|m| m.quality).max_by_key(|q| *q as u8).unwrap_or(Quality::Poor);
    CalibrationReport {
        trace: trace_name.to_string(),
        time_scale: real.time_scale,
        request_summary: counts,
        metrics,
        itl,
        throughput: ThroughputComparison {
            real_output_tokens_per_s: real_tput,
            sim_output_tokens_per_s: sim_tput,
            error_pct: if real_tput > 0.0 { (sim_tput - real_tput) / real_tput * 100.0 } else { 0.0 },
        },
        config_match,
        quality,
        warnings,
        known_limitations: KNOWN_LIMITATIONS.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quality_thresholds_follow_the_spec() {
        assert_eq!(Quality::rate(5.0, Some(0.99)), Quality::Excellent);
        assert_eq!(Quality::rate(5.0, Some(0.9)), Quality::Good);
        assert_eq!(Quality::rate(15.0, Some(0.99)), Quality::Good);
        assert_eq!(Quality::rate(30.0, Some(0.8)), Quality::Fair);
        assert_eq!(Quality::rate(40.0, Some(0.99)), Quality::Poor);
        assert_eq!(Quality::rate(5.0, None), Quality::Poor);
    }

    #[test]
    fn paired_comparison_of_known_errors() {
        // Sim is 10 % high on every request: MAPE 10, r = 1, over-predicting.
        let real: Vec<f64> = (1..=100).map(f64::from).collect();
        let sim: Vec<f64> = real.iter().map(|r| r * 1.1).collect();
        let m = compare_paired(&real, &sim, 1, 200, "x");
        assert!((m.mape - 10.0).abs() < 1e-9);
        assert!((m.pearson_r.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(m.bias_direction, "over-predict");
        assert!((m.error_pct.p50 - 10.0).abs() < 1e-9);
        assert_eq!(m.qq_ms.len(), 100);
        assert_eq!(m.quality, Quality::Good); // MAPE 10 is not < 10
    }

    /// Fuzzing found out-of-order trace times clamped to zero latencies.
    #[test]
    fn trace_times_out_of_order_are_refused_naming_the_field() {
        assert_eq!(check_times(100, Some(150), 200), Ok(()));
        assert_eq!(check_times(100, None, 100), Ok(()));
        for (send, first, last, field) in [
            (100, Some(50), 200, "first_chunk_time_us"),
            (100, Some(150), 120, "last_chunk_time_us"),
            (18_000_000_000_000_000_000, None, 200, "last_chunk_time_us"),
            (0, None, u64::MAX, "last_chunk_time_us"),
        ] {
            let e = check_times(send, first, last).unwrap_err();
            assert!(e.starts_with(&format!("field `{field}`")), "{e}");
        }
    }

    /// Fuzzing found chunk rows at u64::MAX or going backwards counted as gaps.
    #[test]
    fn chunks_outside_their_request_or_backwards_are_refused_with_the_line() {
        let dir = std::env::temp_dir().join(format!("blis-live-chunks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let csv = dir.join("t.csv");
        let spans = BTreeMap::from([(1, (100, 200))]);
        let gaps = |rows: &str| {
            std::fs::write(dir.join("t.chunks.csv"), format!("request_id,chunk_index,time_us\n{rows}")).unwrap();
            RealTrace::chunk_gaps(&csv, &spans, 1.0).map_err(|e| e.to_string())
        };
        assert_eq!(gaps("1,0,110\n1,1,130\n2,0,5\n"), Ok(vec![20.0]), "request 2 is not kept");
        let backwards = gaps("1,0,150\n1,1,120\n").unwrap_err();
        assert!(backwards.contains("t.chunks.csv:3") && backwards.contains("before request 1's previous chunk"), "{backwards}");
        let huge = gaps(&format!("1,0,{}\n", u64::MAX)).unwrap_err();
        assert!(huge.contains("t.chunks.csv:2") && huge.contains("outside request 1's"), "{huge}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_replay_of_another_trace_is_warned_about() {
        assert_eq!(other_trace("traces/a.csv", "traces/./a.csv"), None);
        let w = other_trace("traces/a.csv", "traces/b.csv").unwrap();
        assert!(w.contains("traces/b.csv") && w.contains("traces/a.csv"), "{w}");
    }

    /// Fuzzing found replays `blis replay` cannot have written compared as if real.
    #[test]
    fn impossible_replay_results_are_refused_naming_the_field() {
        let ok = |id: u64| ReplayedRequest {
            request_id: id,
            outcome: "completed".into(),
            arrival_us: 0,
            ttft_us: Some(10),
            e2e_us: Some(20),
            input_tokens: 1,
            output_tokens: 1,
        };
        let detail = |requests| ReplayDetail { requests, ..ReplayDetail::default() };
        assert_eq!(detail(vec![ok(0), ok(1)]).check(), Ok(()));
        let cases = [
            (vec![], "replay.requests"),
            (vec![ok(0), ReplayedRequest { outcome: "exploded".into(), ..ok(1) }], "replay.requests[1].outcome"),
            (vec![ok(0), ok(0)], "replay.requests[1].request_id"),
            (vec![ReplayedRequest { ttft_us: Some(30), ..ok(0) }], "replay.requests[0].ttft_us"),
            (vec![ReplayedRequest { e2e_us: Some(u64::MAX), ..ok(0) }], "replay.requests[0].e2e_us"),
            (vec![ReplayedRequest { e2e_us: None, ..ok(0) }], "replay.requests[0].e2e_us"),
        ];
        for (requests, field) in cases {
            let e = detail(requests).check().unwrap_err();
            assert!(e.starts_with(&format!("field `{field}`")), "{e}");
        }
    }
}
