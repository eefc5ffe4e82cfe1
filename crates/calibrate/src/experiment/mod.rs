//! An experiment directory: one real inference-perf run against a vLLM
//! server, in the layout of `validation/vllm-h100/` (a public interface:
//! any directory with this layout works).
//!
//! ```text
//! <experiment>/
//!   exp-config.yaml                     server knobs: model, tensor_parallelism, max_model_len, max_num_batched_tokens, max_num_seqs
//!   server-facts.yaml        (optional) what the server log says: num_gpu_blocks, block_size, hardware, caching flags, status
//!   vllm.log                 (optional) the server's startup log, read for the facts server-facts.yaml does not give
//!                                        (see crate::experiment::vllm_log)
//!   normalized.json          (optional) the shared ground truth's one-file summary, read for the facts neither
//!                                        of the two gives (see crate::experiment::normalized)
//!   requests.csv             (optional) one row per request: index, stage, arrival_time_us, input_tokens, …, has_error, e2e_ms, ttft_ms
//!                                        (and, when recorded, output_tokens: what the server generated;
//!                                        output_tokens_retokenized: the answer re-tokenised, read for dataset runs)
//!   results/config.yaml                 the inference-perf configuration actually used
//!   results/stage_N_lifecycle_metrics.json   per-stage measurements (latencies in seconds)
//!   results/summary_lifecycle_metrics.json   (optional) the same over the whole run
//!   results/per_request_lifecycle_metrics.json   (optional) inference-perf's per-request report,
//!                                        read as requests.csv when there is none (see crate::experiment::per_request)
//! ```
//!
//! The report names carry the run's `storage.*.report_file_prefix` when it
//! set one, as inference-perf writes them.

pub mod facts;
pub mod lengths;
pub mod normalized;
pub mod per_request;
pub mod requests;
pub mod vllm_log;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use blis_engine::time::MAX_SPAN_S;
use blis_workload::inference_perf::{InferencePerfConfig, QuantileTable, Stage, Sweep};
use blis_workload::limits::MAX_RATE_PER_S;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use blis_data::DataError;

use crate::error::ExperimentError;
use facts::SERVER_FACT_KEYS;
pub use facts::{CpuOffloadFact, ServerFacts, Status};
use normalized::{NORMALIZED, NormalizedRun};
use requests::{RequestRow, read_requests};
use vllm_log::LoggedServer;

/// `exp-config.yaml`: the server knobs of the run.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ExpConfig {
    /// HuggingFace model id.
    pub model: String,
    /// Tensor-parallel degree (also read as vLLM's `tensor_parallel_size`).
    #[serde(default = "one", alias = "tensor_parallel_size")]
    pub tensor_parallelism: u32,
    /// `--max-model-len`.
    #[serde(default)]
    pub max_model_len: Option<u32>,
    /// `--max-num-batched-tokens`.
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    /// `--max-num-seqs`.
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
}

fn one() -> u32 {
    1
}

/// A lifecycle report's statistics of a length (`prompt_len`, `output_len`):
/// its mean and whichever of `min`, `pN`, `median`, `max` it wrote, as
/// `(probability, value)` pairs. Other keys (`total`, `cached`) are not read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LengthStats {
    /// Mean, tokens (absent where no request succeeded: 2026 reports write
    /// only the totals then).
    pub mean: Option<f64>,
    /// The percentiles written, as (probability in [0, 1], tokens), in the
    /// order of their keys.
    pub quantiles: Vec<(f64, f64)>,
}

/// The probability a report key names: `min` 0, `max` 1, `median` 0.5,
/// `pN` N/100 (`p0.1`, `p99.9`, …); `None` for other keys (`mean`, `std`).
fn key_probability(key: &str) -> Option<f64> {
    match key {
        "min" => Some(0.0),
        "max" => Some(1.0),
        "median" => Some(0.5),
        _ => key.strip_prefix('p')?.parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p)).map(|p| p / 100.0),
    }
}

impl<'de> Deserialize<'de> for LengthStats {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LengthStats, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            mean: Option<f64>,
            #[serde(flatten)]
            rest: BTreeMap<String, serde_json::Value>,
        }
        let raw = Raw::deserialize(d)?;
        let mut quantiles = Vec::new();
        for (k, v) in &raw.rest {
            let Some(p) = key_probability(k) else { continue };
            match v {
                serde_json::Value::Number(n) => quantiles.push((p, n.as_f64().unwrap_or(f64::NAN))),
                // A percentile no request gave.
                serde_json::Value::Null => {}
                other => return Err(serde::de::Error::custom(format!("`{k}` = {other}: not a number of tokens"))),
            }
        }
        Ok(LengthStats { mean: raw.mean, quantiles })
    }
}

impl LengthStats {
    /// The first value that is not a token count in `[0, max]`, as an error
    /// message naming `field`.
    pub(crate) fn check(&self, field: &str, max: f64) -> Result<(), String> {
        let values = self
            .mean
            .map(|m| ("mean".to_string(), m))
            .into_iter()
            .chain(self.quantiles.iter().map(|&(p, v)| (format!("p{}", p * 100.0), v)));
        for (name, v) in values {
            in_range(&format!("{field}.{name}"), v, max)?;
        }
        Ok(())
    }

