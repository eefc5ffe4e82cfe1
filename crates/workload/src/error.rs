//! Errors of the workload crate. Every variant renders as one line that
//! names the file, where in it the problem is (a key path such as
//! `clients[1].arrival.cv`, or a line number) and what is allowed.

use std::path::Path;

use thiserror::Error;

/// `path: ` before a message about the value at key path `path`; nothing
/// for the whole document (`.`).
fn located(key_path: &str) -> String {
    if key_path == "." { String::new() } else { format!("{key_path}: ") }
}

/// Why a workload could not be loaded, built or read.
#[derive(Debug, Error)]
pub enum WorkloadError {
    /// A spec (or a file it references) has a bad or missing value.
    #[error("{source_name}: {}{message}", located(key_path))]
    Spec {
        /// The spec file, or `preset:NAME` for a built-in.
        source_name: String,
        /// Dotted key path of the offending value (`.` for the whole document).
        key_path: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A value a command-line override put in a spec was refused: the
    /// flag's mistake, not the file's (`--num-requests 0`).
    #[error("--{flag}: {message}")]
    Overridden {
        /// The flag, without dashes.
        flag: &'static str,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A request arrives after [`Micros::MAX_SPAN`](blis_engine::time::Micros::MAX_SPAN),
    /// where simulated time would stop meaning anything.
    #[error(
        "request {request} arrives {}, after the latest simulated time (1e8 s, about three years); \
         the arrival rate is too low or a trace time or think time too large",
        match arrival_s { Some(s) => format!("at {s:e} s"), None => "beyond what a µs clock counts".to_string() }
    )]
    ArrivalPastSpan {
        /// The request's id.
        request: u64,
        /// Its arrival, seconds; `None` when it saturated the µs clock.
        arrival_s: Option<f64>,
    },
    /// An inference-perf configuration that cannot be run.
    #[error("{}: {source}", path.display())]
    InferencePerf {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        source: crate::inference_perf::InferencePerfError,
    },
    /// A recorded inference-perf run that cannot be reproduced (the caller
    /// names the run).
    #[error("{0}")]
    Reproduction(crate::inference_perf::InferencePerfError),
    /// A trace file whose extension names no format BLIS reads.
    #[error("{}: unknown trace format {extension:?}; allowed: .csv (trace v2), .jsonl (Mooncake)", path.display())]
    UnknownTraceFormat {
        /// The file.
        path: std::path::PathBuf,
        /// Its extension.
        extension: String,
    },
    /// A trace with no request to replay.
    #[error("{}: no requests to replay", path.display())]
    EmptyTrace {
        /// The file.
        path: std::path::PathBuf,
    },
    /// A line of a trace or data file is malformed.
    #[error("{file}:{line}: {message}")]
    Line {
        /// The file.
        file: String,
        /// 1-based line number (the CSV header is line 1).
        line: u64,
        /// What is wrong.
        message: String,
    },
}

impl WorkloadError {
    /// [`WorkloadError::ArrivalPastSpan`] for request `request` arriving at
    /// `t`, when that is after
    /// [`Micros::MAX_SPAN`](blis_engine::time::Micros::MAX_SPAN); `None` otherwise.
    pub fn past_span(request: u64, t: blis_engine::time::Micros) -> Option<WorkloadError> {
        use blis_engine::time::Micros;
        (t > Micros::MAX_SPAN)
            .then(|| WorkloadError::ArrivalPastSpan { request, arrival_s: (t < Micros(u64::MAX)).then(|| t.as_secs_f64()) })
    }

    /// A [`WorkloadError::Spec`] error.
    pub fn spec(source_name: impl Into<String>, key_path: impl Into<String>, message: impl Into<String>) -> WorkloadError {
        WorkloadError::Spec { source_name: source_name.into(), key_path: key_path.into(), message: message.into() }
    }

    /// A [`WorkloadError::Read`] error for `path`.
    pub fn read(path: &Path, source: std::io::Error) -> WorkloadError {
        WorkloadError::Read { path: path.display().to_string(), source }
    }

    /// A [`WorkloadError::Line`] error.
    pub fn line(file: &Path, line: u64, message: impl Into<String>) -> WorkloadError {
        WorkloadError::Line { file: file.display().to_string(), line, message: message.into() }
    }
}

/// Turns a YAML parse failure into a [`WorkloadError::Spec`] at its key path.
pub(crate) fn from_yaml(source_name: &str, err: blis_data::yaml::YamlError) -> WorkloadError {
    WorkloadError::spec(source_name, err.path.clone(), err.unlocated())
}
