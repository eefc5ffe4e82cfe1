//! Errors of this crate: a file that cannot be read or is not in its format,
//! each naming the file (and the field, where there is one).

use std::path::PathBuf;

use thiserror::Error;

/// A data file that cannot be used.
#[derive(Debug, Error, PartialEq)]
pub enum DataError {
    /// The file cannot be read.
    #[error("cannot read {}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// The file is not in the expected format.
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
}
