//! # blis-net: BLIS over HTTP
//!
//! The only crate with an async runtime. [`serve`] is an OpenAI-compatible
//! server (`/v1/completions`, `/v1/chat/completions` with SSE streaming,
//! `/v1/models`, `/health`, Prometheus `/metrics` with vLLM's metric names)
//! whose timing comes from the simulation engine, for testing gateways and
//! routers without GPUs. [`client`] sends one request to any such server and
//! times every streamed chunk ([`sse`] parses the stream). [`tokenize`] is
//! the tokenizer approximation the server uses.

pub mod client;
pub mod kv_events;
pub mod load;
pub mod observe;
pub mod serve;
pub mod sse;
pub mod stop;
pub mod tokenize;
