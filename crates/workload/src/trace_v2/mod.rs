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
//! Reading order: the row schema here, [`header`] (the YAML beside the
//! CSV), [`writer`], [`reader`] (replay).
//!
//! Replay reads the CSV twice, streaming both times: a first pass checks
//! every row (so a bad row fails before the simulation starts) and collects
//! the label names; the second pass feeds the simulation.

use serde::{Deserialize, Serialize};

pub mod header;
pub mod reader;
pub mod writer;

pub use header::{BlisHeader, LabelLists, TraceHeader, header_path, header_time_scale, trace_csv};
pub use reader::{ArrivalColumn, ReplayInfo, TraceReplay};
pub use writer::{Observed, TraceWriter};

/// The CSV columns, in the order written.
pub const COLUMNS: [&str; 22] = [
    "request_id",
    "client_id",
    "tenant_id",
    "slo_class",
    "session_id",
    "round_index",
    "prefix_group",
    "streaming",
    "input_tokens",
    "output_tokens",
    "text_tokens",
    "image_tokens",
    "audio_tokens",
    "video_tokens",
    "reason_ratio",
    "arrival_time_us",
    "send_time_us",
    "first_chunk_time_us",
    "last_chunk_time_us",
    "num_chunks",
    "status",
    "error_message",
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

#[cfg(test)]
mod tests;
