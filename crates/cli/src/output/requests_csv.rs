//! `--requests-csv`: one CSV row per finished request (vLLM's per-request
//! metrics, plus the KV-tier and P/D phase columns a run has).

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use blis_engine::instance::Observer;
use blis_engine::request::RequestRecord;

use super::AtomicFile;
use crate::error::BadInput;

/// Writes one CSV row per finished request.
pub struct RequestCsv {
    file: AtomicFile,
    error: Option<std::io::Error>,
    columns: CsvColumns,
}

/// The columns a run adds to the per-request CSV.
#[derive(Copy, Clone, Debug, Default)]
pub struct CsvColumns {
    /// The run has KV tiers below the GPU: [`OFFLOAD_CSV_COLUMNS`].
    pub offload: bool,
    /// The run is disaggregated: [`PD_CSV_COLUMNS`].
    pub pd: bool,
}

/// Header of the per-request CSV.
pub const REQUEST_CSV_HEADER: &str = "id,instance,outcome,arrival_ms,input_tokens,output_tokens,cached_prompt_tokens,preemptions,\
ttft_ms,tpot_ms,e2e_ms,scheduling_delay_ms,first_token_ms,finished_ms";

/// Columns the per-request CSV gains when KV tiers are on: prompt tokens
/// loaded from them, and the time spent waiting for those loads.
pub const OFFLOAD_CSV_COLUMNS: &str = ",loaded_prompt_tokens,kv_load_wait_ms";

/// Columns the per-request CSV gains in a disaggregated run: a
/// disaggregated request's prefill instance and its TTFT in phases, which
/// add up to its TTFT (empty for a request its decode instance prefilled):
/// arrival → prefill wait queue (admission, routing, queueing overhead),
/// prefill queue, prefill, hand-off to the decode instance, KV transfer,
/// decode queue, first decode step.
pub const PD_CSV_COLUMNS: &str =
    ",prefill_instance,gateway_ms,prefill_queue_ms,prefill_ms,handoff_ms,transfer_ms,decode_queue_ms,first_decode_step_ms";

fn ms(t: Option<blis_engine::time::Micros>) -> String {
    t.map_or(String::new(), |t| format!("{:.3}", t.as_ms_f64()))
}

impl RequestCsv {
    /// Starts the file (header included), with the offload columns when
    /// `offload` is set.
    pub fn create(dest: &Path, columns: CsvColumns) -> Result<RequestCsv, BadInput> {
        let mut file = AtomicFile::create("requests-csv", dest)?;
        let offload = if columns.offload { OFFLOAD_CSV_COLUMNS } else { "" };
        let pd = if columns.pd { PD_CSV_COLUMNS } else { "" };
        let error = writeln!(file.writer(), "{REQUEST_CSV_HEADER}{offload}{pd}").err();
        Ok(RequestCsv { file, error, columns })
    }

    /// Finishes the file; reports the first write error, if any.
    pub fn commit(self) -> anyhow::Result<()> {
        if let Some(e) = self.error {
            return Err(e).context("writing --requests-csv");
        }
        self.file.commit()
    }

    fn row(&mut self, r: &RequestRecord) -> std::io::Result<()> {
        let w = self.file.writer();
        write!(
            w,
            "{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{:.3}",
            r.id.0,
            r.instance.map_or_else(String::new, |i| i.to_string()),
            r.outcome.as_str(),
            r.arrival.as_ms_f64(),
            r.input_tokens,
            r.output_tokens,
            r.cached_prompt_tokens,
            r.preemptions,
            ms(r.ttft()),
            r.tpot_us().map_or(String::new(), |t| format!("{:.3}", t / 1e3)),
            ms(r.e2e()),
            ms(r.scheduling_delay()),
            ms(r.first_token),
            r.finished.as_ms_f64(),
        )?;
        if self.columns.offload {
            write!(w, ",{},{:.3}", r.loaded_prompt_tokens, r.kv_load_wait.as_ms_f64())?;
        }
        if self.columns.pd {
            match (r.pd, r.enqueued, r.first_scheduled, r.first_token) {
                (Some(p), Some(enqueued), Some(scheduled), Some(first)) => {
                    let span =
                        |a: blis_engine::time::Micros, b: blis_engine::time::Micros| format!("{:.3}", b.saturating_sub(a).as_ms_f64());
                    let decode_queue = (scheduled.saturating_sub(enqueued)).saturating_sub(r.kv_load_wait);
                    write!(
                        w,
                        ",{},{},{},{},{},{:.3},{:.3},{}",
                        p.prefill_instance,
                        span(r.arrival, p.prefill_enqueued),
                        span(p.prefill_enqueued, p.prefill_scheduled),
                        span(p.prefill_scheduled, p.prefill_finished),
                        span(p.prefill_finished, enqueued),
                        r.kv_load_wait.as_ms_f64(),
                        decode_queue.as_ms_f64(),
                        span(scheduled, first),
                    )?;
                }
                _ => write!(w, ",,,,,,,,")?,
            }
        }
        writeln!(w)
    }
}

impl Observer for RequestCsv {
    fn on_finish(&mut self, record: &RequestRecord) {
        if self.error.is_none() {
            self.error = self.row(record).err();
        }
    }
    fn observes_tokens(&self) -> bool {
        false
    }
}
