//! What the CLI writes: output files that appear only when complete, JSON
//! reports, per-request CSV rows, checked spec files, warnings and the
//! progress bar.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use blis_engine::instance::Observer;
use blis_engine::kv::events::KvEventBatch;
use blis_engine::request::RequestRecord;
use blis_workload::spec::parse;
use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{BadInput, bad_input};

/// A file written under a temporary name and renamed into place by
/// [`AtomicFile::commit`]; dropped without committing, it is removed, so a
/// failed run never leaves a partial output. Paths that exist and are not
/// regular files (`/dev/null`, a named pipe) are written directly.
pub struct AtomicFile {
    tmp: Option<PathBuf>,
    dest: PathBuf,
    writer: Option<BufWriter<File>>,
    /// The entry in [`OPEN_OUTPUTS`] (regular files only).
    claim: Option<PathBuf>,
}

/// The regular-file outputs open in this process, by [`file_identity`],
/// with the flag that named each (two outputs of one command must differ)
/// and the temporary file being written.
static OPEN_OUTPUTS: Mutex<Vec<OpenOutput>> = Mutex::new(Vec::new());

/// One entry of [`OPEN_OUTPUTS`].
struct OpenOutput {
    id: PathBuf,
    flag: String,
    tmp: PathBuf,
}

/// Removes the temporary file of every output still open: for a command
/// stopped by a signal, which runs no destructor, so that it leaves no
/// `.NAME.blis-tmp` behind.
pub fn discard_open_outputs() {
    for open in OPEN_OUTPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
        let _ = std::fs::remove_file(&open.tmp);
    }
}

/// What `path` names, independent of spelling: the canonical path of the
/// file, or of its directory joined with its name when it does not exist yet.
fn file_identity(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match (dir.canonicalize(), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => path.to_path_buf(),
    }
}

/// Refuses outputs that would replace one of the command's inputs (a
/// workload written over the spec it came from). Flags are named without
/// their dashes; absent options are `None`.
pub fn refuse_overwriting_inputs(outputs: &[(&str, Option<&Path>)], inputs: &[(&str, Option<&Path>)]) -> Result<(), BadInput> {
    for (out_flag, out) in outputs.iter().filter_map(|(f, p)| p.map(|p| (f, p))) {
        if std::fs::metadata(out).is_ok_and(|m| !m.is_file()) {
            continue;
        }
        let id = file_identity(out);
        if let Some((in_flag, _)) = inputs.iter().filter_map(|(f, p)| p.map(|p| (f, p))).find(|(_, p)| file_identity(p) == id) {
            return Err(bad_input!("--{out_flag} {}: is also the --{in_flag} input; writing it would destroy the input", out.display()));
        }
    }
    Ok(())
}

impl AtomicFile {
    /// Opens the output for `dest`. `flag` names the option in errors. A
    /// regular file another open output of this process is writing is refused.
    pub fn create(flag: &str, dest: &Path) -> Result<AtomicFile, BadInput> {
        let special = std::fs::metadata(dest).is_ok_and(|m| !m.is_file());
        let (tmp, claim) = if special {
            (None, None)
        } else {
            let name = dest.file_name().ok_or_else(|| bad_input!("--{flag} {}: not a file path", dest.display()))?;
            let id = file_identity(dest);
            let mut open = OPEN_OUTPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(other) = open.iter().find(|o| o.id == id) {
                return Err(bad_input!("--{flag} {}: is also the path of --{}; give each output its own file", dest.display(), other.flag));
            }
            let tmp = dest.with_file_name(format!(".{}.blis-tmp", name.to_string_lossy()));
            open.push(OpenOutput { id: id.clone(), flag: flag.to_string(), tmp: tmp.clone() });
            (Some(tmp), Some(id))
        };
        let open_path = tmp.as_deref().unwrap_or(dest);
        match File::create(open_path) {
            Ok(file) => Ok(AtomicFile { tmp, dest: dest.to_path_buf(), writer: Some(BufWriter::new(file)), claim }),
            Err(e) => {
                release(claim.as_deref());
                Err(bad_input!("--{flag} {}: cannot create: {e}", dest.display()))
            }
        }
    }

    /// The buffered writer.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.writer.as_mut().expect("writer is present until commit")
    }

    /// Flushes and moves the file into place.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let mut w = self.writer.take().expect("writer is present until commit");
        w.flush().with_context(|| format!("writing {}", self.dest.display()))?;
        drop(w);
        match self.tmp.take() {
            Some(tmp) => std::fs::rename(&tmp, &self.dest).with_context(|| format!("moving output into place at {}", self.dest.display())),
            None => Ok(()),
        }
    }
}

/// Removes `claim` from [`OPEN_OUTPUTS`].
fn release(claim: Option<&Path>) {
    if let Some(id) = claim {
        let mut open = OPEN_OUTPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = open.iter().position(|o| o.id == id) {
            open.swap_remove(i);
        }
    }
}

impl std::io::Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.writer().flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let (Some(_), Some(tmp)) = (self.writer.take(), &self.tmp) {
            let _ = std::fs::remove_file(tmp);
        }
        release(self.claim.as_deref());
    }
}

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

