//! The error of this crate: a scenario that cannot be simulated as given.

use thiserror::Error;

/// A value, file or combination that cannot be simulated, as one line that
/// names the knob (as its flag, `--rate`) or file and what is allowed.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{0}")]
pub struct ScenarioError(pub String);

/// Builds a [`ScenarioError`] from a format string.
macro_rules! invalid {
    ($($arg:tt)*) => { $crate::error::ScenarioError(format!($($arg)*)) };
}
pub(crate) use invalid;
