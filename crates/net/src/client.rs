//! Sending one request to an OpenAI-compatible server and timing what comes
//! back: the client half of `blis observe`.
//!
//! Timestamps are taken the moment bytes are handed to the client code, per
//! SSE event, so a chunk split across TCP reads is timed when it completes and
//! several events in one read share a timestamp (as any client would see them).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::serve::openai::Api;
use crate::sse::{SseEvent, SseParser};

/// A builder for the HTTP client of requests to `url`. `https://` servers
/// are reached over rustls (ring crypto) and verified against the
/// platform's trusted roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` override
/// them, as for OpenSSL); a plain `http://` client needs no root store, so
/// it builds even where the system has none.
pub fn http_builder(url: &str) -> reqwest::ClientBuilder {
    static TLS: std::sync::Once = std::sync::Once::new();
    TLS.call_once(|| {
        // Fails only if another provider is already the process default, which then serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let builder = reqwest::Client::builder();
    if url.starts_with("https://") { builder } else { builder.tls_certs_only([]) }
}

/// Why `url` cannot be requested, if it cannot: it must parse as a URL
/// whose scheme is `http` or `https` and that names a host. Checked before
/// a run, so a typo is not reported per request as a server failure.
pub fn check_http_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a valid URL ({e}); expected http://HOST[:PORT][/PATH] or https://…"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("scheme `{}` is not supported; expected http:// or https://", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("names no host; expected http://HOST[:PORT][/PATH]".into());
    }
    Ok(())
}

/// Why `key` cannot be sent as a bearer token, if it cannot: an HTTP header
/// value holds no control characters (a line break, say) other than tab.
/// The message never echoes the key.
pub fn check_api_key(key: &str) -> Result<(), String> {
    if reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).is_ok() {
        return Ok(());
    }
    let (at, c) = key.char_indices().find(|&(_, c)| c.is_control() && c != '\t').unwrap_or((0, '\0'));
    Err(format!("contains the control character {c:?} at byte {at}, which an HTTP header cannot carry (a pasted line break?)"))
}

/// Wall-clock time of a run: µs since the Unix epoch, read from a monotonic
/// clock anchored once at the start so intervals never go backwards.
#[derive(Copy, Clone, Debug)]
pub struct RunClock {
    start: Instant,
    start_unix_us: u64,
}

impl RunClock {
    /// Anchors the clock now.
    pub fn start() -> RunClock {
        let start_unix_us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        RunClock { start: Instant::now(), start_unix_us }
    }

    /// Now, in µs since the Unix epoch.
    pub fn now_unix_us(&self) -> u64 {
        self.start_unix_us + self.start.elapsed().as_micros() as u64
    }

    /// The anchor, µs since the Unix epoch.
    pub fn start_unix_us(&self) -> u64 {
        self.start_unix_us
    }

    /// The monotonic instant at `offset_us` after the anchor.
    pub fn instant_at(&self, offset_us: u64) -> Instant {
        self.start + Duration::from_micros(offset_us)
    }
}

/// `unix_us` (µs since the Unix epoch) as an RFC 3339 UTC timestamp with
/// whole seconds, e.g. `2024-02-16T14:30:00Z` (proleptic Gregorian calendar,
/// Howard Hinnant's civil-from-days).
pub fn rfc3339_utc(unix_us: u64) -> String {
    let secs = unix_us / 1_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Where and how to send requests.
#[derive(Clone, Debug)]
pub struct Target {
    /// Base URL, e.g. `http://127.0.0.1:8000`.
    pub base_url: String,
    /// Model name sent in every request.
    pub model: String,
    /// Completions or chat.
    pub api: Api,
    /// Bearer token, if the server wants one.
    pub api_key: Option<String>,
    /// Stream the response (timestamps per chunk) or not.
    pub streaming: bool,
    /// Per-request timeout (whole exchange).
    pub timeout: Duration,
}

/// What to send as the prompt.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptContent {
    /// Token ids (completions API only): exact input lengths, shared prefixes preserved.
    TokenIds(Vec<u32>),
    /// Text (completions prompt, or the user message for chat).
    Text(String),
}

/// How an exchange ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExchangeStatus {
    /// A complete answer.
    Ok,
    /// HTTP error status or a broken/invalid response.
    Error,
    /// No complete answer within the timeout.
    Timeout,
}

/// Token counts the server reported.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub completion_tokens: u32,
}

