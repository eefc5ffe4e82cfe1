//! Mooncake-style JSONL traces: one request per line,
//! `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`.
//!
//! Each hash id names one block of [`MOONCAKE_BLOCK_TOKENS`] prompt tokens
//! (the last block may be partial): the prompt is the concatenation of the
//! blocks' synthetic runs, so two requests whose `hash_ids` start alike
//! share exactly those blocks in the simulated prefix cache. Prompt tokens
//! beyond the listed blocks are private to the request.
//!
//! Like trace v2 replay, the file is streamed twice: a checking pass, then
//! the simulation's.

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

use blis_engine::request::{Labels, Request, RequestId, RequestMeta, TokenRun, TokenSeq};
use blis_engine::rng::mix64;
use blis_engine::time::Micros;
use serde::Deserialize;

use crate::content::hash_block_run;
use crate::error::WorkloadError;
use crate::trace_v2::ReplayInfo;
use blis_data::textfile::LineCapped;

/// Tokens per hash id (Mooncake's block size).
pub const MOONCAKE_BLOCK_TOKENS: u32 = 512;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    timestamp: f64,
    input_length: u32,
    output_length: u32,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// What a line became.
enum Parsed {
    /// A request (without id).
    Request(Micros, TokenSeq, u32, u64),
    /// A line with no output tokens: not replayed.
    Skipped,
    /// Blank line.
    Blank,
}

fn parse_line(text: &str, line_no: u64, last: &mut Micros) -> Result<Parsed, String> {
    // A file saved with a byte-order mark, as the YAML and CSV readers allow.
    let text = if line_no == 1 { text.strip_prefix('\u{feff}').unwrap_or(text) } else { text };
    if text.trim().is_empty() {
        return Ok(Parsed::Blank);
    }
    const EXPECTED: &str = r#"expected {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [..]}"#;
    // serde would read a JSON array by position, and name its own types for `null`.
    if !text.trim_start().starts_with('{') {
        let start: String = text.trim().chars().take(40).collect();
        return Err(format!("`{start}` is not a JSON object; {EXPECTED}"));
    }
    let l: Line = serde_json::from_str(text).map_err(|e| {
        let m = e.to_string();
        format!("{}; {EXPECTED}", m.split(" at line ").next().unwrap_or(&m))
    })?;
    let arrival = Micros::from_ms_f64(l.timestamp)
        .filter(|&t| t <= Micros::MAX_SPAN)
        .ok_or_else(|| format!("timestamp {} must be a number of ms in [0, 1e11]", l.timestamp))?;
    if arrival < *last {
        return Err(format!("timestamp {} ms is before the previous line's; lines must be in arrival order", l.timestamp));
    }
    *last = arrival;
    if l.input_length == 0 {
        return Err("input_length must be at least 1".into());
    }
    if l.output_length == 0 {
        return Ok(Parsed::Skipped);
    }
    let mut prompt = TokenSeq::new();
    let mut covered = 0u32;
    for &h in &l.hash_ids {
        if covered >= l.input_length {
            break;
        }
        let len = MOONCAKE_BLOCK_TOKENS.min(l.input_length - covered);
        prompt.push(hash_block_run(h, len));
        covered += len;
    }
    if covered < l.input_length {
        prompt.push(TokenRun::synthetic(mix64(line_no ^ 0x0070_7269_7661_7465), l.input_length - covered));
    }
    Ok(Parsed::Request(arrival, prompt, l.output_length, mix64(line_no ^ 0x6f75_7470_7574)))
}

/// Replays a Mooncake JSONL trace as an engine workload.
pub struct MooncakeReplay {
    path: PathBuf,
    lines: Lines<BufReader<LineCapped<File>>>,
    line_no: u64,
    last: Micros,
    next: Option<Request>,
    emitted: u64,
    limit: u64,
    error: Option<WorkloadError>,
}

fn open_lines(path: &Path) -> Result<Lines<BufReader<LineCapped<File>>>, WorkloadError> {
    Ok(BufReader::new(blis_data::textfile::open(path).map_err(|e| WorkloadError::read(path, e))?).lines())
}

