//! Writing trace rows: a generated request, and what a live server did with
//! it when the trace records a run.

use std::io::Write;

use super::{COLUMNS, Row, Status};
use crate::generator::GeneratedRequest;
use crate::plan::Plan;

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
