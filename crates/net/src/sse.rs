//! An incremental parser for `text/event-stream` bodies (the WHATWG
//! server-sent events format OpenAI-compatible servers stream).
//!
//! Bytes arrive in arbitrary pieces (a TCP read may end mid-line or even
//! mid-character); [`SseParser::feed`] buffers partial lines and emits an
//! event at every blank line. Comment lines (`: keep-alive`) are ignored,
//! `\r\n` and `\r` line endings are accepted, multi-line `data:` fields are
//! joined with `\n`, and the OpenAI terminator `data: [DONE]` becomes
//! [`SseEvent::Done`].

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseEvent {
    /// The `data` of an event (usually one JSON document).
    Data(String),
    /// `data: [DONE]`, the end of an OpenAI stream.
    Done,
}

/// Incremental SSE parser state.
#[derive(Default, Debug)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
    last_was_cr: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Consumes `bytes`, appending every event completed by them to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        for &b in bytes {
            match b {
                b'\n' if self.last_was_cr => self.last_was_cr = false, // the \n of a \r\n pair
                b'\n' | b'\r' => {
                    self.last_was_cr = b == b'\r';
                    self.end_line(out);
                }
                _ => {
                    self.last_was_cr = false;
                    self.line.push(b);
                }
            }
        }
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            // A blank line dispatches the pending event, if any.
            if let Some(data) = self.data.take() {
                out.push(if data == "[DONE]" { SseEvent::Done } else { SseEvent::Data(data) });
            }
            return;
        }
        if line[0] == b':' {
            return; // comment / keep-alive
        }
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            }
        }
        // Other fields (event, id, retry) carry nothing OpenAI streams use.
    }

    /// Dispatches an event left pending when the stream ended without a final blank line.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            self.end_line(out);
        }
        self.end_line(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(pieces: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in pieces {
            p.feed(piece, &mut out);
        }
        p.finish(&mut out);
        out
    }

    const STREAM: &str =
        ": keep-alive\n\ndata: {\"a\":1}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\r\n\r\ndata: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent::Data("{\"a\":1}".into()),
            SseEvent::Data("{\"choices\":[],\"usage\":{\"completion_tokens\":2}}".into()),
            SseEvent::Done,
        ]
    }

    #[test]
    fn parses_keep_alives_usage_chunks_and_done() {
        assert_eq!(parse_all(&[STREAM.as_bytes()]), expected());
    }

    #[test]
    fn multi_line_data_and_other_fields() {
        let events = parse_all(&[b"event: message\nid: 7\ndata: line one\ndata: line two\nretry: 10\n\n"]);
        assert_eq!(events, [SseEvent::Data("line one\nline two".into())]);
        assert_eq!(parse_all(&[b"data: tail without blank line"]), [SseEvent::Data("tail without blank line".into())]);
        assert_eq!(parse_all(&[b"data:no-space\n\n"]), [SseEvent::Data("no-space".into())]);
    }

    proptest! {
        /// However the stream is cut into TCP reads, the events are the same.
        #[test]
        fn chunk_boundaries_do_not_matter(cuts in prop::collection::vec(0usize..STREAM.len(), 0..12)) {
            let bytes = STREAM.as_bytes();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut start = 0;
            for c in cuts {
                pieces.push(&bytes[start..c.max(start)]);
                start = c.max(start);
            }
            pieces.push(&bytes[start..]);
            prop_assert_eq!(parse_all(&pieces), expected());
        }
    }
}