    /// The distribution its percentiles describe (an error without `min`
    /// and `max`, or with percentiles out of order).
    pub fn table(&self) -> Result<QuantileTable, String> {
        QuantileTable::new(self.quantiles.clone())
    }
}

/// One latency distribution as inference-perf reports it, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Percentiles {
    /// Mean.
    pub mean: f64,
    /// Median (`median`, or `p50` in older reports).
    #[serde(default, alias = "p50")]
    pub median: Option<f64>,
    /// 90th percentile.
    #[serde(default)]
    pub p90: Option<f64>,
    /// 99th percentile (absent in older reports).
    #[serde(default)]
    pub p99: Option<f64>,
    /// Its other statistics (`min`, `p0.1`, …, `max`, `std`), read only to
    /// check that its percentiles do not decrease.
    #[serde(flatten)]
    others: BTreeMap<String, serde_json::Value>,
}

/// `successes.latency` of a lifecycle report.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Latency {
    /// End-to-end: request sent → last byte.
    pub request_latency: Option<Percentiles>,
    /// Request sent → first streamed line.
    #[serde(default)]
    pub time_to_first_token: Option<Percentiles>,
    /// Pairwise gaps of every streamed line's timestamp.
    #[serde(default)]
    pub inter_token_latency: Option<Percentiles>,
    /// Per request (last line − first line) / (lines − 1).
    #[serde(default)]
    pub time_per_output_token: Option<Percentiles>,
}

/// `successes.throughput`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Throughput {
    /// Successful requests per second of the stage's span.
    #[serde(default)]
    pub requests_per_sec: Option<f64>,
}

/// `successes` of a lifecycle report.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Successes {
    /// Successful requests.
    pub count: u64,
    /// Latencies (absent without successes).
    #[serde(default)]
    pub latency: Option<Latency>,
    /// Rates.
    #[serde(default)]
    pub throughput: Option<Throughput>,
    /// Prompt lengths (tokens, as the server reported them), as inference-perf
    /// named them until 2026.
    #[serde(default)]
    prompt_len: Option<LengthStats>,
    /// The same under its newer name (some versions write both).
    #[serde(default)]
    prompt_tokens: Option<LengthStats>,
    /// Output lengths (tokens of the re-tokenised answers), as inference-perf
    /// named them until 2026.
    #[serde(default)]
    output_len: Option<LengthStats>,
    /// The same under its newer name.
    #[serde(default)]
    output_tokens: Option<LengthStats>,
}

impl Successes {
    /// Prompt lengths (tokens, as the server reported them): `prompt_tokens`,
    /// or `prompt_len` in reports before 2026.
    pub fn prompt_tokens(&self) -> Option<&LengthStats> {
        self.prompt_tokens.as_ref().or(self.prompt_len.as_ref())
    }

    /// Output lengths (tokens of the re-tokenised answers): `output_tokens`,
    /// or `output_len` in reports before 2026.
    pub fn output_tokens(&self) -> Option<&LengthStats> {
        self.output_tokens.as_ref().or(self.output_len.as_ref())
    }
}

/// `failures` of a lifecycle report.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Failures {
    /// Failed requests.
    pub count: u64,
}

/// One `stage_N_lifecycle_metrics.json` (or the summary).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Lifecycle {
    /// What the load generator did.
    #[serde(default)]
    pub load_summary: Option<LoadSummary>,
    /// Successful requests.
    pub successes: Successes,
    /// Failed requests.
    #[serde(default)]
    pub failures: Failures,
}

/// `load_summary` of a lifecycle report.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct LoadSummary {
    /// The stage's rate as configured (or, for a sweep, as generated), req/s.
    #[serde(default)]
    pub requested_rate: Option<f64>,
    /// Requests sent per second of `send_duration`.
    #[serde(default)]
    pub achieved_rate: Option<f64>,
    /// Requests sent.
    #[serde(default)]
    pub count: Option<u64>,
    /// Seconds from the first send to the last.
    #[serde(default)]
    pub send_duration: Option<f64>,
}

impl LoadSummary {
    /// The first rate outside `[0, MAX_RATE_PER_S]` or duration outside
    /// `[0, MAX_SPAN_S]`, as an error message.
    fn check(&self) -> Result<(), String> {
        for (name, rate) in [("requested_rate", self.requested_rate), ("achieved_rate", self.achieved_rate)] {
            if let Some(r) = rate {
                in_range(&format!("load_summary.{name}"), r, MAX_RATE_PER_S)?;
            }
        }
        self.send_duration.map_or(Ok(()), |d| in_range("load_summary.send_duration", d, MAX_SPAN_S))
    }
}

/// `value` of `field` as an error message unless it is a number in `[0, max]`.
fn in_range(field: &str, value: f64, max: f64) -> Result<(), String> {
    if value.is_finite() && (0.0..=max).contains(&value) {
        Ok(())
    } else {
        Err(format!("field `{field}` = {value:?}: must be a number in [0, {max:e}]"))
    }
}

