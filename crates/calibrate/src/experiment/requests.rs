//! What a client recorded of each request it sent: the rows of
//! `requests.csv` (or of inference-perf's per-request report, see
//! [`crate::experiment::per_request`]) and the checks every row passes.

use std::path::Path;

use blis_engine::time::{MAX_SPAN_S, Micros};
use serde::Deserialize;

use blis_data::DataError;

use crate::error::ExperimentError;

/// One row of `requests.csv`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RequestRow {
    /// Position in send order.
    pub index: u64,
    /// Load stage.
    pub stage: u32,
    /// Client send time from the first request, µs.
    pub arrival_time_us: u64,
    /// Prompt tokens the server saw (0 for requests that never got a response).
    pub input_tokens: u32,
    /// Whether the client saw an error (a timeout).
    pub has_error: u8,
    /// Client-side end-to-end latency, ms.
    #[serde(default)]
    pub e2e_ms: Option<f64>,
    /// Client-side time to first token, ms (empty for failures).
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// Tokens the server generated, when recorded (an `output_tokens` column).
    #[serde(default)]
    pub output_tokens: Option<u32>,
    /// Tokens of the answer's text as the client re-tokenised it, when
    /// recorded: read only for dataset runs (see
    /// [`Experiment::generated_tokens`](crate::experiment::Experiment::generated_tokens)).
    #[serde(default)]
    pub output_tokens_retokenized: Option<u32>,
}

/// The rows of `requests.csv` at `path`, checked: every stage in
/// `0..num_stages`. A sweep's rows of stage −1 (its saturation probe, which
/// is not compared) are left out when `sweep` is set, and the send times of
/// the rows kept are then counted from the first of them.
pub(crate) fn read_requests(path: &Path, num_stages: usize, sweep: bool) -> Result<Vec<RequestRow>, ExperimentError> {
    let csv_error = |line: usize, message: String| ExperimentError::Csv { path: path.to_path_buf(), line, message };
    let mut reader = csv::Reader::from_reader(
        blis_data::textfile::open(path)
            .map_err(|e| ExperimentError::File(DataError::Io { path: path.to_path_buf(), message: e.to_string() }))?,
    );
    let headers = reader.headers().map_err(|e| csv_error(1, e.to_string()))?.clone();
    let stage_column = headers.iter().position(|h| h == "stage");
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let line = i + 2;
        let record = record.map_err(|e| csv_error(line, e.to_string()))?;
        if let Some(stage) = stage_column.and_then(|c| record.get(c)).filter(|s| s.trim() == "-1") {
            if !sweep {
                return Err(csv_error(
                    line,
                    format!("field `stage` = {stage}: stage -1 is a sweep's probe, and results/config.yaml sets no load.sweep"),
                ));
            }
            continue;
        }
        let row: RequestRow = record.deserialize(Some(&headers)).map_err(|e| csv_error(line, csv_message(&e, &headers, &record)))?;
        if row.stage as usize >= num_stages {
            return Err(csv_error(
                line,
                format!("field `stage` = {}: results/ has stages 0 to {}", row.stage, num_stages.saturating_sub(1)),
            ));
        }
        check_row(&row).map_err(|message| csv_error(line, message))?;
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(csv_error(1, "no requests".into()));
    }
    if sweep {
        let first_send = rows.iter().map(|r| r.arrival_time_us).min().unwrap_or(0);
        rows.iter_mut().for_each(|r| r.arrival_time_us -= first_send);
    }
    Ok(rows)
}

/// A CSV error as one line naming the column by its header name and the
/// value it holds (``field `e2e_ms` = `abc`: invalid float literal``), where
/// the csv crate names it by position; other errors as they are.
pub(crate) fn csv_message(e: &csv::Error, headers: &csv::StringRecord, record: &csv::StringRecord) -> String {
    match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => match err.field().map(|i| i as usize) {
            Some(i) => {
                let name = headers.get(i).map_or_else(|| format!("column {}", i + 1), |h| format!("field `{h}`"));
                format!("{name} = `{}`: {}", record.get(i).unwrap_or_default(), err.kind())
            }
            None => err.kind().to_string(),
        },
        _ => e.to_string(),
    }
}

/// What a client can have recorded for one request: a send time within
/// [`Micros::MAX_SPAN`], `has_error` 0 or 1, latencies in [0, 1e8] s, and for
/// a success both latencies with the first token no later than the last.
pub(crate) fn check_row(row: &RequestRow) -> Result<(), String> {
    if row.arrival_time_us > Micros::MAX_SPAN.as_us() {
        return Err(format!(
            "field `arrival_time_us` = {}: must be at most {} (about three years)",
            row.arrival_time_us,
            Micros::MAX_SPAN.as_us()
        ));
    }
    let max_ms = MAX_SPAN_S * 1e3;
    for (field, v) in [("e2e_ms", row.e2e_ms), ("ttft_ms", row.ttft_ms)] {
        if let Some(v) = v
            && !(v.is_finite() && (0.0..=max_ms).contains(&v))
        {
            return Err(format!("field `{field}` = {v:?}: must be a number of ms in [0, {max_ms:e}]"));
        }
    }
    if row.has_error == 0 && row.output_tokens == Some(0) {
        return Err("field `output_tokens` = 0: a successful request generated at least one token".into());
    }
    match (row.has_error, row.ttft_ms, row.e2e_ms) {
        (0, Some(ttft), Some(e2e)) if ttft > e2e => Err(format!("field `ttft_ms` = {ttft:?}: later than `e2e_ms` = {e2e:?}")),
        (0, Some(_), Some(_)) | (1, _, _) => Ok(()),
        (0, _, _) => Err("fields `e2e_ms` and `ttft_ms`: a request without error (has_error = 0) needs both".into()),
        (other, _, _) => Err(format!("field `has_error` = {other}: must be 0 or 1")),
    }
}
