//! Errors the CLI reports, and their exit codes: 0 success, 1 a failure while
//! running (an output file could not be written), 2 bad input (flags, files,
//! values). Every error prints as one line.

use std::fmt;

/// Bad user input: exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Builds a [`BadInput`] from a format string.
macro_rules! bad_input {
    ($($arg:tt)*) => { $crate::error::BadInput(format!($($arg)*)) };
}
pub(crate) use bad_input;

/// Exit code for an error: 2 when any cause is [`BadInput`], else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|c| c.is::<BadInput>()) { 2 } else { 1 }
}
