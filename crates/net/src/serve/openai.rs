//! The OpenAI-compatible request and response shapes `blis serve` speaks
//! (as vLLM serves them): request validation, error bodies, and the JSON of
//! streamed chunks and final responses.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::tokenize::approximate_token_ids;

/// Which endpoint a request came to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

/// An error answered with OpenAI's error body:
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// OpenAI error type, e.g. `invalid_request_error`.
    pub kind: &'static str,
    /// The offending parameter, if any.
    pub param: Option<&'static str>,
}

impl ApiError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into(), kind: "invalid_request_error", param: Some(param) }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({ "error": { "message": self.message, "type": self.kind, "param": self.param, "code": self.status.as_u16() } })
    }
}

/// A validated generation request.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationRequest {
    /// Endpoint.
    pub api: Api,
    /// Prompt token ids (explicit or from the tokenizer approximation).
    pub prompt: Vec<u32>,
    /// `max_tokens` (`max_completion_tokens` for chat), if given.
    pub max_tokens: Option<u32>,
    /// Generate exactly `max_tokens` (vLLM's `ignore_eos`).
    pub ignore_eos: bool,
    /// Stream the answer as server-sent events.
    pub stream: bool,
    /// Send a final usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
}

fn positive_u32(v: &Value, param: &'static str) -> Result<u32, ApiError> {
    v.as_u64()
        .filter(|&n| n >= 1 && n <= u64::from(u32::MAX))
        .map(|n| n as u32)
        .ok_or_else(|| ApiError::invalid(param, format!("`{param}` must be a positive integer, got {v}")))
}

fn flag(body: &Value, param: &'static str) -> Result<bool, ApiError> {
    match body.get(param) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::invalid(param, format!("`{param}` must be a boolean, got {v}"))),
    }
}

/// Whether a sampling parameter's value is one vLLM accepts.
type Accepts = fn(f64) -> bool;

/// The sampling parameters vLLM checks (`SamplingParams._verify_args`),
/// each with the values it accepts: a request outside them gets vLLM's 400,
/// though the simulated server samples nothing.
const SAMPLING_PARAMS: [(&str, Accepts, &str); 7] = [
    ("temperature", |v| v >= 0.0, "a number ≥ 0"),
    ("top_p", |v| v > 0.0 && v <= 1.0, "a number in (0, 1]"),
    ("top_k", |v| v.fract() == 0.0 && (v == -1.0 || v >= 0.0), "-1, 0 (no limit) or a positive integer"),
    ("min_p", |v| (0.0..=1.0).contains(&v), "a number in [0, 1]"),
    ("presence_penalty", |v| (-2.0..=2.0).contains(&v), "a number in [-2, 2]"),
    ("frequency_penalty", |v| (-2.0..=2.0).contains(&v), "a number in [-2, 2]"),
    ("repetition_penalty", |v| v > 0.0, "a number > 0"),
];

/// Refuses sampling parameters vLLM would refuse ([`SAMPLING_PARAMS`]);
/// null means the default.
fn check_sampling(body: &Value) -> Result<(), ApiError> {
    for (param, accepts, allowed) in SAMPLING_PARAMS {
        match body.get(param) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_f64().is_some_and(accepts) => {}
            Some(v) => return Err(ApiError::invalid(param, format!("`{param}` must be {allowed}, got {v}"))),
        }
    }
    Ok(())
}

fn prompt_ids(prompt: &Value) -> Result<Vec<u32>, ApiError> {
    let bad = || ApiError::invalid("prompt", "`prompt` must be a string, a list of token ids, or a one-element list of either");
    match prompt {
        Value::String(s) => Ok(approximate_token_ids(s)),
        Value::Array(items) if items.iter().all(Value::is_number) => items
            .iter()
            .map(|t| {
                t.as_u64()
                    .filter(|&n| n <= u64::from(u32::MAX))
                    .map(|n| n as u32)
                    .ok_or_else(|| ApiError::invalid("prompt", format!("token ids must be integers from 0 to {}, got {t}", u32::MAX)))
            })
            .collect(),
        Value::Array(items) if items.len() == 1 => prompt_ids(&items[0]),
        Value::Array(items) if items.iter().all(|p| p.is_string() || p.is_array()) => {
            Err(ApiError::invalid("prompt", "batched prompts are not supported; send one prompt per request"))
        }
        _ => Err(bad()),
    }
}

