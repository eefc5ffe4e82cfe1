//! The bounds every workload value is checked against, and how messages
//! print the numbers that break them.

/// Largest accepted `aggregate_rate` (and `--rate`), requests per second (one per µs).
pub const MAX_RATE_PER_S: f64 = 1e6;
/// Largest accepted request count (`num_requests`, `--num-requests`, in a
/// spec, a config file or on the command line alike): 10¹², beyond what
/// any run finishes in a day at ~1 µs per request.
pub const MAX_REQUESTS: u64 = 1_000_000_000_000;
/// Largest accepted `prefix_length`, tokens.
pub const MAX_PREFIX_TOKENS: u32 = 10_000_000;
/// Largest accepted `multi_turn.max_rounds`.
pub const MAX_ROUNDS: u32 = 10_000;
/// Largest number of items (images, audio or video segments) per request.
pub const MAX_ITEMS: f64 = 10_000.0;

/// A number as messages show it: as written for everyday magnitudes,
/// scientific beyond them (1e300, not three hundred digits).
pub(crate) fn fmt_num(v: f64) -> String {
    if v != 0.0 && !(1e-6..1e15).contains(&v.abs()) { format!("{v:e}") } else { format!("{v}") }
}