impl Percentiles {
    /// The first value outside `[0, max]` (or not a number), or the first
    /// percentile lower than one below it (`min` ≤ `p0.1` ≤ … ≤ `max`), as an
    /// error message naming `field`.
    fn check(&self, field: &str, max: f64) -> Result<(), String> {
        in_range(&format!("{field}.mean"), self.mean, max)?;
        let named = [("median", self.median), ("p90", self.p90), ("p99", self.p99)].into_iter().filter_map(|(k, v)| Some((k, v?)));
        let others = self.others.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_f64()?)));
        let mut percentiles: Vec<(f64, &str, f64)> = named.chain(others).filter_map(|(k, v)| Some((key_probability(k)?, k, v))).collect();
        for &(_, name, v) in &percentiles {
            in_range(&format!("{field}.{name}"), v, max)?;
        }
        percentiles.sort_by(|a, b| a.0.total_cmp(&b.0));
        match percentiles.windows(2).find(|w| w[1].2 < w[0].2) {
            Some([(_, low, low_v), (_, high, high_v)]) => Err(format!(
                "field `{field}.{high}` = {high_v:?} is below `{field}.{low}` = {low_v:?}: percentiles cannot decrease (min ≤ median ≤ p90 ≤ p99 ≤ max)"
            )),
            _ => Ok(()),
        }
    }
}

impl Lifecycle {
    /// Requests sent (saturating; a loaded experiment's counts never overflow).
    pub fn sent(&self) -> u64 {
        self.successes.count.saturating_add(self.failures.count)
    }

    /// Checks what a client can have measured: counts whose sum fits, latencies
    /// in [0, 1e8] s with percentiles that do not decrease, time to first
    /// token no longer than the whole request, prompt and output lengths
    /// that are non-negative numbers, rates in [0, 1e6] req/s and a send
    /// duration in [0, 1e8] s.
    fn check(&self) -> Result<(), String> {
        if self.successes.count.checked_add(self.failures.count).is_none() {
            return Err(format!("successes.count {} + failures.count {}: the sum overflows", self.successes.count, self.failures.count));
        }
        if let Some(l) = &self.successes.latency {
            for (name, p) in [
                ("request_latency", &l.request_latency),
                ("time_to_first_token", &l.time_to_first_token),
                ("inter_token_latency", &l.inter_token_latency),
                ("time_per_output_token", &l.time_per_output_token),
            ] {
                if let Some(p) = p {
                    p.check(&format!("successes.latency.{name}"), MAX_SPAN_S)?;
                }
            }
            if let (Some(e2e), Some(ttft)) = (&l.request_latency, &l.time_to_first_token)
                && ttft.mean > e2e.mean
            {
                return Err(format!(
                    "field `successes.latency.time_to_first_token.mean` = {:?}: longer than the request latency mean {:?}",
                    ttft.mean, e2e.mean
                ));
            }
        }
        let s = &self.successes;
        for (name, p) in [
            ("prompt_tokens", &s.prompt_tokens),
            ("prompt_len", &s.prompt_len),
            ("output_tokens", &s.output_tokens),
            ("output_len", &s.output_len),
        ] {
            if let Some(p) = p {
                p.check(&format!("successes.{name}"), f64::from(u32::MAX))?;
            }
        }
        if let Some(r) = self.successes.throughput.as_ref().and_then(|t| t.requests_per_sec) {
            in_range("successes.throughput.requests_per_sec", r, MAX_RATE_PER_S)?;
        }
        self.load_summary.as_ref().map_or(Ok(()), LoadSummary::check)
    }

    /// Failed / sent (0 when nothing was sent).
    pub fn failure_fraction(&self) -> f64 {
        let sent = self.sent();
        if sent == 0 { 0.0 } else { self.failures.count as f64 / sent as f64 }
    }
}

/// One loaded experiment.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// Directory name.
    pub name: String,
    /// Directory.
    pub dir: PathBuf,
    /// Where its inference-perf reports are ([`results_dir`]).
    pub results: PathBuf,
    /// Server knobs: `exp-config.yaml`'s, or without that file the model
    /// [`Experiment::model_from`] names and nothing else.
    pub exp_config: ExpConfig,
    /// Where the model comes from.
    pub model_from: ModelFrom,
    /// Server facts (defaults when the file is absent).
    pub facts: ServerFacts,
    /// Whether the directory has a `server-facts.yaml`.
    pub facts_present: bool,
    /// The inference-perf configuration used.
    pub workload: InferencePerfConfig,
    /// Per-stage measurements, by stage index.
    pub stages: Vec<Lifecycle>,
    /// Whole-run measurements.
    pub summary: Option<Lifecycle>,
    /// Per-request measurements, in send order: `requests.csv`, else
    /// inference-perf's `per_request_lifecycle_metrics.json`.
    pub requests: Option<Vec<RequestRow>>,
    /// The server's startup log (`vllm.log`), when the directory has one:
    /// facts `server-facts.yaml` does not give are read from it.
    pub log: Option<LoggedServer>,
    /// Why a `vllm.log` present was not read (no vLLM startup line in it).
    pub log_unread: Option<String>,
    /// What `normalized.json` records, when the directory has one: its
    /// facts are read for what neither `server-facts.yaml` nor the log gives.
    pub normalized: Option<NormalizedRun>,
}

