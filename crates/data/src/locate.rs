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
