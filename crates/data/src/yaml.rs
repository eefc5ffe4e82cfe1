//! Reading YAML with memory proportional to the document.
//!
//! Every YAML document BLIS reads (specs, `--config`, policy YAML, coefficient
//! sets, trace headers, inference-perf configs, calibration facts) is parsed
//! here, by `serde-saphyr`: it streams parser events straight into the target
//! type, where a loader that first builds the whole event list costs about
//! 200 bytes per node whatever the node's size (a 16 MB policy YAML once
//! peaked at 1.58 GB). What is held is the text, the value being built, the
//! keys of open mappings (to refuse duplicates) and a small parser state.
//!
//! The only thing left that grows with a document is the value itself, and
//! [`node_budget`] bounds the nodes a document of a given size may have, so
//! that even a generic tree (the costliest target, ~170 bytes per node) stays
//! within a stated multiple of the input: see `docs/cli.md`.
//!
//! The semantics are YAML 1.2's core schema, as before: only `true`/`false`
//! are booleans, duplicate keys are errors, merge keys (`<<: *anchor`) are
//! expanded, and a non-finite number where no type asks for a float (a
//! generic tree) is an error rather than a null.

use serde::de::DeserializeOwned;
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Budget, DuplicateKeyPolicy, MergeKeyPolicy, NonFiniteFloatPolicy, Options};
use std::fmt;

/// Nodes every document may have whatever its size.
pub const BASE_NODES: usize = 16_384;

/// Bytes of document per node allowed beyond [`BASE_NODES`].
pub const BYTES_PER_NODE: usize = 8;

/// Deepest nesting of sequences and mappings a document may have.
pub const MAX_DEPTH: usize = 64;

/// The most nodes (scalars, sequences, mappings, aliases expanded) a
/// document of `text_bytes` bytes may have: [`BASE_NODES`] plus one per
/// [`BYTES_PER_NODE`] bytes. Hand-written YAML runs 6 to 12 bytes per node,
/// so only large dense data (`[1,2,3,...]` by the hundred thousand, which
/// belongs in JSON or CSV) is refused.
pub fn node_budget(text_bytes: usize) -> usize {
    BASE_NODES + text_bytes / BYTES_PER_NODE
}

/// What is wrong with a YAML document, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Key path of the failing value (`clients[1].arrival`), or `.` when the
    /// problem concerns the document as a whole.
    pub path: String,
    /// What is wrong, without the location.
    pub message: String,
    /// 1-based line and column of the failing text, when known.
    pub position: Option<(u64, u64)>,
}

impl YamlError {
    /// The message with the position (`... at line 3 column 5`), without the
    /// key path: for callers that report the path in a field of their own.
    pub fn unlocated(&self) -> String {
        match self.position {
            Some((line, column)) => format!("{} at line {line} column {column}", self.message),
            None => self.message.clone(),
        }
    }
}

impl fmt::Display for YamlError {
    /// ``field `a.b[2]`: what is wrong at line L column C``, or without the
    /// field when the problem concerns the whole document.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path.as_str() {
            "." => f.write_str(&self.unlocated()),
            path => write!(f, "field `{path}`: {}", self.unlocated()),
        }
    }
}

impl std::error::Error for YamlError {}

/// Parses one YAML document into `T`, within [`node_budget`] and
/// [`MAX_DEPTH`]. The error names the key path and position of the failure.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let mut path = None;
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options(text.len()), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    parsed.map_err(|e| error(&e, text, path))
}

/// The top-level keys of a document, read without building its values:
/// what tells one input format from another. `Ok(None)` when the document
/// is valid YAML but not a mapping with string keys.
pub fn top_level_keys(text: &str) -> Result<Option<Vec<String>>, YamlError> {
    #[derive(serde::Deserialize)]
    #[serde(transparent)]
    struct Keys(std::collections::BTreeMap<String, serde::de::IgnoredAny>);
    let mut options = options(text.len());
    // What the values are does not matter here, even NaN where no type asks for a float.
    options.non_finite_float_policy = NonFiniteFloatPolicy::AsString;
    let probe = |options| serde_saphyr::from_str_with_options::<Keys>(text, options);
    match probe(options.clone()) {
        Ok(keys) => Ok(Some(keys.0.into_keys().collect())),
        Err(_) => {
            serde_saphyr::from_str_with_options::<serde::de::IgnoredAny>(text, options).map(|_| None).map_err(|e| error(&e, text, None))
        }
    }
}