/// Where an experiment's model comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ModelFrom {
    /// `exp-config.yaml`, which also gives the server's knobs.
    ExpConfig,
    /// The inference-perf configuration's `server.model_name` (no `exp-config.yaml`).
    ServerModelName,
    /// The server log's model (no `exp-config.yaml`, no `server.model_name`).
    Log,
}

impl ModelFrom {
    /// The file it is in.
    pub fn file(self) -> &'static str {
        match self {
            ModelFrom::ExpConfig => "exp-config.yaml",
            ModelFrom::ServerModelName => "config.yaml",
            ModelFrom::Log => SERVER_LOG,
        }
    }

    /// How messages name it.
    pub fn describe(self) -> &'static str {
        match self {
            ModelFrom::ExpConfig => "exp-config.yaml model",
            ModelFrom::ServerModelName => "config.yaml server.model_name",
            ModelFrom::Log => "vllm.log model",
        }
    }
}

/// The server log an experiment directory may hold beside its facts.
pub const SERVER_LOG: &str = "vllm.log";

/// Whether something is at `path`: an optional file of an experiment is
/// absent only when nothing is there, so that a directory, a dangling link
/// or an unreadable entry in its place fails to be read, naming the path,
/// instead of passing for a missing file.
fn present(path: &Path) -> bool {
    !matches!(path.symlink_metadata(), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

fn read(path: &Path) -> Result<String, ExperimentError> {
    blis_data::textfile::read(path).map_err(|e| ExperimentError::File(DataError::Io { path: path.to_path_buf(), message: e.to_string() }))
}

fn yaml<T: DeserializeOwned>(path: &Path) -> Result<T, ExperimentError> {
    let text = read(path)?;
    blis_data::yaml::from_str(&text)
        .map_err(|e| ExperimentError::File(DataError::Format { path: path.to_path_buf(), message: e.to_string() }))
}

fn json<T: DeserializeOwned>(path: &Path) -> Result<T, ExperimentError> {
    let text = read(path)?;
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text)).map_err(|e| {
        ExperimentError::File(DataError::Format { path: path.to_path_buf(), message: blis_data::locate::json_message(&text, &e) })
    })
}

/// Where the inference-perf reports of the experiment in `dir` are:
/// `dir/results/` (the layout of `validation/`), or `dir` itself when it is
/// inference-perf's own output directory (its `config.yaml` beside a
/// `stage_0_lifecycle_metrics.json`, under any report prefix).
pub fn results_dir(dir: &Path) -> Option<PathBuf> {
    let nested = dir.join("results");
    if present(&nested.join("config.yaml")) {
        return Some(nested);
    }
    let has_stage_report = || {
        std::fs::read_dir(dir)
            .is_ok_and(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().ends_with("stage_0_lifecycle_metrics.json")))
    };
    (present(&dir.join("config.yaml")) && has_stage_report()).then(|| dir.to_path_buf())
}

/// Whether `dir` looks like an experiment directory ([`results_dir`]).
pub fn is_experiment_dir(dir: &Path) -> bool {
    results_dir(dir).is_some()
}

/// The experiment directories `path` names: itself if it is one (or its
/// parent, when `path` is an experiment's `results/`), else every
/// experiment directory below it, sorted by path.
///
/// Directory symlinks are followed (a folder of links to experiments kept
/// elsewhere is a suite), but each directory is walked at most once (by its
/// canonical path) and never an ancestor of `path`, so a link cycle
/// (`ln -s . a`) or a link out of the tree (`ln -s .. up`) neither loops nor
/// adds experiments from outside it; an experiment reached by two paths is
/// reported once, under the first in path order.
pub fn discover(path: &Path) -> Result<Vec<PathBuf>, ExperimentError> {
    // The `results/` of an experiment stands for the experiment, whose
    // exp-config.yaml and server facts are beside it.
    if let Some(parent) =
        path.parent().filter(|p| path.file_name().is_some_and(|n| n == "results") && present(&p.join("results/config.yaml")))
    {
        return Ok(vec![parent.to_path_buf()]);
    }
    if is_experiment_dir(path) {
        return Ok(vec![path.to_path_buf()]);
    }
    let io = |dir: &Path, e: std::io::Error| ExperimentError::File(DataError::Io { path: dir.to_path_buf(), message: e.to_string() });
    let root = std::fs::canonicalize(path).map_err(|e| io(path, e))?;
    let mut visited = std::collections::BTreeSet::new();
    let mut found = Vec::new();
    // Depth first in sorted order, so of two paths to one directory the
    // first in path order is the one kept.
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir != path {
            // An unreadable link target is skipped like a dangling link.
            let Ok(real) = std::fs::canonicalize(&dir) else { continue };
            if root.starts_with(&real) || !visited.insert(real) {
                continue;
            }
            if is_experiment_dir(&dir) {
                found.push(dir);
                continue;
            }
        }
        let mut entries: Vec<PathBuf> = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let p = entry.map_err(|e| io(&dir, e))?.path();
            if p.is_dir() {
                entries.push(p);
            }
        }
        entries.sort();
        stack.extend(entries.into_iter().rev());
    }
    found.sort();
    if found.is_empty() {
        return Err(ExperimentError::NoExperiments { path: path.to_path_buf() });
    }
    Ok(found)
}