/// Everything measured about one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    /// How it ended.
    pub status: ExchangeStatus,
    /// HTTP status code, when a response arrived.
    pub http_status: Option<u16>,
    /// Error text (empty when OK).
    pub error_message: String,
    /// When the request was sent, µs since the Unix epoch.
    pub send_time_us: u64,
    /// First chunk carrying output, µs since the Unix epoch.
    pub first_chunk_time_us: Option<u64>,
    /// End of the response, µs since the Unix epoch.
    pub last_chunk_time_us: Option<u64>,
    /// Arrival time of every chunk carrying generated text.
    pub chunk_times_us: Vec<u64>,
    /// Usage from the server (the final chunk when streaming).
    pub usage: Option<Usage>,
}

impl Exchange {
    fn failed(status: ExchangeStatus, send_time_us: u64, http_status: Option<u16>, message: String) -> Exchange {
        Exchange {
            status,
            http_status,
            error_message: message,
            send_time_us,
            first_chunk_time_us: None,
            last_chunk_time_us: None,
            chunk_times_us: Vec::new(),
            usage: None,
        }
    }
}

/// The JSON body of a request.
pub fn request_body(target: &Target, prompt: &PromptContent, max_tokens: u32) -> Value {
    let mut body = match (target.api, prompt) {
        (Api::Completions, PromptContent::TokenIds(ids)) => json!({ "prompt": ids }),
        (Api::Completions, PromptContent::Text(t)) => json!({ "prompt": t }),
        (Api::Chat, PromptContent::Text(t)) => json!({ "messages": [{ "role": "user", "content": t }] }),
        (Api::Chat, PromptContent::TokenIds(ids)) => {
            json!({ "messages": [{ "role": "user", "content": ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ") }] })
        }
    };
    body["model"] = json!(target.model);
    body["max_tokens"] = json!(max_tokens);
    // Generate exactly max_tokens, as benchmark clients do (vLLM and SGLang honour it).
    body["ignore_eos"] = json!(true);
    body["stream"] = json!(target.streaming);
    if target.streaming {
        body["stream_options"] = json!({ "include_usage": true });
    }
    body
}

/// Whether a streamed chunk carries generated text: a completions `text`
/// or a chat `delta.content` that is not empty. A chat stream's first chunk
/// (`delta: {role: assistant, content: ""}`) and the usage-only final chunk
/// carry none.
fn carries_output(v: &Value) -> bool {
    v.get("choices").and_then(Value::as_array).is_some_and(|choices| {
        choices.iter().any(|c| {
            let text = c.get("text").or_else(|| c.get("delta").and_then(|d| d.get("content")));
            text.and_then(Value::as_str).is_some_and(|t| !t.is_empty())
        })
    })
}

fn parse_usage(v: &Value) -> Option<Usage> {
    let u = v.get("usage")?;
    Some(Usage { prompt_tokens: u.get("prompt_tokens")?.as_u64()? as u32, completion_tokens: u.get("completion_tokens")?.as_u64()? as u32 })
}

fn error_text(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/message").or_else(|| v.get("message")).and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| body.chars().take(200).collect())
}

/// Sends one request and times the answer. Never panics; network failures
/// become [`ExchangeStatus::Error`] or [`ExchangeStatus::Timeout`].
pub async fn send(http: &reqwest::Client, target: &Target, body: &Value, clock: &RunClock) -> Exchange {
    let path = match target.api {
        Api::Completions => "/v1/completions",
        Api::Chat => "/v1/chat/completions",
    };
    let mut req = http.post(format!("{}{path}", target.base_url.trim_end_matches('/'))).json(body);
    if let Some(key) = &target.api_key {
        req = req.bearer_auth(key);
    }
    let send_time_us = clock.now_unix_us();
    let deadline = tokio::time::Instant::now() + target.timeout;
    match tokio::time::timeout_at(deadline, exchange(req, target.streaming, send_time_us, clock)).await {
        Ok(x) => x,
        Err(_) => Exchange::failed(ExchangeStatus::Timeout, send_time_us, None, format!("no complete answer within {:?}", target.timeout)),
    }
}

/// An error and its chain of causes, `: `-separated (reqwest's own message
/// says only which URL failed; the causes say why: refused, TLS, DNS, ...).
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out += ": ";
            out += &text;
        }
        cause = c.source();
    }
    out
}

async fn exchange(req: reqwest::RequestBuilder, streaming: bool, send_time_us: u64, clock: &RunClock) -> Exchange {
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return Exchange::failed(ExchangeStatus::Error, send_time_us, None, format!("request failed: {}", with_causes(&e))),
    };
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Exchange::failed(ExchangeStatus::Error, send_time_us, Some(status), format!("HTTP {status}: {}", error_text(&text)));
    }
    if !streaming {
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => {
                return Exchange::failed(
                    ExchangeStatus::Error,
                    send_time_us,
                    Some(status),
                    format!("response cut short: {}", with_causes(&e)),
                );
            }
        };
        let now = clock.now_unix_us();
        let usage = serde_json::from_str::<Value>(&text).ok().as_ref().and_then(parse_usage);
        return Exchange {
            status: if usage.is_some() { ExchangeStatus::Ok } else { ExchangeStatus::Error },
            http_status: Some(status),
            error_message: if usage.is_some() { String::new() } else { "response has no usage".into() },
            send_time_us,
            first_chunk_time_us: Some(now),
            last_chunk_time_us: Some(now),
            chunk_times_us: Vec::new(),
            usage,
        };
    }
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut x = Exchange::failed(ExchangeStatus::Error, send_time_us, Some(status), String::new());
    let mut done = false;
    let mut body = resp.bytes_stream();
    while let Some(piece) = body.next().await {
        let bytes = match piece {
            Ok(b) => b,
            Err(e) => {
                x.error_message = format!("connection closed mid-stream: {}", with_causes(&e));
                return x;
            }
        };
        let now = clock.now_unix_us();
        parser.feed(&bytes, &mut events);
        for ev in events.drain(..) {
            match ev {
                SseEvent::Done => done = true,
                SseEvent::Data(data) => {
                    let Some(v) = serde_json::from_str::<Value>(&data).ok().filter(Value::is_object) else {
                        x.error_message = format!("not a JSON object in stream: {}", data.chars().take(120).collect::<String>());
                        return x;
                    };
                    if let Some(e) = v.get("error") {
                        x.error_message = format!("server error mid-stream: {e}");
                        return x;
                    }
                    if carries_output(&v) {
                        x.first_chunk_time_us.get_or_insert(now);
                        x.chunk_times_us.push(now);
                    }
                    if let Some(u) = parse_usage(&v) {
                        x.usage = Some(u);
                    }
                }
            }
        }
        x.last_chunk_time_us = Some(now);
    }
    if !done {
        x.error_message = "stream ended without [DONE]".into();
        return x;
    }
    if x.chunk_times_us.is_empty() {
        x.error_message = "the stream carried no generated text (no choices[].text or delta.content)".into();
        return x;
    }
    x.status = ExchangeStatus::Ok;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_708_093_800_123_456), "2024-02-16T14:30:00Z");
    }

    #[test]
    fn civil_dates_match_the_calendar() {
        let date = |days: u64| rfc3339_utc(days * 86_400 * 1_000_000)[..10].to_string();
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(59), "1970-03-01");
        assert_eq!(date(11_016), "2000-02-29");
        assert_eq!(date(20_502), "2026-02-18");
    }

    /// Fuzzing finding: such URLs failed every request, and the run blamed the server.
    #[test]
    fn urls_that_cannot_be_requested_are_named_before_a_run() {
        for ok in ["http://127.0.0.1:8000", "https://h.example/v1/", "http://[::1]:8000/metrics", "HTTP://host"] {
            assert_eq!(check_http_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("notaurl", "not a valid URL"),
            ("http://[::1", "not a valid URL (invalid IPv6"),
            ("http://", "not a valid URL"),
            ("http://h:99999", "invalid port"),
            ("ftp://h/x", "scheme `ftp`"),
            ("file:///etc/passwd", "scheme `file`"),
            ("", "not a valid URL"),
        ] {
            let err = check_http_url(bad).unwrap_err();
            assert!(err.contains(why) && err.contains("http://"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn an_api_key_with_a_control_character_is_refused_without_echoing_it() {
        for ok in ["sk-abc123", "", "with space", "tab\there", "ünïcode"] {
            assert_eq!(check_api_key(ok), Ok(()), "{ok:?}");
        }
        for (bad, at) in [
            ("secret\n", "'\\n' at byte 6"),
            ("sec\rret", "'\\r' at byte 3"),
            ("\0x", "'\\0' at byte 0"),
            ("a\u{7f}", "'\\u{7f}' at byte 1"),
        ] {
            let err = check_api_key(bad).unwrap_err();
            assert!(err.contains(at) && !err.contains("secret") && !err.contains("sec\r"), "{bad:?}: {err}");
        }
    }
}