/// A parse failure as a [`YamlError`]; `path` is where serde was, if known.
fn error(e: &serde_saphyr::Error, text: &str, path: Option<String>) -> YamlError {
    // A budget is spent by the document as a whole, not at the line where it ran out.
    let position = match is_over_budget(e) {
        true => None,
        false => e.location().map(|l| (l.line(), l.column())).filter(|&(line, _)| line > 0),
    };
    let path = path.filter(|p| p != "?").unwrap_or_else(|| ".".to_string());
    YamlError { path, message: message(e, text), position }
}

fn options(text_bytes: usize) -> Options {
    let mut budget = Budget::default();
    budget.max_nodes = node_budget(text_bytes);
    // A node is at most two events (a collection's start and end).
    budget.max_events = 2 * node_budget(text_bytes) + 8;
    budget.max_depth = MAX_DEPTH;
    budget.max_documents = 1;
    budget.max_total_scalar_bytes = usize::try_from(crate::textfile::MAX_WHOLE_FILE_BYTES).unwrap_or(usize::MAX);
    // What aliases (`*a`) replay counts against the same node budget: an
    // anchored node is kept as events, and each alias builds it again.
    budget.max_recorded_anchor_events = node_budget(text_bytes);
    budget.max_recorded_anchor_bytes = 2 * text_bytes + (1 << 20);
    let mut options = Options::default();
    options.alias_limits.max_total_replayed_events = node_budget(text_bytes);
    options.budget = Some(budget);
    options.strict_booleans = true;
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    options.merge_keys = MergeKeyPolicy::Merge;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options.with_snippet = false;
    options.non_finite_float_policy = NonFiniteFloatPolicy::Reject;
    options
}

/// The error's text without the position the parser appends (kept apart in
/// [`YamlError::position`]), and in BLIS's words where the parser's would
/// not say what to do.
fn message(e: &serde_saphyr::Error, text: &str) -> String {
    let text_bytes = text.len();
    let inner = innermost(e);
    match (inner, scalar_at(text, inner)) {
        (serde_saphyr::Error::InvalidScalar { ty, .. }, Some(found)) => return format!("`{found}` is {}", kind_of_scalar(ty)),
        (serde_saphyr::Error::InvalidBooleanStrict { .. }, Some(found)) => {
            return format!("`{found}` is not a boolean: write true or false");
        }
        (serde_saphyr::Error::NonFiniteFloat { .. }, Some(found)) => return format!("`{found}` is not a finite number"),
        (serde_saphyr::Error::Unexpected { expected, .. }, _) => {
            let wanted = match *expected {
                "string scalar" => Some("a single value (a number, word or boolean)"),
                "sequence start" => Some("a list"),
                "mapping start" => Some("a mapping (`key: value` pairs)"),
                _ => None,
            };
            if let Some(wanted) = wanted {
                return format!("expected {wanted}, found {}", found_at(text, inner));
            }
        }
        _ => {}
    }
    if is_over_budget(e) {
        return match inner {
            serde_saphyr::Error::Budget { breach: BudgetBreach::Depth { .. }, .. } => {
                format!("nested more than {MAX_DEPTH} levels deep; BLIS's files nest a few levels")
            }
            serde_saphyr::Error::Budget { breach: BudgetBreach::Documents { .. }, .. } => {
                "more than one YAML document (`---`); BLIS reads one per file".to_string()
            }
            _ => format!(
                "more than the {} nodes BLIS reads in a YAML document of {text_bytes} bytes \
                 ({BASE_NODES} plus one per {BYTES_PER_NODE} bytes, aliases expanded, which keeps memory proportional to the file); \
                 write large data as JSON or CSV",
                node_budget(text_bytes)
            ),
        };
    }
    let said = e.to_string();
    let said = match said.rsplit_once(" at line ") {
        Some((head, tail)) if tail.split_once(", column ").is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok()) => {
            head.to_string()
        }
        _ => said,
    };
    match said.split_once(", set DuplicateKeyPolicy") {
        Some((head, _)) => head.to_string(),
        None => said,
    }
}