/// An inference-perf report file of the run.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Report {
    /// `stage_N_lifecycle_metrics.json`.
    Stage(usize),
    /// `summary_lifecycle_metrics.json`.
    Summary,
    /// `per_request_lifecycle_metrics.json`.
    PerRequest,
    /// `stage_-1_lifecycle_metrics.json`: a sweep's saturation probe.
    Probe,
}

/// The server log in `dir`, when there is one: read, or why it was not
/// (no vLLM startup line in it).
fn server_log(dir: &Path) -> Result<(Option<LoggedServer>, Option<String>), ExperimentError> {
    let path = dir.join(SERVER_LOG);
    if !present(&path) {
        return Ok((None, None));
    }
    Ok(match LoggedServer::read(&read(&path)?) {
        Ok(log) => (Some(log), None),
        Err(e) => (None, Some(format!("{}: {e}; not read", path.display()))),
    })
}

/// `exp-config.yaml` in `dir`; without it, the model the run's
/// configuration (`config_path`) or server log names, and no knobs.
fn exp_config(
    dir: &Path,
    config_path: &Path,
    workload: &InferencePerfConfig,
    log: Option<&LoggedServer>,
) -> Result<(ExpConfig, ModelFrom), ExperimentError> {
    let path = dir.join("exp-config.yaml");
    if present(&path) {
        return Ok((yaml(&path)?, ModelFrom::ExpConfig));
    }
    let (model, from) = match (&workload.model_name, log.and_then(|l| l.model.clone())) {
        (Some(m), _) => (m.clone(), ModelFrom::ServerModelName),
        (None, Some(m)) => (m, ModelFrom::Log),
        (None, None) => {
            let message = format!(
                "not found, and neither {} (server.model_name) nor a {SERVER_LOG} names the model; write one: `model: <HuggingFace id>`",
                config_path.display()
            );
            return Err(ExperimentError::File(DataError::Io { path, message }));
        }
    };
    Ok((ExpConfig { model, tensor_parallelism: 1, max_model_len: None, max_num_batched_tokens: None, max_num_seqs: None }, from))
}

/// The stages a sweep ran: each report's `load_summary.requested_rate` for
/// the sweep's `stage_duration` (`path` names report `i` in errors).
fn sweep_stages(sweep: &Sweep, reports: &[Lifecycle], path: impl Fn(usize) -> PathBuf) -> Result<Vec<Stage>, ExperimentError> {
    reports
        .iter()
        .enumerate()
        .map(|(i, l)| match l.load_summary.as_ref().and_then(|s| s.requested_rate) {
            Some(rate) if rate.is_finite() && rate > 0.0 => Ok(Stage { rate, duration: sweep.stage_duration, concurrency: None }),
            other => Err(ExperimentError::File(DataError::Format {
                path: path(i),
                message: format!(
                    "field `load_summary.requested_rate` = {}: a sweep's stage rates are read from it, and must be positive",
                    other.map_or("null".into(), |r| r.to_string())
                ),
            })),
        })
        .collect()
}

/// The file name of `report`, prefixed as the run's storage configured.
fn report_name(workload: &InferencePerfConfig, report: Report) -> String {
    let name = match report {
        Report::Stage(i) => format!("stage_{i}_lifecycle_metrics.json"),
        Report::Summary => "summary_lifecycle_metrics.json".into(),
        Report::PerRequest => "per_request_lifecycle_metrics.json".into(),
        Report::Probe => "stage_-1_lifecycle_metrics.json".into(),
    };
    format!("{}{name}", workload.report_file_prefix)
}

/// [`report_name`] in the reports directory `results`.
pub(crate) fn report_path(results: &Path, workload: &InferencePerfConfig, report: Report) -> PathBuf {
    results.join(report_name(workload, report))
}