/// Chat messages become one prompt: each message is rendered as
/// `<|role|> content`, approximating a chat template's role markers.
fn chat_ids(messages: &Value) -> Result<Vec<u32>, ApiError> {
    let list = messages
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| ApiError::invalid("messages", "`messages` must be a non-empty list of {role, content} objects"))?;
    let mut text = String::new();
    for m in list {
        let role =
            m.get("role").and_then(Value::as_str).ok_or_else(|| ApiError::invalid("messages", "every message needs a string `role`"))?;
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" "),
            Some(Value::Null) | None => String::new(),
            Some(_) => return Err(ApiError::invalid("messages", "message `content` must be a string or a list of text parts")),
        };
        text.push_str(&format!(" <|{role}|> {content}"));
    }
    text.push_str(" <|assistant|>");
    Ok(approximate_token_ids(&text))
}

impl GenerationRequest {
    /// Validates a request body for `api` served as `model_name`.
    pub fn parse(api: Api, body: &Value, model_name: &str) -> Result<GenerationRequest, ApiError> {
        if !body.is_object() {
            return Err(ApiError::invalid("body", "the request body must be a JSON object"));
        }
        match body.get("model") {
            // As in vLLM, a request that names no model gets the served one.
            None | Some(Value::Null) => {}
            Some(Value::String(m)) if m == model_name => {}
            Some(Value::String(m)) => {
                return Err(ApiError {
                    status: StatusCode::NOT_FOUND,
                    message: format!("The model `{m}` does not exist; this server serves `{model_name}`."),
                    kind: "invalid_request_error",
                    param: Some("model"),
                });
            }
            Some(_) => return Err(ApiError::invalid("model", "`model` must be a string")),
        }
        if let Some(n) = body.get("n").filter(|v| !v.is_null())
            && n.as_u64() != Some(1)
        {
            return Err(ApiError::invalid("n", "only n = 1 is supported"));
        }
        let prompt = match api {
            Api::Completions => prompt_ids(body.get("prompt").ok_or_else(|| ApiError::invalid("prompt", "`prompt` is required"))?)?,
            Api::Chat => chat_ids(body.get("messages").unwrap_or(&Value::Null))?,
        };
        if prompt.is_empty() {
            return Err(ApiError::invalid("prompt", "the prompt is empty"));
        }
        let max_tokens_param = match api {
            Api::Chat if body.get("max_completion_tokens").is_some_and(|v| !v.is_null()) => "max_completion_tokens",
            _ => "max_tokens",
        };
        let max_tokens = match body.get(max_tokens_param) {
            None | Some(Value::Null) => None,
            Some(v) => Some(positive_u32(v, max_tokens_param)?),
        };
        check_sampling(body)?;
        let stream = flag(body, "stream")?;
        let include_usage = match body.get("stream_options") {
            None | Some(Value::Null) => false,
            Some(o) if !o.is_object() => {
                return Err(ApiError::invalid("stream_options", format!("`stream_options` must be an object, got {o}")));
            }
            // As vLLM: "Stream options can only be defined when `stream=True`."
            Some(_) if !stream => {
                return Err(ApiError::invalid("stream_options", "`stream_options` can only be given with `stream: true`"));
            }
            Some(o) => flag(o, "include_usage")?,
        };
        Ok(GenerationRequest { api, prompt, max_tokens, ignore_eos: flag(body, "ignore_eos")?, stream, include_usage })
    }
}

/// Identity of one response, repeated in every chunk.
#[derive(Clone, Debug)]
pub struct ResponseId {
    /// `cmpl-…` or `chatcmpl-…`.
    pub id: String,
    /// Unix seconds when the request was received.
    pub created: u64,
    /// Served model name.
    pub model: String,
    /// Endpoint.
    pub api: Api,
}