/// Writes vLLM's KV events, one JSON line per batch (`--kv-events-output`).
pub struct KvEventsJson {
    file: AtomicFile,
    error: Option<std::io::Error>,
}

impl KvEventsJson {
    /// Starts the file.
    pub fn create(dest: &Path) -> Result<KvEventsJson, BadInput> {
        Ok(KvEventsJson { file: AtomicFile::create("kv-events-output", dest)?, error: None })
    }

    /// Finishes the file; reports the first write error, if any.
    pub fn commit(self) -> anyhow::Result<()> {
        if let Some(e) = self.error {
            return Err(e).context("writing --kv-events-output");
        }
        self.file.commit()
    }
}

impl Observer for KvEventsJson {
    fn on_finish(&mut self, _record: &RequestRecord) {}
    fn observes_tokens(&self) -> bool {
        false
    }
    fn on_kv_events(&mut self, batch: &KvEventBatch<'_>) {
        if self.error.is_none() {
            let w = self.file.writer();
            self.error = serde_json::to_writer(&mut *w, batch).map_err(std::io::Error::from).and_then(|()| writeln!(w)).err();
        }
    }
}

/// A progress bar on stderr that appears only when the run has taken more
/// than a second and stderr is a terminal. It reads the wall clock, which is
/// fine: it observes the simulation and never feeds anything back.
pub struct Progress {
    total: u64,
    done: u64,
    started: Instant,
    bar: Option<ProgressBar>,
    enabled: bool,
}

impl Progress {
    /// A progress tracker for `total` requests.
    pub fn new(total: u64, quiet: bool) -> Progress {
        Progress { total, done: 0, started: Instant::now(), bar: None, enabled: !quiet && std::io::stderr().is_terminal() }
    }

    /// Removes the bar.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn on_finish(&mut self, _record: &RequestRecord) {
        self.done += 1;
        if !self.enabled || !self.done.is_multiple_of(512) {
            return;
        }
        if self.bar.is_none() && self.started.elapsed() > Duration::from_secs(1) {
            let bar = ProgressBar::new(self.total);
            bar.set_style(
                ProgressStyle::with_template("{spinner} simulating [{bar:40}] {pos}/{len} requests ({per_sec}, eta {eta})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
        }
    }
    fn observes_tokens(&self) -> bool {
        false
    }
}

/// Peak resident memory of this process in MiB (Linux `VmHWM`); `None` elsewhere.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib / 1024.0)
}

/// The absolute directory a new file at `output` will live in.
pub fn output_dir(output: &Path) -> PathBuf {
    let abs = std::path::absolute(output).unwrap_or_else(|_| output.to_path_buf());
    abs.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Writes `yaml` to `output` after checking that it plans from there.
pub fn write_checked_spec(output: &Path, comment: &str, yaml: &str) -> anyhow::Result<()> {
    let text = format!("{comment}{yaml}");
    let dir = output_dir(output);
    if !dir.is_dir() {
        return Err(bad_input!("--output {}: the directory {} does not exist", output.display(), dir.display()).into());
    }
    parse(&text, &output.display().to_string(), &dir)
        .and_then(|l| l.plan())
        .map_err(|e| bad_input!("the written spec would not load: {e}"))?;
    let mut file = AtomicFile::create("output", output)?;
    file.writer().write_all(text.as_bytes()).context("writing --output")?;
    file.commit()
}

/// Writes `text` to stdout: an error (a full disk, a closed file) instead
/// of `print!`'s panic.
pub fn write_stdout(text: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    std::io::stdout().lock().write_fmt(text).context("writing to stdout")
}

/// `print!` that returns [`write_stdout`]'s error instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*)) };
}
pub(crate) use out;

/// `println!` that returns [`write_stdout`]'s error instead of panicking.
macro_rules! outln {
    () => { $crate::output::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use outln;

/// Writes a report as pretty JSON to `output`, or stdout.
pub fn write_json<T: serde::Serialize>(report: &T, output: Option<&mut AtomicFile>) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report).context("serialising the report")?;
    match output {
        Some(f) => writeln!(f.writer(), "{json}").context("writing --output"),
        None => writeln!(std::io::stdout().lock(), "{json}").context("writing the report to stdout"),
    }
}

/// Warnings not printed yet: see [`warn`].
static HELD_WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Holds warnings back until the command has checked all its input
/// ([`print_warnings`]), so a command that then fails on bad input prints
/// only its one error line.
pub fn warn(warnings: &[String]) {
    HELD_WARNINGS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(warnings.iter().cloned());
}

/// Prints the held warnings on stderr, one line each: once a command has
/// checked its input and starts its work, and when it succeeds.
pub fn print_warnings() {
    let held = std::mem::take(&mut *HELD_WARNINGS.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for w in held {
        eprintln!("warning: {}", crate::error::tidy_numbers(&w));
    }
}

/// A rate for people: at most four decimals, no trailing zeros (3.3833, 20).
pub fn rate_text(req_per_s: f64) -> String {
    format!("{}", (req_per_s * 1e4).round() / 1e4)
}