impl Experiment {
    /// Loads and checks an experiment directory.
    pub fn load(dir: &Path) -> Result<Experiment, ExperimentError> {
        let name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        let results = results_dir(dir).unwrap_or_else(|| dir.join("results"));
        let facts_path = dir.join("server-facts.yaml");
        let facts_present = present(&facts_path);
        let facts: ServerFacts = if facts_present { yaml(&facts_path)? } else { ServerFacts::default() };
        let config_path = results.join("config.yaml");
        let mut workload = InferencePerfConfig::from_yaml_str(&read(&config_path)?)
            .map_err(|e| ExperimentError::File(DataError::Format { path: config_path.clone(), message: e.to_string() }))?;
        let stage_path = |workload: &InferencePerfConfig, i| report_path(&results, workload, Report::Stage(i));
        let stage_count = match &workload.load.sweep {
            // The stages a sweep generated: its reports, the first always.
            Some(sweep) => (1..sweep.num_stages as usize).take_while(|&i| present(&stage_path(&workload, i))).count() + 1,
            None => workload.load.stages.len(),
        };
        let mut stages = Vec::new();
        for i in 0..stage_count {
            stages.push(json::<Lifecycle>(&stage_path(&workload, i))?);
        }
        if let Some(sweep) = workload.load.sweep.clone() {
            workload.load.stages = sweep_stages(&sweep, &stages, |i| stage_path(&workload, i))?;
        }
        let probe_path = report_path(&results, &workload, Report::Probe);
        let probe_sent = if workload.load.sweep.is_some() && present(&probe_path) { json::<Lifecycle>(&probe_path)?.sent() } else { 0 };
        let summary_path = report_path(&results, &workload, Report::Summary);
        let summary = if present(&summary_path) { Some(json(&summary_path)?) } else { None };
        let csv_path = dir.join("requests.csv");
        let per_request_path = report_path(&results, &workload, Report::PerRequest);
        let requests = if present(&csv_path) {
            Some(read_requests(&csv_path, stages.len(), workload.load.sweep.is_some())?)
        } else if present(&per_request_path) {
            Some(per_request::read(&per_request_path, &stages.iter().map(Lifecycle::sent).collect::<Vec<_>>(), probe_sent)?)
        } else {
            None
        };
        let (log, log_unread) = server_log(dir)?;
        let (exp_config, model_from) = exp_config(dir, &config_path, &workload, log.as_ref())?;
        let normalized_path = dir.join(NORMALIZED);
        let normalized = match present(&normalized_path) {
            true => Some(
                normalized::read(&read(&normalized_path)?)
                    .map_err(|message| ExperimentError::File(DataError::Format { path: normalized_path, message }))?,
            ),
            false => None,
        };
        let exp = Experiment {
            name,
            dir: dir.to_path_buf(),
            results,
            exp_config,
            model_from,
            facts,
            facts_present,
            workload,
            stages,
            summary,
            requests,
            log,
            log_unread,
            normalized,
        };
        exp.check()?;
        Ok(exp)
    }