fn usage(prompt_tokens: u32, completion_tokens: u32) -> Value {
    json!({ "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens })
}

impl ResponseId {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.api, chunk) {
            (Api::Completions, _) => "text_completion",
            (Api::Chat, true) => "chat.completion.chunk",
            (Api::Chat, false) => "chat.completion",
        }
    }

    /// A streamed chunk carrying `text` (and `finish_reason` on the last token).
    /// `with_usage` adds `"usage": null`, as vLLM does when usage is requested.
    pub fn chunk(&self, text: &str, finish_reason: Option<&str>, with_usage: bool) -> Value {
        let choice = match self.api {
            Api::Completions => json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason, "stop_reason": null }),
            Api::Chat => json!({ "index": 0, "delta": { "content": text }, "logprobs": null, "finish_reason": finish_reason }),
        };
        let mut v =
            json!({ "id": self.id, "object": self.object(true), "created": self.created, "model": self.model, "choices": [choice] });
        if with_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// The first chat chunk, announcing the assistant role.
    pub fn role_chunk(&self, with_usage: bool) -> Value {
        let mut v = json!({
            "id": self.id, "object": self.object(true), "created": self.created, "model": self.model,
            "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "" }, "logprobs": null, "finish_reason": null }]
        });
        if with_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// The final usage-only chunk.
    pub fn usage_chunk(&self, prompt_tokens: u32, completion_tokens: u32) -> Value {
        json!({ "id": self.id, "object": self.object(true), "created": self.created, "model": self.model,
                "choices": [], "usage": usage(prompt_tokens, completion_tokens) })
    }

    /// A complete, non-streamed response.
    pub fn full(&self, text: &str, finish_reason: &str, prompt_tokens: u32, completion_tokens: u32) -> Value {
        let choice = match self.api {
            Api::Completions => json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason, "stop_reason": null }),
            Api::Chat => {
                json!({ "index": 0, "message": { "role": "assistant", "content": text }, "logprobs": null, "finish_reason": finish_reason })
            }
        };
        json!({ "id": self.id, "object": self.object(false), "created": self.created, "model": self.model,
                "choices": [choice], "usage": usage(prompt_tokens, completion_tokens) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(api: Api, body: Value) -> Result<GenerationRequest, ApiError> {
        GenerationRequest::parse(api, &body, "m")
    }

    #[test]
    fn completions_accept_text_and_token_ids() {
        let r = parse(
            Api::Completions,
            json!({"model": "m", "prompt": "hello world", "max_tokens": 5, "stream": true,
            "stream_options": {"include_usage": true}, "ignore_eos": true}),
        )
        .unwrap();
        assert_eq!((r.prompt.len(), r.max_tokens, r.stream, r.include_usage, r.ignore_eos), (4, Some(5), true, true, true)); // "hell" "o" "worl" "d"
        let r = parse(Api::Completions, json!({"model": "m", "prompt": [1, 2, 3]})).unwrap();
        assert_eq!((r.prompt, r.max_tokens, r.stream), (vec![1, 2, 3], None, false));
        let r = parse(Api::Completions, json!({"model": "m", "prompt": ["hi"]})).unwrap();
        assert_eq!(r.prompt.len(), 1);
    }

    #[test]
    fn chat_renders_messages_and_reads_max_completion_tokens() {
        let r =
            parse(Api::Chat, json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 7})).unwrap();
        assert_eq!(r.max_tokens, Some(7));
        assert!(r.prompt.len() >= 3);
    }

    #[test]
    fn bad_requests_name_the_parameter() {
        for (api, body, param) in [
            (Api::Completions, json!({"model": 7, "prompt": "x"}), "model"),
            (Api::Completions, json!({"model": "m"}), "prompt"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "max_tokens": 0}), "max_tokens"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "max_tokens": -3}), "max_tokens"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "stream": "yes"}), "stream"),
            (Api::Completions, json!({"model": "m", "prompt": ["a", "b"]}), "prompt"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "n": 2}), "n"),
            (Api::Completions, json!({"model": "m", "prompt": ""}), "prompt"),
            (Api::Chat, json!({"model": "m", "messages": []}), "messages"),
            (Api::Chat, json!({"model": "m", "messages": [{"content": "x"}]}), "messages"),
            (Api::Completions, json!([1]), "body"),
            // Sampling parameters vLLM refuses (the simulated server samples nothing, but answers as vLLM does).
            (Api::Completions, json!({"model": "m", "prompt": "x", "temperature": "hot"}), "temperature"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "temperature": -3}), "temperature"),
            (Api::Chat, json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0}), "top_p"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "top_k": 2.5}), "top_k"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "presence_penalty": 3}), "presence_penalty"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "stream": true, "stream_options": "x"}), "stream_options"),
            (Api::Completions, json!({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}}), "stream_options"),
        ] {
            let e = parse(api, body.clone()).unwrap_err();
            assert_eq!(e.param, Some(param), "{body}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert_eq!(e.body()["error"]["param"], param);
        }
        let e = parse(Api::Completions, json!({"model": "other", "prompt": "x"})).unwrap_err();
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        // As in vLLM, naming no model (or null) asks for the served one.
        for body in [json!({"prompt": "x"}), json!({"model": null, "prompt": "x"})] {
            assert!(parse(Api::Completions, body.clone()).is_ok(), "{body}");
        }
    }

    /// A list of numbers is one prompt of token ids, whatever is wrong with
    /// them; only a list of prompts is a batch.
    #[test]
    fn prompt_lists_are_told_apart() {
        let message = |prompt: Value| {
            parse(Api::Completions, json!({"model": "m", "prompt": prompt})).unwrap_err().body()["error"]["message"].clone()
        };
        for bad_ids in [json!([1, 2, -3]), json!([1.5]), json!([4294967296u64])] {
            assert!(message(bad_ids.clone()).as_str().unwrap().starts_with("token ids must be integers from 0 to 4294967295"), "{bad_ids}");
        }
        assert!(message(json!([[1, 2], [3]])).as_str().unwrap().starts_with("batched prompts"));
        assert!(message(json!([1, "a"])).as_str().unwrap().starts_with("`prompt` must be a string"));
    }
}
