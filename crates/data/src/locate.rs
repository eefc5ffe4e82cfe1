//! Where in a document a value is wrong, said once.
//!
//! `serde_path_to_error` gives the key path of a failure (`clients[1].arrival`);
//! the YAML parser repeats a position inside its own message. These helpers
//! turn both into the one line every BLIS error is.

/// What a `serde_path_to_error` failure says, without the path prefix the
/// YAML parser repeats inside its own message.
pub fn unlocated_message<E: std::fmt::Display>(err: &serde_path_to_error::Error<E>) -> String {
    let inner = err.inner().to_string();
    match inner.split_once(": ") {
        Some((head, rest)) if !head.contains(' ') && !head.is_empty() => rest.to_string(),
        _ => inner,
    }
}

/// A `serde_path_to_error` failure as one line: ``field `a.b[2]`: what is
/// wrong``, or just what is wrong when it concerns the whole document; the
/// path appears once although the YAML parser repeats it in its message.
pub fn located_message<E: std::fmt::Display>(err: &serde_path_to_error::Error<E>) -> String {
    match err.path().to_string().as_str() {
        "." => unlocated_message(err),
        path => format!("field `{path}`: {}", unlocated_message(err)),
    }
}

/// A JSON parse error of `text` as one line naming the field, unless it
/// concerns the whole document. JSON has no NaN or Infinity, but Python's
/// `json` module (inference-perf's, for one) writes them for undefined
/// statistics: such a value is named with its field, line and column, where
/// serde would only say "expected value" and the enclosing object.
pub fn json_message(text: &str, e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let inner = e.inner();
    let line = text.lines().nth(inner.line().saturating_sub(1)).unwrap_or_default();
    // The 1-based column points at the token serde could not read (for
    // `-Infinity`, at the letter after the sign).
    let non_finite = ["-Infinity", "Infinity", "NaN"].into_iter().find_map(|token| {
        let start = inner.column().checked_sub(if token.starts_with('-') { 2 } else { 1 })?;
        line.get(start..)?.starts_with(token).then(|| (token, start, line.get(..start).unwrap_or_default()))
    });
    let Some((token, start, before)) = non_finite else { return located_message(e) };
    // The key just before the value (`"mean": NaN`), which the path stops short of.
    let key = before
        .trim_end()
        .strip_suffix(':')
        .map(str::trim_end)
        .and_then(|k| k.strip_suffix('"'))
        .and_then(|k| k.rsplit_once('"'))
        .map(|(_, k)| k);
    let path = e.path().to_string();
    let field = match (path.as_str(), key) {
        (".", Some(key)) => key.to_string(),
        (".", None) => String::new(),
        (path, Some(key)) if path != key && !path.ends_with(&format!(".{key}")) => format!("{path}.{key}"),
        (path, _) => path.to_string(),
    };
    let place = format!("line {} column {}", inner.line(), start + 1);
    let what = "not a JSON number (JSON has no NaN or Infinity); a finite number is needed here";
    if field.is_empty() { format!("{token} at {place}: {what}") } else { format!("field `{field}` = {token} at {place}: {what}") }
}
