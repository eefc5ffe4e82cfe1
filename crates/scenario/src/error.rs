//! The error of this crate: a scenario that cannot be simulated as given.

use std::fmt;

use crate::knobs::KnobId;

/// A value, file or combination that cannot be simulated, as one line that
/// names the knob or file and what is allowed.
///
/// An error about one knob carries it as data ([`ScenarioError::knob`]), and
/// the message that follows its name; where the value came from decides how
/// the line names it: `--rate -1: must be …` for a flag, `--config run.yaml:
/// rate -1: must be …` for a file ([`ScenarioError::from_file`]). Nothing
/// recovers the knob by reading the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// The knob the error is about, if it is about one.
    pub knob: Option<KnobId>,
    /// The file the knob's value came from (`--config run.yaml`), when it
    /// did not come from a flag.
    pub file: Option<String>,
    /// What is wrong: after the knob's name when there is one (`-1: must be
    /// a positive number`), else the whole line.
    pub message: String,
}

impl ScenarioError {
    /// An error about knob `knob`: `message` follows its name.
    pub fn knob(knob: KnobId, message: String) -> ScenarioError {
        ScenarioError { knob: Some(knob), file: None, message }
    }

    /// An error about no one knob: `message` is the whole line.
    pub fn other(message: String) -> ScenarioError {
        ScenarioError { knob: None, file: None, message }
    }

    /// The same error, said of a value that came from `file` (how messages
    /// name it: `--config run.yaml`, `--grid g.yaml`).
    pub fn from_file(self, file: &str) -> ScenarioError {
        ScenarioError { file: Some(file.to_string()), ..self }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.knob, &self.file) {
            (Some(k), Some(file)) => write!(f, "{file}: {} {}", k.flag(), self.message),
            (Some(k), None) => write!(f, "--{} {}", k.flag(), self.message),
            (None, _) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// Builds a [`ScenarioError`]: `invalid!(knob: rate, "{rate}: must be …")`
/// about a knob of the table (its name is checked at compile time),
/// `invalid!(knob = id, …)` about a [`KnobId`] held in a variable, or
/// `invalid!("…")` about none.
macro_rules! invalid {
    (knob: $knob:ident, $($arg:tt)*) => { $crate::error::ScenarioError::knob($crate::knobs::KnobId::$knob, format!($($arg)*)) };
    (knob = $knob:expr, $($arg:tt)*) => { $crate::error::ScenarioError::knob($knob, format!($($arg)*)) };
    ($($arg:tt)*) => { $crate::error::ScenarioError::other(format!($($arg)*)) };
}
pub(crate) use invalid;