    fn check(&self) -> Result<(), ExperimentError> {
        let bad = |path: PathBuf, message: String| Err(ExperimentError::File(DataError::Format { path, message }));
        let c = &self.exp_config;
        let counts = [
            ("tensor_parallelism", Some(c.tensor_parallelism)),
            ("max_model_len", c.max_model_len),
            ("max_num_batched_tokens", c.max_num_batched_tokens),
            ("max_num_seqs", c.max_num_seqs),
        ];
        if let Some((field, _)) = counts.iter().find(|(_, v)| *v == Some(0)) {
            return bad(self.dir.join("exp-config.yaml"), format!("field `{field}` = 0: must be at least 1"));
        }
        let utilization = |f: &ServerFacts| f.gpu_memory_utilization;
        if let Some(u) = self.fact(utilization)
            && !(u > 0.0 && u <= 1.0)
        {
            return bad(self.dir.join(self.fact_file(utilization)), format!("field `gpu_memory_utilization` = {u:?}: must be in (0, 1]"));
        }
        let concurrency = |f: &ServerFacts| f.max_concurrency;
        if let Some(c) = self.fact(concurrency)
            && !(c.is_finite() && c > 0.0)
        {
            return bad(self.dir.join(self.fact_file(concurrency)), format!("field `max_concurrency` = {c:?}: must be a positive number"));
        }
        let stage_files = self.stages.iter().enumerate().map(|(i, s)| (report_path(&self.results, &self.workload, Report::Stage(i)), s));
        let summary_file = self.summary.iter().map(|s| (report_path(&self.results, &self.workload, Report::Summary), s));
        for (path, lifecycle) in stage_files.chain(summary_file) {
            if let Err(message) = lifecycle.check() {
                return bad(path, message);
            }
        }
        if let Some(rows) = &self.requests {
            // (rows, rows with has_error) per stage.
            let mut per_stage = vec![(0u64, 0u64); self.stages.len()];
            for r in rows {
                let counts = &mut per_stage[r.stage as usize];
                *counts = (counts.0 + 1, counts.1 + u64::from(r.has_error != 0));
            }
            let report = |i| self.relative(&report_path(&self.results, &self.workload, Report::Stage(i))).display().to_string();
            for (i, (&(n, errors), s)) in per_stage.iter().zip(&self.stages).enumerate() {
                if n != s.sent() {
                    return bad(
                        self.dir.join("requests.csv"),
                        format!(
                            "{n} rows for stage {i}, but {} counts {} requests (successes + failures); \
                             requests.csv must have one row per request",
                            report(i),
                            s.sent()
                        ),
                    );
                }
                if errors != s.failures.count {
                    return bad(
                        self.dir.join("requests.csv"),
                        format!(
                            "stage {i}: {errors} of its rows with has_error = 1, but {} counts {} failures: \
                             the two files do not describe the same run",
                            report(i),
                            s.failures.count
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// `path` relative to the experiment directory, for messages.
    fn relative<'a>(&self, path: &'a Path) -> &'a Path {
        path.strip_prefix(&self.dir).unwrap_or(path)
    }

    /// The tensor-parallel degree `exp-config.yaml` records (`None` without the file).
    pub fn exp_config_tp(&self) -> Option<u32> {
        (self.model_from == ModelFrom::ExpConfig).then_some(self.exp_config.tensor_parallelism)
    }

    /// Where the server's facts come from, first wins: `server-facts.yaml`
    /// (what a person wrote down), the log ([`SERVER_LOG`], what was read
    /// from the server), `normalized.json` ([`NORMALIZED`]); with the file
    /// each is in.
    pub fn fact_sources(&self) -> impl Iterator<Item = (&ServerFacts, &'static str)> {
        std::iter::once((&self.facts, "server-facts.yaml"))
            .chain(self.log.iter().map(|l| (&l.facts, SERVER_LOG)))
            .chain(self.normalized.iter().map(|n| (&n.facts, NORMALIZED)))
    }

    /// A fact about the server, from the first of [`Experiment::fact_sources`] that gives it.
    pub fn fact<T>(&self, get: impl Fn(&ServerFacts) -> Option<T>) -> Option<T> {
        self.fact_sources().find_map(|(f, _)| get(f))
    }

    /// The file [`Experiment::fact`] takes a fact from, for messages
    /// (`server-facts.yaml`, where to write it, when none gives it).
    pub fn fact_file<T>(&self, get: impl Fn(&ServerFacts) -> Option<T>) -> &'static str {
        self.fact_sources().find(|(f, _)| get(f).is_some()).map_or("server-facts.yaml", |(_, file)| file)
    }

    /// Where a fact that none of [`Experiment::fact_sources`] gives is
    /// missing, for warnings: `DIR/server-facts.yaml: no KEY` when the
    /// directory has that file (where the fact belongs), else the directory;
    /// either way naming the other fact files that were read and lack it.
    pub fn missing_fact(&self, key: &str) -> String {
        let others: Vec<&str> = self.fact_sources().skip(1).map(|(_, file)| file).collect();
        let also = match others.as_slice() {
            [] => String::new(),
            files => format!(" ({} gives none either)", files.join(" and ")),
        };
        match self.facts_present {
            true => format!("{}: no {key}{also}", self.dir.join("server-facts.yaml").display()),
            false => format!("{}: no server-facts.yaml, so no {key}{also}", self.dir.display()),
        }
    }

    /// The run's status: its facts' ([`Experiment::fact`]), else
    /// overload-excluded when any stage lost more than 10 % of its requests.
    pub fn status(&self) -> Status {
        self.fact(|f| f.status).unwrap_or_else(|| {
            if self.stages.iter().any(|s| s.failure_fraction() > 0.1) { Status::OverloadExcluded } else { Status::Active }
        })
    }

    /// The facts a later source ([`Experiment::fact_sources`]) records with
    /// another value than the one simulated: the GPU (by the catalogue's
    /// name, so spellings of one GPU agree), the tensor-parallel degree, the
    /// block count and size. One line each, naming both files and values.
    fn stale_facts(&self) -> Vec<String> {
        let gpu = |name: &str| blis_physics::catalog::find_gpu(name).map_or_else(|| name.to_string(), |g| g.name.to_string());
        type Fact<'a> = (&'a str, &'a dyn Fn(&ServerFacts) -> Option<String>);
        let facts: [Fact; 4] = [
            ("hardware", &|f| f.hardware.as_deref().map(gpu)),
            ("tensor_parallel_size", &|f| f.tensor_parallel_size.map(|v| v.to_string())),
            ("num_gpu_blocks", &|f| f.num_gpu_blocks.map(|v| v.to_string())),
            ("block_size", &|f| f.block_size.map(|v| v.to_string())),
        ];
        let mut lines = Vec::new();
        for (key, get) in facts {
            let mut given = self.fact_sources().filter_map(|(f, file)| Some((get(f)?, file)));
            let Some((used, used_file)) = given.next() else { continue };
            for (other, file) in given.filter(|(v, _)| *v != used) {
                lines.push(format!("{}: {file} {key} = {other} but {used_file} {key} = {used}; simulating {used}", self.dir.display()));
            }
        }
        lines
    }

    /// What the user should know before trusting a comparison, one line
    /// each: keys of `server-facts.yaml` BLIS does not read (a typo there
    /// would silently change the simulated server) and keys of the run's
    /// `config.yaml` no inference-perf version has, and settings that it
    /// (or the server log) and `exp-config.yaml` both record with different
    /// values, or two of the files that record the server's facts do
    /// ([`Experiment::fact_sources`]). The server's facts are what ran, so they are simulated; the
    /// other value is named so the user can tell which file is stale. What
    /// the server log says BLIS does not simulate, or that it could not be
    /// read; a run that measured another engine than vLLM. Also a run
    /// without `ignore_eos`, whose real outputs may be shorter than the
    /// `max_tokens` BLIS generates, a multi-turn run replayed from its
    /// recorded requests, whose rounds lack their conversations' context,
    /// and a dataset run's lengths that were not recorded exactly.
    pub fn warnings(&self) -> Vec<String> {
        let c = &self.exp_config;
        let unknown = self.facts.other.keys().map(|k| {
            format!(
                "{}: unknown key `{k}` ignored; server-facts.yaml keys: {}",
                self.dir.join("server-facts.yaml").display(),
                SERVER_FACT_KEYS.join(", ")
            )
        });
        type Fact = fn(&ServerFacts) -> Option<u32>;
        let pairs: [(&str, Fact, &str, Option<u32>); 4] = [
            ("tensor_parallel_size", |f| f.tensor_parallel_size, "tensor_parallelism", self.exp_config_tp()),
            ("max_num_seqs", |f| f.max_num_seqs, "max_num_seqs", c.max_num_seqs),
            ("max_num_batched_tokens", |f| f.max_num_batched_tokens, "max_num_batched_tokens", c.max_num_batched_tokens),
            ("max_model_len", |f| f.max_model_len, "max_model_len", c.max_model_len),
        ];
        let disagreements = pairs.into_iter().filter_map(|(fact, get, config, asked)| match (self.fact(get), asked) {
            (Some(ran), Some(asked)) if ran != asked => Some(format!(
                "{}: {} {fact} = {ran} but exp-config.yaml {config} = {asked}; simulating the server's {ran}",
                self.dir.display(),
                self.fact_file(get)
            )),
            _ => None,
        });
        let log = self.log.iter().flat_map(|l| l.notes().into_iter().map(|n| format!("{}: {n}", self.dir.join(SERVER_LOG).display())));
        let stale = self.stale_facts();
        let outputs_recorded = self.recorded_outputs().is_some();
        let eos = (!self.workload.ignore_eos && !outputs_recorded).then(|| {
            format!(
                "{}: server.ignore_eos is false: the real server may have stopped requests before max_tokens; \
                 BLIS generates max_tokens for every request",
                self.results.join("config.yaml").display()
            )
        });
        let multi_turn =
            (self.requests.is_some() && self.workload.shared_prefix().is_some_and(|sp| sp.enable_multi_turn_chat)).then(|| {
                format!(
                    "{}: a multi-turn run replayed from its recorded requests: each round is sent with its recorded length but not its \
                 conversation's accumulated context, so the simulated prefix cache hits less than the real one",
                    self.dir.display()
                )
            });
        let engine = self.workload.server_type.as_deref().filter(|t| *t != "vllm").map(|t| {
            format!(
                "{}: server.type = {t}: BLIS simulates vLLM's engine; this run measured another",
                self.results.join("config.yaml").display()
            )
        });
        // The burst probe is simulated before the stages; the closed-loop ladder is not.
        let sweep = self.workload.load.sweep.as_ref().filter(|s| s.closed_loop_probe).map(|_| {
            format!(
                "{}: load.sweep.probe: the closed-loop capacity probe before the {} stages is not simulated, \
                 so the first stage starts on a server the probe had not warmed",
                self.results.join("config.yaml").display(),
                self.stages.len(),
            )
        });
        let config = self.results.join("config.yaml");
        let config_notes = self.workload.notes.iter().map(|n| format!("{}: {n}", config.display()));
        unknown
            .chain(config_notes)
            .chain(disagreements)
            .chain(stale)
            .chain(sweep)
            .chain(log)
            .chain(self.log_unread.clone())
            .chain(engine)
            .chain(eos)
            .chain(multi_turn)
            .chain(self.dataset_warning())
            .collect()
    }

    /// Tensor-parallel degree (server facts win over the experiment config).
    pub fn tp(&self) -> u32 {
        self.fact(|f| f.tensor_parallel_size).unwrap_or(self.exp_config.tensor_parallelism)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27, defect 1: `ln -s . a; ln -s . b` made discovery loop with
    /// growing memory, and `ln -s .. up` reported the parent's experiments.
    #[cfg(unix)]
    #[test]
    fn discover_survives_symlink_cycles_and_links_out_of_the_tree() {
        let base = std::env::temp_dir().join(format!("blis-discover-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("suite");
        for exp in [root.join("exp1"), base.join("outside")] {
            std::fs::create_dir_all(exp.join("results")).unwrap();
            std::fs::write(exp.join("results/config.yaml"), "{}").unwrap();
        }
        let link = |target: &str, name: &str| std::os::unix::fs::symlink(target, root.join(name)).unwrap();
        link(".", "a");
        link(".", "b");
        link("..", "up");
        link("exp1", "exp1-again");
        let found = discover(&root).unwrap();
        let _ = std::fs::remove_dir_all(&base);
        assert_eq!(found, [root.join("exp1")], "one experiment, found once, under its first path in sorted order");
    }

    /// Every key the unknown-key warning lists as known is one serde reads
    /// into a field; `other` catches only the rest.
    #[test]
    fn the_listed_server_fact_keys_are_read_into_fields() {
        let yaml: String = SERVER_FACT_KEYS
            .iter()
            .map(|k| match *k {
                "hardware" => "hardware: H100\n".to_string(),
                "status" => "status: active\n".to_string(),
                "cpu_offload" => "cpu_offload: unknown\n".to_string(),
                "gpu_memory_utilization" => "gpu_memory_utilization: 0.9\n".to_string(),
                k if k.starts_with("enable_") || k == "async_scheduling" => format!("{k}: true\n"),
                k => format!("{k}: 16\n"),
            })
            .collect();
        let facts: ServerFacts = blis_data::yaml::from_str(&format!("{yaml}typo_key: 1\n")).unwrap();
        assert_eq!(facts.other.keys().collect::<Vec<_>>(), ["typo_key"]);
        assert_eq!(facts.cpu_offload, Some(CpuOffloadFact::Unknown));
    }
}
