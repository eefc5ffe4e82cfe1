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

/// Exit code for an error: 2 when any cause is bad input ([`BadInput`], or
/// a scenario that cannot be simulated as given), else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|c| c.is::<BadInput>() || c.is::<blis_scenario::ScenarioError>()) { 2 } else { 1 }
}

/// Longest run of digits (with an optional point) an error line prints as
/// written; longer numbers are the full decimal expansions serde gives of
/// values such as `1e300`, and read better in exponent form.
const MAX_PLAIN_NUMBER_CHARS: usize = 24;

/// `message` with every number longer than [`MAX_PLAIN_NUMBER_CHARS`]
/// characters (digits and at most one point) rewritten as Rust's shortest
/// round-trip form (`1e-300`, `1e300`). Shorter numbers, such as any u64,
/// are left alone.
pub fn tidy_numbers(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        let (before, from) = rest.split_at(start);
        out.push_str(before);
        let mut seen_point = false;
        let len = from
            .char_indices()
            .find(|&(i, c)| {
                let point = c == '.' && !seen_point && from[i + 1..].starts_with(|d: char| d.is_ascii_digit());
                seen_point |= point;
                !(c.is_ascii_digit() || point)
            })
            .map_or(from.len(), |(i, _)| i);
        let (number, after) = from.split_at(len);
        match number.parse::<f64>() {
            Ok(v) if number.len() > MAX_PLAIN_NUMBER_CHARS && v.is_finite() => out.push_str(&format!("{v:?}")),
            _ => out.push_str(number),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_expansions_become_exponents_and_the_rest_is_untouched() {
        let tiny = format!("horizon: invalid type: floating point `{}`, expected u64 at line 2 column 10", 1e-300);
        assert_eq!(tidy_numbers(&tiny), "horizon: invalid type: floating point `1e-300`, expected u64 at line 2 column 10");
        let huge = format!("rate {}.0 too big", 1e300);
        assert_eq!(tidy_numbers(&huge), "rate 1e300 too big");
        for kept in ["seed 18446744073709551616 at 3.25 s", "dir 20260217-155451/x.yaml:12", "v1.2.3 ends.", "", "no digits"] {
            assert_eq!(tidy_numbers(kept), kept);
        }
    }
}
