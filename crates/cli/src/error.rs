//! Errors the CLI reports, and their exit codes: 0 success, 1 a failure while
//! running (an output file could not be written), 2 bad input (flags, files,
//! values), 3 the server `blis observe` drove failed (unreachable, no model
//! list, or too many failed requests). Every error prints as one line.

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

/// The server under observation failed more requests than allowed: exit code 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ServerFailed(pub String);

/// Exit code for an error: 2 when any cause is bad input ([`BadInput`], or
/// a scenario that cannot be simulated as given), 3 for [`ServerFailed`],
/// else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|c| c.is::<BadInput>() || c.is::<blis_scenario::ScenarioError>()) {
        2
    } else if err.chain().any(|c| c.is::<ServerFailed>()) {
        3
    } else {
        1
    }
}

/// `message` with serde's Rust type names in plain words: "expected struct
/// Offer" says "expected a mapping of fields", "expected f64" "expected a
/// number", "cannot deserialize null into string; use `Option<String>`"
/// "null is not allowed here, expected a string". Other text is unchanged.
pub fn plain_types(message: &str) -> String {
    const TYPES: [(&str, &str); 12] = [
        ("f64", "a number"),
        ("f32", "a number"),
        ("u64", "a non-negative integer"),
        ("u32", "a non-negative integer"),
        ("u16", "a non-negative integer"),
        ("u8", "a non-negative integer"),
        ("usize", "a non-negative integer"),
        ("i64", "an integer"),
        ("i32", "an integer"),
        ("bool", "true or false"),
        ("string", "a string"),
        ("String", "a string"),
    ];
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = ["expected ", "cannot deserialize null into "].iter().filter_map(|k| rest.find(k).map(|i| (i, *k))).min() {
        let (i, key) = at;
        out.push_str(&rest[..i]);
        let after = &rest[i + key.len()..];
        let word_len = after.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(after.len());
        let (word, tail) = after.split_at(word_len);
        let plain = match word {
            "struct" => {
                let name_len = tail.trim_start().find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(tail.trim_start().len());
                rest = &tail.trim_start()[name_len..];
                out.push_str(if key == "expected " {
                    "expected a mapping of fields"
                } else {
                    "null is not allowed here, expected a mapping of fields"
                });
                continue;
            }
            _ => TYPES.iter().find(|(t, _)| *t == word).map(|(t, plain)| (t.len(), *plain)),
        };
        match plain {
            Some((len, plain)) => {
                out.push_str(if key == "expected " { "expected " } else { "null is not allowed here, expected " });
                out.push_str(plain);
                rest = &after[len..];
                // serde's hint that names a Rust type.
                if let Some(hint) = rest.strip_prefix("; use Option<").and_then(|r| r.split_once('>')) {
                    rest = hint.1;
                }
            }
            None => {
                out.push_str(key);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
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

/// Longest error message printed, bytes: with `error: ` and the
/// `(see `blis --help`)` hint a line stays under 1 KiB.
pub const MAX_MESSAGE_BYTES: usize = 960;

/// Longest run of non-blank characters printed as it is (a quoted CSV
/// header cell, a value echoed from a file); longer runs keep their start
/// and end around an ellipsis.
const MAX_WORD_CHARS: usize = 120;

/// `message` as one printable line of at most [`MAX_MESSAGE_BYTES`] bytes:
/// line breaks and other control characters become spaces, any echoed
/// word longer than [`MAX_WORD_CHARS`] is shortened around `…`, and what
/// still overflows is cut at a character boundary with `…`.
pub fn one_line(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE_BYTES + 4));
    for (i, word) in message.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let chars: Vec<char> = word.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        if chars.len() > MAX_WORD_CHARS {
            let keep = MAX_WORD_CHARS / 2;
            out.extend(&chars[..keep]);
            out.push_str(&format!("…({} characters)…", chars.len() - keep - 16));
            out.extend(&chars[chars.len() - 16..]);
        } else {
            out.extend(chars);
        }
        if out.len() > MAX_MESSAGE_BYTES {
            break;
        }
    }
    if out.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES - '…'.len_utf8();
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    /// serde's Rust type names, as the fuzzing pass met them, in plain words; other text unchanged.
    #[test]
    fn rust_type_names_become_plain_words() {
        for (said, plain) in [
            (
                "field `gpus[0]`: invalid type: string \"H100\", expected struct Offer",
                "field `gpus[0]`: invalid type: string \"H100\", expected a mapping of fields",
            ),
            ("invalid type: null, expected struct PlanFile", "invalid type: null, expected a mapping of fields"),
            (
                "clients[0].id: cannot deserialize null into string; use Option<String> at line 2 column 7",
                "clients[0].id: null is not allowed here, expected a string at line 2 column 7",
            ),
            (
                "routing.params.scorers.queue-depth: invalid type: null, expected f64",
                "routing.params.scorers.queue-depth: invalid type: null, expected a number",
            ),
            ("category: externally tagged enum expected scalar or mapping", "category: externally tagged enum expected scalar or mapping"),
            ("`-1` is not a valid u64 at line 2", "`-1` is not a valid u64 at line 2"),
            ("expected a string, got 5; expected one of: a, b", "expected a string, got 5; expected one of: a, b"),
            ("field x: expected u32", "field x: expected a non-negative integer"),
        ] {
            assert_eq!(super::plain_types(said), plain);
        }
    }

    use super::*;

    /// Issue 27: an exit-2 error line could be 5 MiB (a CSV header cell
    /// echoed verbatim).
    #[test]
    fn an_error_line_is_one_line_under_1_kib_whatever_it_echoes() {
        let huge_cell = "x".repeat(5 << 20);
        let cases = [
            format!("trace.csv: unknown column `{huge_cell}`; allowed: request_id, arrival_time_us"),
            "word ".repeat(100_000),
            "line one\nline two\r\0 ünïcödé ".repeat(200),
            "é".repeat(2_000),
        ];
        for message in cases {
            let line = one_line(&message);
            assert!(line.len() <= MAX_MESSAGE_BYTES, "{} bytes", line.len());
            assert!(!line.contains(['\n', '\r', '\0']), "{line}");
        }
        let shortened = one_line(&format!("unknown column `{huge_cell}`; allowed: a, b"));
        assert!(shortened.starts_with("unknown column `xxx") && shortened.ends_with("`; allowed: a, b"), "{shortened}");
        for kept in ["--rate -1: must be positive", "w.yaml: clients[0].rate: 5 must be in (0, 1e6]", ""] {
            assert_eq!(one_line(kept), kept);
        }
    }

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