/// What a scalar that did not parse as serde's type `ty` is not, in
/// words: `u32` is "not a whole number from 0 to 4294967295".
fn kind_of_scalar(ty: &str) -> String {
    let unsigned = |max: u32| format!("not a whole number from 0 to {max}");
    match ty {
        "u8" => unsigned(u8::MAX.into()),
        "u16" => unsigned(u16::MAX.into()),
        "u32" => unsigned(u32::MAX),
        "u64" | "usize" | "u128" => "not a non-negative whole number".to_string(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "not a whole number (or out of range)".to_string(),
        "floating point" | "f32" | "f64" => "not a finite number".to_string(),
        "char" => "not a single character".to_string(),
        other => format!("not a valid {other}"),
    }
}

/// The error an alias or snippet wrapper carries.
fn innermost(mut e: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::AliasError { error, .. } | serde_saphyr::Error::WithSnippet { error, .. } = e {
        e = error;
    }
    e
}

/// Whether parsing stopped at one of [`options`]' limits.
fn is_over_budget(e: &serde_saphyr::Error) -> bool {
    matches!(
        innermost(e),
        serde_saphyr::Error::Budget { .. }
            | serde_saphyr::Error::AliasReplayLimitExceeded { .. }
            | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. }
    )
}

/// What an error points at where something else was expected: a scalar's
/// text, or the kind of collection (a flow or block sequence starts with `[`
/// or `- `, anything else that is not a scalar is a mapping).
fn found_at(text: &str, e: &serde_saphyr::Error) -> String {
    let start = e.location().and_then(|l| l.span().byte_offset()).and_then(|o| usize::try_from(o).ok());
    let is_list =
        |rest: &str| rest.starts_with('[') || rest.strip_prefix('-').is_some_and(|r| r.is_empty() || r.starts_with(char::is_whitespace));
    let is_block_mapping =
        |rest: &str| !rest.starts_with(['"', '\'']) && rest.lines().next().is_some_and(|line| line.contains(": ") || line.ends_with(':'));
    match start.and_then(|o| text.get(o..)).map(str::trim_start) {
        Some(rest) if is_list(rest) => "a list".to_string(),
        Some(rest) if rest.starts_with('{') || is_block_mapping(rest) => "a mapping".to_string(),
        _ => match scalar_at(text, e) {
            Some(scalar) => format!("`{scalar}`"),
            None => "a list or mapping".to_string(),
        },
    }
}

