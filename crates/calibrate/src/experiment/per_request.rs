//! inference-perf's own per-request report,
//! `results/{prefix}per_request_lifecycle_metrics.json` (written when the
//! run set `report.request_lifecycle.per_request: true`), read as the rows
//! of a `requests.csv` when the experiment has none.
//!
//! The file is one JSON array with an entry per request: `start_time` and
//! `end_time` in seconds of a monotonic clock (`start_time` is the actual
//! send, after any wait for a concurrency slot), `error` (null for a
//! success), the prompt length in `info.input_tokens` (also
//! `info.request_metrics.text.input_tokens` in 2026 versions), and the
//! first streamed chunk's time in `computed_metrics.time_to_first_token`,
//! `info.response_metrics.chunk_times` or `info.output_token_times`
//! (whichever the version wrote), and in 2026 versions the server's own
//! count of generated tokens in `info.response_metrics.server_usage`
//! (the re-tokenised answer's length: `info.response_metrics.output_tokens`,
//! or `info.output_tokens` in older versions).
//! Entries carry no stage: stages run one
//! after another, so in send order the first `sent(0)` entries are stage
//! 0's, the next `sent(1)` stage 1's, and so on.

use std::path::Path;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};

use blis_data::DataError;

use crate::error::ExperimentError;
use crate::experiment::requests::{RequestRow, check_row};

/// One entry of the report (the keys BLIS reads).
#[derive(Deserialize)]
struct Entry {
    start_time: f64,
    end_time: f64,
    #[serde(default)]
    info: Option<Info>,
    #[serde(default)]
    computed_metrics: Option<Computed>,
    /// Null for a success.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Info {
    #[serde(default)]
    input_tokens: Option<u32>,
    /// The answer re-tokenised by the client (versions before 2026).
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    request_metrics: Option<RequestMetrics>,
    #[serde(default)]
    response_metrics: Option<ResponseMetrics>,
    /// Late-2025 versions: a timestamp per streamed chunk.
    #[serde(default, deserialize_with = "first_of")]
    output_token_times: Option<f64>,
}

#[derive(Deserialize)]
struct RequestMetrics {
    #[serde(default)]
    text: Option<TextMetrics>,
}

#[derive(Deserialize)]
struct TextMetrics {
    #[serde(default)]
    input_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct ResponseMetrics {
    #[serde(default, deserialize_with = "first_of")]
    chunk_times: Option<f64>,
    /// What the server reported generating (2026 versions; the other
    /// output counts are re-tokenised text).
    #[serde(default)]
    server_usage: Option<ServerUsage>,
    /// The answer re-tokenised by the client (2026 versions).
    #[serde(default)]
    output_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct ServerUsage {
    #[serde(default)]
    completion_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct Computed {
    #[serde(default)]
    time_to_first_token: Option<f64>,
}

/// The first number of a list (or null), without keeping the rest.
fn first_of<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    struct First;
    impl<'de> Visitor<'de> for First {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of timestamps in seconds, or null")
        }
        fn visit_unit<E>(self) -> Result<Option<f64>, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Option<f64>, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<f64>, A::Error> {
            let first = seq.next_element::<f64>()?;
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(first)
        }
    }
    deserializer.deserialize_any(First)
}

impl Entry {
    fn input_tokens(&self) -> u32 {
        let info = self.info.as_ref();
        let newer = info.and_then(|i| i.request_metrics.as_ref()?.text.as_ref()?.input_tokens);
        newer.or(info.and_then(|i| i.input_tokens)).unwrap_or(0)
    }

