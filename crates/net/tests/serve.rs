//! `blis serve` as a real HTTP peer: every endpoint, streaming and not,
//! errors, metrics, and failure injection. The simulation runs 1000× faster
//! than real time so the tests take milliseconds; nothing here depends on
//! wall-clock timing beyond the server answering at all.

use std::sync::Arc;

use blis_engine::latency::Blackbox;
use blis_engine::scheduler::InstanceConfig;
use blis_net::serve::{RunningServer, ServeConfig, start};
use blis_workload::synthetic::LengthSpec;
use serde_json::{Value, json};

const MODEL: &str = "test/model";

fn config(failure_rate: f64) -> ServeConfig {
    ServeConfig {
        model_name: MODEL.into(),
        instance: InstanceConfig::basic(64, 2048, 4096, 2000),
        latency: Arc::new(Blackbox { alpha: [20_000.0, 0.0, 0.0], beta: [5_000.0, 10.0, 100.0] }),
        time_scale: 1000.0,
        failure_rate,
        seed: 7,
        natural_output: None,
        max_body_bytes: 64 * 1024,
        timeouts: Default::default(),
        kv_events: None,
    }
}

async fn server(failure_rate: f64) -> (RunningServer, String) {
    let s = start(config(failure_rate), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base = format!("http://{}", s.local_addr);
    (s, base)
}

fn data_lines(body: &str) -> Vec<&str> {
    body.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect()
}

#[tokio::test]
async fn streaming_completion_sends_every_token_usage_and_done() {
    let (srv, base) = server(0.0).await;
    let body = blis_net::client::http_builder("http://")
        .build()
        .unwrap()
        .post(format!("{base}/v1/completions"))
        .json(
            &json!({"model": MODEL, "prompt": "one two three", "max_tokens": 6, "stream": true, "stream_options": {"include_usage": true}}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = data_lines(&body);
    assert_eq!(events.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks.len(), 7, "6 token chunks and a usage chunk");
    assert!(chunks[..6].iter().all(|c| c["object"] == "text_completion" && c["choices"][0]["text"].as_str().unwrap().starts_with(' ')));
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6]["choices"], json!([]));
    assert_eq!(chunks[6]["usage"]["completion_tokens"], 6);
    assert_eq!(chunks[6]["usage"]["prompt_tokens"], 4); // "one" "two" "thre" "e"
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn chat_streams_a_role_chunk_then_deltas_and_non_streaming_returns_one_document() {
    let (srv, base) = server(0.0).await;
    let client = blis_net::client::http_builder("http://").build().unwrap();
    let body = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = data_lines(&body);
    let first: Value = serde_json::from_str(events[0]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(events.len(), 1 + 3 + 1, "role, three deltas, [DONE]");
    let whole: Value = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["usage"]["completion_tokens"], 4);
    assert_eq!(whole["choices"][0]["message"]["content"].as_str().unwrap().split_whitespace().count(), 4);
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn bad_requests_get_openai_error_json() {
    let (srv, base) = server(0.0).await;
    let client = blis_net::client::http_builder("http://").build().unwrap();
    for (body, status, param) in [
        ("{not json".to_string(), 400, "body"),
        (json!({"model": "other", "prompt": "x"}).to_string(), 404, "model"),
        (json!({"model": 7, "prompt": "x"}).to_string(), 400, "model"),
        (json!({"model": MODEL, "prompt": "x", "max_tokens": 0}).to_string(), 400, "max_tokens"),
        (json!({"model": MODEL, "prompt": "x", "max_tokens": 5000}).to_string(), 400, "max_tokens"),
    ] {
        let r = client
            .post(format!("{base}/v1/completions"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{body}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["param"], param, "{body}");
        assert!(e["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let big = "x ".repeat(100_000);
    let r = client.post(format!("{base}/v1/completions")).json(&json!({"model": MODEL, "prompt": big})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());
    let r = client.get(format!("{base}/v2/nothing")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // A known route asked with another method got an empty 405.
    for (method, path) in [
        (reqwest::Method::GET, "/v1/completions"),
        (reqwest::Method::DELETE, "/v1/chat/completions"),
        (reqwest::Method::POST, "/v1/models"),
    ] {
        let r = client.request(method.clone(), format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 405, "{method} {path}");
        let e: Value = r.json().await.unwrap();
        assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains(method.as_str())), "{method} {path}: {e}");
    }
    // The server still serves after all that, and, as vLLM does, serves its
    // model to a request that names none.
    let r =
        client.post(format!("{base}/v1/completions")).json(&json!({"model": MODEL, "prompt": "ok", "max_tokens": 2})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = client.post(format!("{base}/v1/completions")).json(&json!({"prompt": "ok", "max_tokens": 2})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["model"], MODEL);
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn models_health_and_prometheus_metrics_use_vllm_names() {
    let (srv, base) = server(0.0).await;
    let client = blis_net::client::http_builder("http://").build().unwrap();
    let models: Value = client.get(format!("{base}/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
    assert_eq!(client.get(format!("{base}/health")).send().await.unwrap().status().as_u16(), 200);
    for _ in 0..3 {
        client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"model": MODEL, "prompt": "a b c d", "max_tokens": 5}))
            .send()
            .await
            .unwrap();
    }
    let text = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
    ] {
        assert!(text.contains(name), "missing {name}");
    }
    let value =
        |name: &str| -> f64 { text.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()).unwrap().parse().unwrap() };
    assert_eq!(value("vllm:generation_tokens_total"), 15.0);
    assert_eq!(value("vllm:e2e_request_latency_seconds_count"), 3.0);
    // Three identical 4-token prompts: later ones hit nothing (no full 16-token block), so hits stay 0.
    assert_eq!(value("vllm:prefix_cache_hits_total"), 0.0);
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn injected_failures_are_429_503_or_dropped_connections_and_successes_still_complete() {
    let (srv, base) = server(0.5).await;
    let client = blis_net::client::http_builder("http://").build().unwrap();
    let (mut ok, mut throttled, mut unavailable, mut dropped) = (0, 0, 0, 0);
    for _ in 0..60 {
        let r = client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"model": MODEL, "prompt": "hello", "max_tokens": 8, "stream": true}))
            .send()
            .await;
        // A connection dropped before the first byte fails the request itself.
        let Ok(r) = r else {
            dropped += 1;
            continue;
        };
        match r.status().as_u16() {
            429 => throttled += 1,
            503 => unavailable += 1,
            200 => match r.text().await {
                Ok(body) if body.ends_with("data: [DONE]\n\n") => ok += 1,
                _ => dropped += 1,
            },
            s => panic!("unexpected status {s}"),
        }
    }
    assert_eq!(ok + throttled + unavailable + dropped, 60);
    assert!(ok > 10 && throttled > 0 && unavailable > 0 && dropped > 0, "ok {ok} 429 {throttled} 503 {unavailable} dropped {dropped}");
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn settings_that_would_fail_at_the_first_request_are_refused_at_start() {
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let inverted = LengthSpec { mean: 100.0, stdev: 0.0, min: 10, max: 1 };
    let cases = [
        (ServeConfig { natural_output: Some(inverted), ..config(0.0) }, "--output-tokens-max 1: must be ≥ the minimum"),
        (ServeConfig { natural_output: Some(LengthSpec { stdev: f64::NAN, ..inverted }), ..config(0.0) }, "--output-tokens-stdev NaN"),
        (ServeConfig { model_name: String::new(), ..config(0.0) }, "--served-model-name"),
        (ServeConfig { max_body_bytes: 0, ..config(0.0) }, "--max-body-bytes 0: must be from 1 to 1073741824"),
        (ServeConfig { max_body_bytes: blis_net::serve::MAX_BODY_BYTES + 1, ..config(0.0) }, "--max-body-bytes 1073741825: must be from 1"),
        (config(1.5), "--failure-rate 1.5"),
    ];
    for (cfg, want) in cases {
        let err = start(cfg, addr).await.err().expect("refused").to_string();
        assert!(err.starts_with(want), "{err}");
    }
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_gets_its_request_aborted() {
    // Real time here: at 1000× the whole answer would sit in socket buffers before the client hangs up.
    let srv = start(ServeConfig { time_scale: 1.0, ..config(0.0) }, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base = format!("http://{}", srv.local_addr);
    let client = blis_net::client::http_builder("http://").build().unwrap();
    let mut r = client
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "go", "max_tokens": 3000, "stream": true}))
        .send()
        .await
        .unwrap();
    assert!(r.chunk().await.unwrap().is_some(), "first token arrives");
    drop(r);
    // The server notices when it next writes; poll its metrics (each poll is a round trip, no sleeping).
    let aborted = |text: &str| text.lines().any(|l| l.starts_with("vllm:request_aborted_total") && l.ends_with(" 1"));
    let mut seen = false;
    for _ in 0..2000 {
        let text = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
        if aborted(&text) {
            seen = true;
            break;
        }
    }
    assert!(seen, "the abandoned request was aborted");
    srv.stop().await.unwrap();
}

mod client {
    use std::time::Duration;

    use blis_net::client::{ExchangeStatus, PromptContent, RunClock, Target, request_body, send};
    use blis_net::serve::openai::Api;

    use super::*;

    fn target(base: &str, api: Api, streaming: bool) -> Target {
        Target { base_url: base.into(), model: MODEL.into(), api, api_key: Some("k".into()), streaming, timeout: Duration::from_secs(30) }
    }

    #[tokio::test]
    async fn the_client_times_every_chunk_and_reads_usage_from_the_final_chunk() {
        let (srv, base) = server(0.0).await;
        let http = blis_net::client::http_builder("http://").build().unwrap();
        let clock = RunClock::start();
        for api in [Api::Completions, Api::Chat] {
            let t = target(&base, api, true);
            let x = send(&http, &t, &request_body(&t, &PromptContent::TokenIds(vec![5; 40]), 12), &clock).await;
            assert_eq!(x.status, ExchangeStatus::Ok, "{}", x.error_message);
            assert_eq!(x.usage.unwrap().completion_tokens, 12);
            // One chunk per token (a chat stream's role-only first chunk carries no text).
            assert_eq!(x.chunk_times_us.len(), 12);
            assert!(x.chunk_times_us.windows(2).all(|w| w[0] <= w[1]));
            let (first, last) = (x.first_chunk_time_us.unwrap(), x.last_chunk_time_us.unwrap());
            assert!(x.send_time_us <= first && first <= last);
        }
        let t = target(&base, Api::Completions, false);
        let x = send(&http, &t, &request_body(&t, &PromptContent::Text("hello there".into()), 3), &clock).await;
        assert_eq!((x.status, x.usage.unwrap().completion_tokens), (ExchangeStatus::Ok, 3));
        srv.stop().await.unwrap();
    }

    #[tokio::test]
    async fn errors_and_timeouts_are_recorded_with_their_status() {
        let (srv, base) = server(0.0).await;
        let http = blis_net::client::http_builder("http://").build().unwrap();
        let clock = RunClock::start();
        let mut t = target(&base, Api::Completions, true);
        t.model = "nope".into();
        let x = send(&http, &t, &request_body(&t, &PromptContent::Text("x".into()), 3), &clock).await;
        assert_eq!((x.status, x.http_status), (ExchangeStatus::Error, Some(404)));
        assert!(x.error_message.contains("does not exist"), "{}", x.error_message);
        let mut t = target(&base, Api::Completions, true);
        t.timeout = Duration::from_millis(1);
        // 4000 tokens of 5 ms steps at 1000× take 20 ms of wall time, far more than the 1 ms timeout.
        let x = send(&http, &t, &request_body(&t, &PromptContent::Text("x".into()), 4000), &clock).await;
        assert_eq!(x.status, ExchangeStatus::Timeout);
        let dead = target("http://127.0.0.1:9", Api::Completions, true);
        let x = send(&http, &dead, &request_body(&dead, &PromptContent::Text("x".into()), 3), &clock).await;
        assert_eq!((x.status, x.http_status), (ExchangeStatus::Error, None));
        srv.stop().await.unwrap();
    }

    /// A server that answers every connection with `sse` as a 200 event stream.
    async fn fixed_stream_server(sse: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut request = vec![0u8; 65536];
                let _ = conn.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    sse.len()
                );
                let _ = conn.write_all(format!("{head}{sse}").as_bytes()).await;
            }
        });
        base
    }

    /// A stream that ends with [DONE] but carried no text, or whose events
    /// are JSON but no chunk objects, was recorded as a success with no
    /// chunk and no first-token time.
    #[tokio::test]
    async fn a_stream_without_generated_text_is_an_error() {
        let http = blis_net::client::http_builder("http://").build().unwrap();
        let clock = RunClock::start();
        for (sse, needle) in [
            ("data: 123\n\ndata: [DONE]\n\n", "not a JSON object in stream: 123"),
            ("data: null\n\ndata: [DONE]\n\n", "not a JSON object in stream: null"),
            ("data: {\"choices\":[{\"text\":5,\"index\":\"x\"}]}\n\ndata: [DONE]\n\n", "no generated text"),
            ("data: [DONE]\n\n", "no generated text"),
        ] {
            let t = target(&fixed_stream_server(sse).await, Api::Completions, true);
            let x = send(&http, &t, &request_body(&t, &PromptContent::Text("x".into()), 3), &clock).await;
            assert_eq!(x.status, ExchangeStatus::Error, "{sse:?}");
            assert!(x.error_message.contains(needle), "{sse:?}: {}", x.error_message);
        }
        let ok = fixed_stream_server("data: {\"choices\":[{\"text\":\"hi\",\"index\":0}]}\n\ndata: [DONE]\n\n").await;
        let t = target(&ok, Api::Completions, true);
        let x = send(&http, &t, &request_body(&t, &PromptContent::Text("x".into()), 3), &clock).await;
        assert_eq!((x.status, x.chunk_times_us.len()), (ExchangeStatus::Ok, 1), "{}", x.error_message);
    }
}