/// The text of the scalar an error points at, if it is one short line.
fn scalar_at<'t>(text: &'t str, e: &serde_saphyr::Error) -> Option<&'t str> {
    let span = e.location()?.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    text.get(start..start.checked_add(len)?).filter(|s| !s.is_empty() && s.len() <= 80 && !s.contains('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        a: u32,
        #[serde(default)]
        b: Vec<f64>,
        #[serde(default)]
        on: Option<bool>,
    }

    #[test]
    fn errors_name_the_key_path_and_position() {
        let e = from_str::<Doc>("a: 1\nb: [1, x]\n").unwrap_err();
        assert_eq!(e.to_string(), "field `b[1]`: `x` is not a finite number at line 2 column 8");
        let e = from_str::<Doc>("a: -1e-300\n").unwrap_err();
        assert_eq!(e.to_string(), "field `a`: `-1e-300` is not a whole number from 0 to 4294967295 at line 1 column 4");
        let e = from_str::<Doc>("a: 1\non: 1\n").unwrap_err();
        assert_eq!(e.to_string(), "field `on`: `1` is not a boolean: write true or false at line 2 column 5");
        let e = from_str::<Doc>("a: 1\nzz: 3\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `zz`"), "{e}");
        let e = from_str::<Doc>("b: []\n").unwrap_err();
        assert_eq!(e.to_string(), "missing field `a` at line 1 column 1");
        let e = from_str::<Doc>("a: [1, 2]\n").unwrap_err();
        assert_eq!(e.to_string(), "field `a`: expected a single value (a number, word or boolean), found a list at line 1 column 4");
        let e = from_str::<Doc>("a:\n  - 1\n").unwrap_err();
        assert!(e.to_string().ends_with("found a list at line 2 column 3"), "{e}");
        let e = from_str::<Doc>("a: {x: 1}\n").unwrap_err();
        assert!(e.to_string().ends_with("found a mapping at line 1 column 4"), "{e}");
        let e = from_str::<Doc>("a:\n  x: 1\n").unwrap_err();
        assert!(e.message.ends_with("found a mapping"), "{e}");
        let e = from_str::<Doc>("a: 1\nb: 5\n").unwrap_err();
        assert_eq!(e.to_string(), "field `b`: expected a list, found `5` at line 2 column 4");
        let e = from_str::<Doc>("a: 1\nb: {x: 1}\n").unwrap_err();
        assert!(e.to_string().ends_with("expected a list, found a mapping at line 2 column 4"), "{e}");
        let e = from_str::<Vec<Doc>>("- [1]\n").unwrap_err();
        assert!(e.to_string().ends_with("expected a mapping (`key: value` pairs), found a list at line 1 column 3"), "{e}");
        let e = from_str::<Vec<Doc>>("- -5\n").unwrap_err();
        assert!(e.to_string().ends_with("found `-5` at line 1 column 3"), "{e}");
        let e = from_str::<Doc>("a: 1\nb: 'x: y'\n").unwrap_err();
        assert!(e.to_string().ends_with("expected a list, found `'x: y'` at line 2 column 4"), "{e}");
        let e = from_str::<Doc>("a: 1\na: 2\n").unwrap_err();
        assert_eq!((e.path.as_str(), e.message.as_str()), (".", "duplicate mapping key: a"));
        let e = from_str::<Doc>("a: 1\n---\na: 2\n").unwrap_err();
        assert!(e.message.contains("more than one YAML document"), "{e}");
    }

    #[test]
    fn yaml_1_2_core_schema_and_merge_keys() {
        assert!(from_str::<Doc>("a: 1\non: yes\n").is_err(), "yes is not a boolean in YAML 1.2");
        assert_eq!(from_str::<Doc>("a: 1\non: true\n").unwrap().on, Some(true));
        let v: serde_json::Value = from_str("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n").unwrap();
        assert_eq!(v["c"], serde_json::json!({"x": 1, "y": 3}));
        let e = from_str::<serde_json::Value>("a: [.inf]\n").unwrap_err();
        assert_eq!(e.to_string(), "field `a[0]`: `.inf` is not a finite number at line 1 column 5");
        assert_eq!(top_level_keys("b: .nan\na: 1\n").unwrap(), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(top_level_keys("- 1\n").unwrap(), None);
        assert!(top_level_keys("a: [\n").is_err());
        assert_eq!(from_str::<Doc>("a: 1\nb: [.inf]\n").unwrap().b, vec![f64::INFINITY], "a typed float takes them");
    }

    #[test]
    fn dense_documents_past_the_node_budget_are_refused_with_what_to_do() {
        let n = node_budget(0);
        let fits = format!("[{}]", vec!["1"; n / 2].join(","));
        assert_eq!(from_str::<Vec<u8>>(&fits).unwrap().len(), n / 2);
        let dense = format!("[{}]", vec!["1"; 2 * n].join(","));
        let e = from_str::<Vec<u8>>(&dense).unwrap_err();
        assert!(e.message.contains("write large data as JSON or CSV"), "{e}");
        // An alias bomb expands past the budget too, long before its memory does.
        let mut bomb = String::from("a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n");
        for i in 1..10 {
            bomb += &format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", "));
        }
        let e = from_str::<serde_json::Value>(&bomb).unwrap_err();
        assert!(e.message.contains("aliases"), "{e}");
    }

    #[test]
    fn deep_documents_are_refused() {
        let deep = format!("{}1{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(from_str::<serde_json::Value>(&deep).unwrap_err().message.contains("nested more than 64"));
    }
}
