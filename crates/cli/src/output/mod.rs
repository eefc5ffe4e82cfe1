//! What the CLI writes, all in this module: output files that appear only
//! when complete ([`AtomicFile`]), JSON reports, checked spec files,
//! warnings and the progress bar here; the per-request CSV, vLLM's KV
//! events, the OpenTelemetry traces, the decision trace and the Parquet
//! sweep table in their own files.

pub mod decisions;
pub mod kv_events;
pub mod otel;
pub mod parquet;
pub mod requests_csv;

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use blis_engine::instance::Observer;
use blis_engine::request::RequestRecord;
use blis_workload::spec::parse;
use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{BadInput, bad_input};

/// The output flags `blis run`, `replay`, `sweep` and `fit` share: where
/// the result goes, and whether anything else is printed. Each command
/// says what its result is in its own help (`mut_arg`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct OutputArgs {
    /// Write the result to this file.
    #[arg(long, short, value_name = "PATH", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// Print only the result: no summary table, progress or timing.
    #[arg(long, short, help_heading = "Output")]
    pub quiet: bool,
}

/// The output flags of a command that simulates and reports (`blis run`,
/// `blis replay`): [`OutputArgs`] and what stdout gets.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ReportArgs {
    #[command(flatten)]
    pub to: OutputArgs,

    /// What stdout gets: the human summary, or the JSON report (the summary then goes to stderr).
    #[arg(long, value_enum, default_value_t = Format::Table, help_heading = "Output")]
    pub format: Format,
}

/// What a simulating command prints on stdout.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The human summary.
    #[default]
    Table,
    /// The JSON report (the summary then goes to stderr).
    Json,
}

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
