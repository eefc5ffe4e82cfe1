//! Errors of this crate. Every variant names the file (and where it can, the
//! field or line) so the CLI can print one clear line.

use std::path::PathBuf;

use thiserror::Error;

/// An experiment directory or coefficient file that cannot be used.
#[derive(Debug, Error, PartialEq)]
pub enum ExperimentError {
    /// A file cannot be read, or is not in its format.
    #[error(transparent)]
    File(#[from] blis_data::DataError),
    /// A CSV row is malformed.
    #[error("{}:{line}: {message}", path.display())]
    Csv {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A trace or workload file is malformed; the message names the file.
    #[error("{0}")]
    Workload(String),
    /// Nothing under a path looks like an experiment.
    #[error(
        "{}: no experiment directory (one holding results/config.yaml, or inference-perf's output: config.yaml beside stage_0_lifecycle_metrics.json) at or below this path",
        path.display()
    )]
    NoExperiments {
        /// The path searched.
        path: PathBuf,
    },
    /// The experiment cannot be simulated as described.
    #[error("{}: {message}", path.display())]
    Unreproducible {
        /// The experiment directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
}