    /// Seconds from the send to the first streamed chunk.
    fn time_to_first_token(&self) -> Option<f64> {
        let info = self.info.as_ref();
        let first_chunk = info.and_then(|i| i.response_metrics.as_ref()?.chunk_times).or(info.and_then(|i| i.output_token_times));
        self.computed_metrics.as_ref().and_then(|c| c.time_to_first_token).or(first_chunk.map(|t| t - self.start_time))
    }
}

/// The rows of the report at `path`, in send order, assigned to stages by
/// the requests each stage sent (`stage_sent`, from its lifecycle report).
/// `probe_sent` requests of a sweep's saturation probe may precede them:
/// when the report holds them too, the earliest that many are left out.
pub fn read(path: &Path, stage_sent: &[u64], probe_sent: u64) -> Result<Vec<RequestRow>, ExperimentError> {
    let text = blis_data::textfile::read(path)
        .map_err(|e| ExperimentError::File(DataError::Io { path: path.to_path_buf(), message: e.to_string() }))?;
    let format = |message: String| ExperimentError::File(DataError::Format { path: path.to_path_buf(), message });
    let de = &mut serde_json::Deserializer::from_str(&text);
    let mut entries: Vec<Entry> = serde_path_to_error::deserialize(de).map_err(|e| format(blis_data::locate::json_message(&text, &e)))?;
    if let Some((i, e)) = entries.iter().enumerate().find(|(_, e)| !(e.start_time.is_finite() && e.end_time.is_finite())) {
        return Err(format(format!("entry {i}: start_time {} / end_time {}: must be numbers of seconds", e.start_time, e.end_time)));
    }
    let total: u64 = stage_sent.iter().sum();
    let probe = match entries.len() as u64 {
        n if n == total => 0,
        n if probe_sent > 0 && n == total + probe_sent => probe_sent,
        n => {
            return Err(format(format!(
                "{n} entries, but the stage reports count {total} requests (successes + failures){}; the report must have one entry per request",
                if probe_sent > 0 { format!(" and the sweep's probe {probe_sent}") } else { String::new() }
            )));
        }
    };
    entries.sort_by(|a, b| a.start_time.total_cmp(&b.start_time));
    entries.drain(..probe as usize);
    let first_send = entries.first().map_or(0.0, |e| e.start_time);
    let stage_of = stage_sent.iter().enumerate().flat_map(|(s, &n)| std::iter::repeat_n(s as u32, n as usize));
    entries
        .iter()
        .zip(stage_of)
        .enumerate()
        .map(|(index, (e, stage))| {
            let ok = e.error.is_none();
            let ms = |seconds: f64| seconds * 1e3;
            let row = RequestRow {
                index: index as u64,
                stage,
                arrival_time_us: ((e.start_time - first_send) * 1e6).round() as u64,
                input_tokens: e.input_tokens(),
                has_error: u8::from(!ok),
                e2e_ms: ok.then(|| ms(e.end_time - e.start_time)),
                ttft_ms: if ok { e.time_to_first_token().map(ms) } else { None },
                output_tokens: if ok {
                    e.info.as_ref().and_then(|i| i.response_metrics.as_ref()?.server_usage.as_ref()?.completion_tokens)
                } else {
                    None
                },
                output_tokens_retokenized: if ok {
                    e.info.as_ref().and_then(|i| i.response_metrics.as_ref().and_then(|m| m.output_tokens).or(i.output_tokens))
                } else {
                    None
                },
            };
            check_row(&row).map(|()| row).map_err(|m| format(format!("entry {index} in send order: {m}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(json: &str, stages: &[u64]) -> Result<Vec<RequestRow>, ExperimentError> {
        // Tests run in parallel: one directory per call.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("blis-per-request-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("per_request_lifecycle_metrics.json");
        std::fs::write(&path, json).unwrap();
        let r = read(&path, stages, 0);
        std::fs::remove_dir_all(&dir).unwrap();
        r
    }

    /// Both generations of the format: send order, stages by count, the
    /// newer and older places of prompt length and first-chunk time.
    #[test]
    fn both_versions_read_into_rows_in_send_order() {
        let json = r#"[
          {"start_time": 100.5, "end_time": 101.0, "request": "{}", "response": "data: x",
           "info": {"request_metrics": {"text": {"input_tokens": 600}}, "input_tokens": 1,
                    "response_metrics": {"chunk_times": [100.6, 100.7], "output_token_times": [], "output_tokens": 95,
                                         "server_usage": {"prompt_tokens": 600, "completion_tokens": 97}}}, "error": null},
          {"start_time": 100.0, "end_time": 100.9,
           "info": {"input_tokens": 512, "output_tokens": 4, "output_token_times": [100.25, 100.5, 100.9]}, "error": null},
          {"start_time": 103.0, "end_time": 103.1, "info": {"input_tokens": 0},
           "error": {"error_type": "TimeoutError", "error_msg": "Request timed out"}},
          {"start_time": 102.0, "end_time": 102.4, "computed_metrics": {"time_to_first_token": 0.125, "request_latency": 0.4},
           "info": {"input_tokens": 300}, "error": null}
        ]"#;
        let r = rows(json, &[2, 2]).unwrap();
        let got: Vec<(u64, u32, u64, u32, u8)> =
            r.iter().map(|r| (r.index, r.stage, r.arrival_time_us, r.input_tokens, r.has_error)).collect();
        assert_eq!(got, [(0, 0, 0, 512, 0), (1, 0, 500_000, 600, 0), (2, 1, 2_000_000, 300, 0), (3, 1, 3_000_000, 0, 1)]);
        assert_eq!(r.iter().map(|r| r.output_tokens).collect::<Vec<_>>(), [None, Some(97), None, None], "only the server's count is read");
        // The client's re-tokenised count, where each version put it (a failure has none).
        assert_eq!(r.iter().map(|r| r.output_tokens_retokenized).collect::<Vec<_>>(), [Some(4), Some(95), None, None]);
        let ms = |v: Option<f64>| v.map(|x| (x * 1e6).round() / 1e6);
        assert_eq!(
            r.iter().map(|r| (ms(r.e2e_ms), ms(r.ttft_ms))).collect::<Vec<_>>(),
            [(Some(900.0), Some(250.0)), (Some(500.0), Some(100.0)), (Some(400.0), Some(125.0)), (None, None)]
        );
    }

    #[test]
    fn what_cannot_be_replayed_is_refused_with_the_entry_named() {
        let one = r#"[{"start_time": 1.0, "end_time": 2.0, "info": {"input_tokens": 5}, "error": null}]"#;
        let e = rows(one, &[2]).unwrap_err().to_string();
        assert!(e.contains("1 entries, but the stage reports count 2"), "{e}");
        let e = rows(one, &[1]).unwrap_err().to_string();
        assert!(e.contains("entry 0 in send order") && e.contains("ttft_ms"), "a success without a first chunk: {e}");
        let e = rows(r#"[{"start_time": "x"}]"#, &[1]).unwrap_err().to_string();
        assert!(e.contains("start_time") && e.lines().count() == 1, "{e}");
        let backwards = r#"[{"start_time": 5.0, "end_time": 4.0, "computed_metrics": {"time_to_first_token": 0.1}, "error": null}]"#;
        assert!(rows(backwards, &[1]).unwrap_err().to_string().contains("e2e_ms"));
    }
}