/// `--kv-events-config`: a real ZeroMQ subscriber on loopback receives the
/// simulated server's KV events as vLLM publishes them: three frames
/// (topic, big-endian sequence number from 0, msgpack `[ts, events]`), the
/// first event storing the prompt's full blocks with their tokens.
#[tokio::test]
async fn kv_events_reach_a_zeromq_subscriber_as_vllm_publishes_them() {
    use zeromq::{Socket, SocketRecv};

    let kv = blis_net::kv_events::KvEventsConfig::parse(
        r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:0", "topic": "kv"}"#,
    )
    .unwrap();
    let srv = start(ServeConfig { kv_events: Some(kv), ..config(0.0) }, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let endpoint = srv.kv_events_endpoint.clone().expect("publishing");
    let mut sub = zeromq::SubSocket::new();
    sub.connect(&endpoint).await.unwrap();
    sub.subscribe("kv").await.unwrap();
    let client = blis_net::client::http_builder("http://").build().unwrap();
    let prompt = (0..40).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
    // A PUB socket drops what it sends before the subscription reaches it:
    // send requests until a batch arrives (each stores blocks).
    let message = 'received: {
        for _ in 0..50 {
            let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 2});
            client.post(format!("http://{}/v1/completions", srv.local_addr)).json(&body).send().await.unwrap().text().await.unwrap();
            if let Ok(m) = tokio::time::timeout(std::time::Duration::from_millis(500), sub.recv()).await {
                break 'received m.unwrap();
            }
        }
        panic!("no KV event batch reached the subscriber");
    };
    let frames = message.into_vec();
    assert_eq!(frames.len(), 3);
    assert_eq!(&frames[0][..], b"kv");
    assert_eq!(frames[1].len(), 8, "an 8-byte big-endian sequence number");
    let batch: Value = rmp_serde::from_slice(&frames[2]).unwrap();
    let ts = batch[0].as_f64().unwrap();
    assert!(ts > 1.7e9, "Unix seconds, as vLLM stamps batches: {ts}");
    let events = batch[1].as_array().unwrap();
    let stored = events.iter().find(|e| e[0] == "BlockStored").expect("a BlockStored event");
    let (hashes, tokens) = (stored[1].as_array().unwrap(), stored[3].as_array().unwrap());
    assert!(!hashes.is_empty() && hashes.iter().all(Value::is_u64));
    assert_eq!(stored[4], 16, "block size");
    assert_eq!(tokens.len(), hashes.len() * 16, "the stored blocks' tokens");
    assert_eq!((&stored[5], &stored[6]), (&Value::Null, &json!("GPU")), "lora_id, medium");
    // Once the requests are done, vLLM's reset_prefix_cache clears the cache and says so.
    let reset = client.post(format!("http://{}/reset_prefix_cache", srv.local_addr)).send().await.unwrap();
    assert_eq!(reset.status(), 200);
    let mut seq = u64::from_be_bytes(frames[1][..].try_into().unwrap());
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), sub.recv())
            .await
            .expect("AllBlocksCleared arrives")
            .unwrap()
            .into_vec();
        let next = u64::from_be_bytes(m[1][..].try_into().unwrap());
        assert_eq!(next, seq + 1, "sequence numbers count batches");
        seq = next;
        let batch: Value = rmp_serde::from_slice(&m[2]).unwrap();
        if batch[1].as_array().unwrap().iter().any(|e| e == &json!(["AllBlocksCleared"])) {
            break;
        }
    }
    srv.stop().await.unwrap();
}