impl MooncakeReplay {
    /// Checks every line and opens the trace for replay of at most `limit` requests.
    pub fn open(path: &Path, limit: Option<u64>) -> Result<(MooncakeReplay, ReplayInfo), WorkloadError> {
        let limit = limit.unwrap_or(u64::MAX);
        let (mut requests, mut skipped, mut last) = (0u64, 0u64, Micros::ZERO);
        for (i, line) in open_lines(path)?.enumerate() {
            let line_no = i as u64 + 1;
            let text = line.map_err(|e| WorkloadError::line(path, line_no, e.to_string()))?;
            match parse_line(&text, line_no, &mut last).map_err(|m| WorkloadError::line(path, line_no, m))? {
                Parsed::Request(..) => requests += 1,
                Parsed::Skipped => skipped += 1,
                Parsed::Blank => {}
            }
        }
        let mut warnings = Vec::new();
        if skipped > 0 {
            warnings.push(format!("{}: {skipped} lines with output_length 0 are not replayed", path.display()));
        }
        let labels = Labels { clients: vec!["mooncake".into()], tenants: vec!["default".into()], slo_classes: vec!["default".into()] };
        let info = ReplayInfo { labels, requests: requests.min(limit), warnings };
        let replay = MooncakeReplay {
            path: path.to_path_buf(),
            lines: open_lines(path)?,
            line_no: 0,
            last: Micros::ZERO,
            next: None,
            emitted: 0,
            limit,
            error: None,
        };
        Ok((replay, info))
    }

    fn fill(&mut self) {
        while self.next.is_none() && self.error.is_none() && self.emitted < self.limit {
            let Some(line) = self.lines.next() else { return };
            self.line_no += 1;
            let parsed = line.map_err(|e| e.to_string()).and_then(|t| parse_line(&t, self.line_no, &mut self.last));
            match parsed {
                Ok(Parsed::Request(arrival, prompt, output, output_seed)) => {
                    self.next = Some(Request {
                        id: RequestId(self.emitted),
                        arrival,
                        prompt,
                        max_output_tokens: output,
                        output_seed,
                        meta: RequestMeta::default(),
                    });
                    self.emitted += 1;
                }
                Ok(Parsed::Skipped | Parsed::Blank) => {}
                Err(m) => self.error = Some(WorkloadError::line(&self.path, self.line_no, m)),
            }
        }
    }
}

crate::buffered_replay!(MooncakeReplay);

#[cfg(test)]
mod tests {
    use blis_engine::driver::Workload;

    use super::*;
    use crate::RequestSource;
    use blis_engine::request::extend_block_hashes;

    fn write(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("blis-mooncake-{}-{name}.jsonl", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn hashes(r: &Request) -> Vec<u64> {
        let mut h = Vec::new();
        extend_block_hashes(&r.prompt, 0, 0, 16, &mut h);
        h
    }

    #[test]
    fn shared_hash_ids_share_kv_blocks() {
        let p = write(
            "share",
            "{\"timestamp\": 0, \"input_length\": 1200, \"output_length\": 10, \"hash_ids\": [7, 8, 9]}\n\
             {\"timestamp\": 3.5, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [7, 8, 11]}\n\n\
             {\"timestamp\": 4, \"input_length\": 600, \"output_length\": 0, \"hash_ids\": [1, 2]}\n\
             {\"timestamp\": 9, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [5]}\n",
        );
        let (mut r, info) = MooncakeReplay::open(&p, None).unwrap();
        assert_eq!(info.requests, 3);
        assert_eq!(info.warnings.len(), 1);
        let reqs: Vec<Request> = std::iter::from_fn(|| r.next_request()).collect();
        assert!(r.take_error().is_none());
        assert_eq!(reqs.iter().map(|r| (r.arrival.as_us(), r.prompt_tokens())).collect::<Vec<_>>(), [(0, 1200), (3500, 1100), (9000, 700)]);
        let (a, b, c) = (hashes(&reqs[0]), hashes(&reqs[1]), hashes(&reqs[2]));
        assert_eq!(a[..64], b[..64], "blocks of hash ids 7 and 8 (1024 tokens = 64 blocks of 16) are shared");
        assert_ne!(a[64], b[64], "hash ids 9 and 11 differ");
        assert_ne!(a[0], c[0]);
        assert_eq!(reqs.iter().map(|r| r.id.0).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn bad_lines_name_their_line() {
        for (text, needle) in [
            (
                "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1}\n",
                ":2: timestamp 4 ms is before",
            ),
            ("{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, \"session\": 3}\n", ":1: unknown field `session`"),
            ("{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1}\n", ":1: timestamp -1 must be"),
            ("not json\n", ":1: `not json` is not a JSON object; expected"),
            // An array was read by position, `null` named serde's own struct.
            ("[5000, 700, 30]\n", ":1: `[5000, 700, 30]` is not a JSON object"),
            ("null\n", ":1: `null` is not a JSON object"),
        ] {
            let p = write("bad", text);
            let e = MooncakeReplay::open(&p, None).err().expect("rejected").to_string();
            assert!(e.contains(needle), "{needle}: {e}");
        }
        // A byte-order mark opens the file, not a line that is not JSON.
        let p = write("bom", "\u{feff}{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n");
        assert_eq!(MooncakeReplay::open(&p, None).unwrap().1.requests, 1);
    }
}
