//! `blis serve` under faults, over loopback: slow and half-sent requests,
//! idle and vanishing clients, thousands of concurrent streams, running out
//! of file descriptors, shutdown under load, and time scales at the edge of
//! the valid range. The timeout under test is set to a few hundred ms so each
//! test runs in a few seconds; the only wall-clock assertions are generous
//! upper bounds that prove nothing hung (and one CPU-time bound that proves
//! nothing spins).
//!
//! The fd-exhaustion test lowers the process's file-descriptor limit, so it
//! runs alone: every test holds [`EXCLUSIVE`] for reading, that one for writing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use blis_engine::latency::Blackbox;
use blis_engine::scheduler::InstanceConfig;
use blis_net::serve::{FLUSH_MS, RunningServer, ServeConfig, ServeTimeouts, start};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MODEL: &str = "test/model";

/// Short timeouts for tests, ms.
const SHORT_MS: u64 = 200;

/// Bound on anything that should happen "after a timeout": generous, so a
/// loaded machine does not fail a test, yet proof that nothing hung.
const HANG: Duration = Duration::from_secs(5);

static EXCLUSIVE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// 5 ms decode steps at `time_scale`: 200 tokens per wall-clock second at 1×.
fn config(time_scale: f64, timeouts: ServeTimeouts) -> ServeConfig {
    ServeConfig {
        model_name: MODEL.into(),
        instance: InstanceConfig::basic(256, 8192, 4096, 40_000),
        latency: Arc::new(Blackbox { alpha: [1_000.0, 0.0, 0.0], beta: [5_000.0, 1.0, 1.0] }),
        time_scale,
        failure_rate: 0.0,
        seed: 3,
        natural_output: None,
        max_body_bytes: 64 * 1024,
        timeouts,
        kv_events: None,
    }
}

async fn server(time_scale: f64, timeouts: ServeTimeouts) -> (RunningServer, String) {
    let s = start(config(time_scale, timeouts), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base = format!("http://{}", s.local_addr);
    (s, base)
}

fn http() -> reqwest::Client {
    blis_net::client::http_builder("http://").build().unwrap()
}

fn completion(max_tokens: u32, stream: bool) -> Value {
    json!({"model": MODEL, "prompt": "one two three", "max_tokens": max_tokens, "stream": stream})
}

/// A streamed completion of `max_tokens`, read to its end.
async fn stream_to_end(client: &reqwest::Client, base: &str, max_tokens: u32) -> String {
    let r = client.post(format!("{base}/v1/completions")).json(&completion(max_tokens, true)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.text().await.unwrap()
}

fn data_events(body: &str) -> Vec<&str> {
    body.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect()
}

/// Whether a stream body ended normally: every token, then `[DONE]`.
fn complete(body: &str, tokens: usize) -> bool {
    let events = data_events(body);
    events.len() == tokens + 1 && events.last() == Some(&"[DONE]") && !body.contains("\"error\"")
}

/// Reads until the server closes the connection (EOF or reset); returns what arrived.
/// Panics if it is still open after [`HANG`].
async fn read_until_closed(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await.expect("the server closed the connection") {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// One `GET /health` on `tcp`, answered 200 (the connection stays open).
async fn assert_healthy(tcp: &mut TcpStream) {
    let response = raw_exchange(tcp, HEALTH).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// One raw HTTP/1.1 request (kept alive) and its whole response, which must
/// carry a content-length.
async fn raw_exchange(tcp: &mut TcpStream, request: &str) -> String {
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(HANG, tcp.read(&mut buf)).await.expect("a response").unwrap();
        assert!(n > 0, "closed before the response ended: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length: usize = text[..head_end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().unwrap()))
                .expect("content-length");
            if got.len() >= head_end + 4 + length {
                return text.into_owned();
            }
        }
    }
}

/// The file-descriptor limit of this process.
fn nofile() -> libc::rlimit {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim
}

fn set_nofile(lim: libc::rlimit) {
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

const HEALTH: &str = "GET /health HTTP/1.1\r\nhost: t\r\n\r\n";

/// A metric's value from `/metrics`.
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{'])).unwrap_or_else(|| panic!("no {name}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn half_sent_request_heads_are_closed_after_the_header_timeout_while_normal_requests_succeed() {
    let _shared = EXCLUSIVE.read().await;
    let (srv, base) = server(1000.0, ServeTimeouts { header_read_ms: SHORT_MS, ..ServeTimeouts::DEFAULT }).await;
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut tcp = TcpStream::connect(srv.local_addr).await.unwrap();
        tcp.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-type: app").await.unwrap();
        slow.push(tcp);
    }
    // A silent connection gets the same timeout: it never sent a head at all.
    slow.push(TcpStream::connect(srv.local_addr).await.unwrap());
    let body = stream_to_end(&http(), &base, 5).await;
    assert!(complete(&body, 5), "{body}");
    for mut tcp in slow {
        assert_eq!(read_until_closed(&mut tcp).await, b"", "closed without a response");
    }
    // A keep-alive connection whose next head stalls half-way is closed too.
    let mut tcp = TcpStream::connect(srv.local_addr).await.unwrap();
    assert_healthy(&mut tcp).await;
    tcp.write_all(b"GET /hea").await.unwrap();
    assert_eq!(read_until_closed(&mut tcp).await, b"");
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
    let _shared = EXCLUSIVE.read().await;
    // The header timeout is long: only the idle timeout can close these.
    let (srv, _) = server(1000.0, ServeTimeouts { keep_alive_idle_ms: SHORT_MS, ..ServeTimeouts::DEFAULT }).await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(srv.local_addr).await.unwrap();
        assert_healthy(&mut tcp).await;
        // Kept alive: a second request on the same connection is answered.
        assert_healthy(&mut tcp).await;
        idle.push(tcp);
    }
    for mut tcp in idle {
        assert_eq!(read_until_closed(&mut tcp).await, b"");
    }
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn a_stalled_request_body_gets_408_after_the_body_timeout_and_its_connection_closed() {
    let _shared = EXCLUSIVE.read().await;
    let (srv, base) = server(1000.0, ServeTimeouts { body_read_ms: SHORT_MS, ..ServeTimeouts::DEFAULT }).await;
    let mut tcp = TcpStream::connect(srv.local_addr).await.unwrap();
    tcp.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\":")
        .await
        .unwrap();
    let response = String::from_utf8(read_until_closed(&mut tcp).await).unwrap();
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("did not arrive within 200 ms"), "{response}");
    let body = stream_to_end(&http(), &base, 3).await;
    assert!(complete(&body, 3), "{body}");
    srv.stop().await.unwrap();
}

/// Fuzzing finding: a `Content-Length` over `--max-body-bytes` waited out
/// the body timeout (30 s here) for a 408. It is answered 413 from the head
/// alone: only the head is sent, and the response arrives (the server then
/// closes the connection, whose body it never read). With `Expect:
/// 100-continue` the client is told 413 instead of being asked to send.
#[tokio::test]
async fn a_declared_body_over_the_limit_gets_413_at_once_without_the_body_being_sent() {
    let _shared = EXCLUSIVE.read().await;
    let (srv, base) = server(1000.0, ServeTimeouts::DEFAULT).await;
    let limit = config(1000.0, ServeTimeouts::DEFAULT).max_body_bytes;
    for (path, expect) in [("/v1/completions", ""), ("/v1/chat/completions", "expect: 100-continue\r\n")] {
        let mut tcp = TcpStream::connect(srv.local_addr).await.unwrap();
        let head =
            format!("POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n{expect}content-length: {}\r\n\r\n", limit + 1);
        tcp.write_all(head.as_bytes()).await.unwrap();
        let response = String::from_utf8(read_until_closed(&mut tcp).await).unwrap();
        assert!(response.starts_with("HTTP/1.1 413"), "{path}: {response}");
        let body: Value = serde_json::from_str(&response[response.find("\r\n\r\n").unwrap() + 4..]).unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&(limit + 1).to_string()) && message.contains("--max-body-bytes"), "{message}");
        assert_eq!(body["error"]["code"], 413);
    }
    // A declared length at the limit is read as usual (here: not JSON, 400).
    let mut tcp = TcpStream::connect(srv.local_addr).await.unwrap();
    let request = format!("POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-length: {limit}\r\n\r\n{}", "x".repeat(limit));
    let response = raw_exchange(&mut tcp, &request).await;
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    let body = stream_to_end(&http(), &base, 3).await;
    assert!(complete(&body, 3), "{body}");
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn clients_that_disconnect_mid_stream_are_aborted_and_leak_nothing_while_others_are_served() {
    let _shared = EXCLUSIVE.read().await;
    // Real time, so the long answers are still streaming when their clients hang up.
    let (srv, base) = server(1.0, ServeTimeouts::DEFAULT).await;
    let client = http();
    let mut quitters = Vec::new();
    for _ in 0..20 {
        let mut r = client.post(format!("{base}/v1/completions")).json(&completion(3000, true)).send().await.unwrap();
        assert!(r.chunk().await.unwrap().is_some(), "first token arrives");
        quitters.push(r);
    }
    let stayers: Vec<_> = (0..20)
        .map(|_| {
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move { stream_to_end(&client, &base, 10).await })
        })
        .collect();
    drop(quitters);
    for s in stayers {
        let body = s.await.unwrap();
        assert!(complete(&body, 10), "{body}");
    }
    // The server notices a hang-up when it next writes; poll its metrics
    // (each poll a round trip, no sleeping) until all 20 are aborted and
    // nothing is left running.
    let mut settled = false;
    for _ in 0..5000 {
        if metric(&client, &base, "vllm:request_aborted_total").await == 20.0
            && metric(&client, &base, "vllm:num_requests_running").await == 0.0
        {
            settled = true;
            break;
        }
    }
    assert!(settled, "every abandoned request was aborted");
    assert_eq!(metric(&client, &base, "vllm:num_requests_waiting").await, 0.0);
    let body = stream_to_end(&client, &base, 4).await;
    assert!(complete(&body, 4), "{body}");
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_concurrent_streams_all_complete() {
    const N: usize = 2000;
    let _shared = EXCLUSIVE.read().await;
    // N client and N server sockets live in this process.
    let lim = nofile();
    if lim.rlim_cur < 8192 {
        set_nofile(libc::rlimit { rlim_cur: lim.rlim_max.min(8192), ..lim });
    }
    // Default timeouts: under a burst of N connects, a client may take longer than a short header timeout to send its head.
    let (srv, base) = server(1000.0, ServeTimeouts::DEFAULT).await;
    let client = http();
    let (head_tx, mut heads) = tokio::sync::mpsc::unbounded_channel();
    let (release, released) = tokio::sync::watch::channel(false);
    let streams: Vec<_> = (0..N)
        .map(|_| {
            let (client, base, head_tx, mut released) = (client.clone(), base.clone(), head_tx.clone(), released.clone());
            tokio::spawn(async move {
                let r = client.post(format!("{base}/v1/completions")).json(&completion(8, true)).send().await.unwrap();
                // Hold every stream open until all N have their response head.
                head_tx.send(()).unwrap();
                released.wait_for(|r| *r).await.unwrap();
                r.text().await.unwrap()
            })
        })
        .collect();
    // A stream that failed would leave the others waiting: bound the wait.
    let all_heads = async {
        for _ in 0..N {
            heads.recv().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(30), all_heads).await.expect("every stream got its response head");
    release.send_replace(true);
    for s in streams {
        let body = s.await.unwrap();
        assert!(complete(&body, 8), "{body}");
    }
    assert_eq!(metric(&client, &base, "vllm:e2e_request_latency_seconds_count").await, N as f64);
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_under_load_ends_in_flight_streams_cleanly_within_the_grace_bound() {
    let _shared = EXCLUSIVE.read().await;
    const GRACE_MS: u64 = 1_000;
    // Real time: the long answers (15 s) outlast the grace, the short ones (10 tokens) do not.
    let timeouts = ServeTimeouts { shutdown_grace_ms: GRACE_MS, ..ServeTimeouts::DEFAULT };
    let (srv, base) = server(1.0, timeouts).await;
    let client = http();
    let mut long = Vec::new();
    for _ in 0..30 {
        let mut r = client.post(format!("{base}/v1/completions")).json(&completion(3000, true)).send().await.unwrap();
        let first = r.chunk().await.unwrap().unwrap();
        long.push(tokio::spawn(async move { String::from_utf8_lossy(&first).into_owned() + &r.text().await.unwrap() }));
    }
    let whole = tokio::spawn(client.post(format!("{base}/v1/completions")).json(&completion(3000, false)).send());
    // A whole answer sends nothing until it is done: wait until the simulation has it.
    let mut in_flight = false;
    for _ in 0..5000 {
        if metric(&client, &base, "vllm:num_requests_running").await + metric(&client, &base, "vllm:num_requests_waiting").await == 31.0 {
            in_flight = true;
            break;
        }
    }
    assert!(in_flight, "the whole answer is in flight");
    let mut short = Vec::new();
    for _ in 0..10 {
        let r = client.post(format!("{base}/v1/completions")).json(&completion(10, true)).send().await.unwrap();
        short.push(tokio::spawn(r.text()));
    }
    // Connections that would otherwise hold shutdown up: a half-sent head
    // (header timeout 10 s) and an idle keep-alive one (idle timeout 60 s).
    let mut half = TcpStream::connect(srv.local_addr).await.unwrap();
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nho").await.unwrap();
    let mut idle = TcpStream::connect(srv.local_addr).await.unwrap();
    assert!(raw_exchange(&mut idle, HEALTH).await.starts_with("HTTP/1.1 200"));
    let addr = srv.local_addr;
    let began = Instant::now();
    srv.stop().await.unwrap();
    let took = began.elapsed();
    assert!(took < Duration::from_millis(GRACE_MS + FLUSH_MS) + HANG, "stop took {took:?}");
    assert!(TcpStream::connect(addr).await.is_err(), "no longer listening");
    assert_eq!(read_until_closed(&mut half).await, b"");
    assert_eq!(read_until_closed(&mut idle).await, b"");
    for s in short {
        let body = s.await.unwrap().unwrap();
        assert!(complete(&body, 10), "answers shorter than the grace complete normally: {body}");
    }
    for s in long {
        // Ended cleanly: the body is whole (no transport error), its last
        // events an error saying why, then [DONE].
        let body = s.await.unwrap();
        let events = data_events(&body);
        assert_eq!(events.last(), Some(&"[DONE]"), "{body}");
        let error: Value = serde_json::from_str(events[events.len() - 2]).unwrap();
        assert_eq!(error["error"]["code"], 503, "{body}");
        assert!(events.len() > 2, "some tokens came first");
    }
    let whole = whole.await.unwrap().unwrap();
    assert_eq!(whole.status().as_u16(), 503);
    assert!(whole.text().await.unwrap().contains("shutting down"));
}

#[tokio::test]
async fn a_tiny_time_scale_neither_panics_the_simulation_nor_breaks_later_requests() {
    let _shared = EXCLUSIVE.read().await;
    // 1 µs of simulated time is 1e24 s of wall time: every engine event lies beyond any Instant.
    // A short grace: the first request never ends, and holds `stop` up that long.
    let (srv, base) = server(1e-30, ServeTimeouts { shutdown_grace_ms: SHORT_MS, ..ServeTimeouts::DEFAULT }).await;
    let client = http();
    let pending = client.post(format!("{base}/v1/completions")).json(&completion(4, true)).send().await.unwrap();
    assert_eq!(pending.status().as_u16(), 200);
    // The simulation answers metrics only between commands: once it reports
    // the request, it has scheduled the request's first step (where it panicked before).
    let mut seen = false;
    for _ in 0..5000 {
        if metric(&client, &base, "vllm:num_requests_running").await + metric(&client, &base, "vllm:num_requests_waiting").await == 1.0 {
            seen = true;
            break;
        }
    }
    assert!(seen, "the request reached the simulation");
    assert_eq!(client.get(format!("{base}/metrics")).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(client.get(format!("{base}/health")).send().await.unwrap().status().as_u16(), 200);
    let later = client.post(format!("{base}/v1/completions")).json(&completion(4, true)).send().await.unwrap();
    assert_eq!(later.status().as_u16(), 200, "not 503: the simulation is alive");
    drop((pending, later));
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn zero_connection_timeouts_are_refused_at_start() {
    let _shared = EXCLUSIVE.read().await;
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    for (timeouts, want) in [
        (ServeTimeouts { header_read_ms: 0, ..ServeTimeouts::DEFAULT }, "--header-timeout-ms 0"),
        (ServeTimeouts { body_read_ms: 0, ..ServeTimeouts::DEFAULT }, "--body-timeout-ms 0"),
        (ServeTimeouts { keep_alive_idle_ms: 0, ..ServeTimeouts::DEFAULT }, "--idle-timeout-ms 0"),
    ] {
        let err = start(config(1.0, timeouts), addr).await.err().expect("refused").to_string();
        assert!(err.starts_with(want), "{err}");
    }
}

mod fd_exhaustion {
    use super::*;

    /// CPU time this process has used (user + system).
    fn cpu_time() -> Duration {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
        let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
        tv(usage.ru_utime) + tv(usage.ru_stime)
    }

    /// Opens `/dev/null` until the process has no file descriptor left.
    fn exhaust() -> Vec<std::fs::File> {
        let mut held = Vec::new();
        loop {
            match std::fs::File::open("/dev/null") {
                Ok(f) => held.push(f),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                    return held;
                }
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn accept_errors_from_fd_exhaustion_neither_stop_the_server_nor_spin_nor_break_open_streams() {
        let _alone = EXCLUSIVE.write().await;
        let (srv, base) = server(1.0, ServeTimeouts::DEFAULT).await;
        let client = http();
        let mut open = client.post(format!("{base}/v1/completions")).json(&completion(3000, true)).send().await.unwrap();
        assert!(open.chunk().await.unwrap().is_some());
        let saved = nofile();
        let highest =
            std::fs::read_dir("/proc/self/fd").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok()).max().unwrap();
        set_nofile(libc::rlimit { rlim_cur: highest + 16, rlim_max: saved.rlim_max });
        let mut held = exhaust();
        // One descriptor for the client's socket; the server then has none to accept it with.
        held.pop();
        let mut waiting = TcpStream::connect(srv.local_addr).await.unwrap();
        waiting.write_all(HEALTH.as_bytes()).await.unwrap();
        assert_eq!(std::fs::File::open("/dev/null").unwrap_err().raw_os_error(), Some(libc::EMFILE), "out of descriptors");
        // While the server's accepts fail: the open stream keeps flowing
        // (40 tokens, ~200 ms), and the accept loop does not spin.
        let (wall, cpu) = (Instant::now(), cpu_time());
        for _ in 0..40 {
            assert!(open.chunk().await.unwrap().is_some(), "the open stream still flows");
        }
        let (wall, cpu) = (wall.elapsed(), cpu_time() - cpu);
        assert!(cpu < wall / 2, "{cpu:?} of CPU in {wall:?}: the accept loop spins");
        drop(held);
        set_nofile(saved);
        // The connection that waited in the backlog is served once descriptors are free.
        let response = tokio::time::timeout(HANG, read_until_first_line(&mut waiting)).await.expect("served after the exhaustion");
        assert_eq!(response, "HTTP/1.1 200 OK");
        drop(open);
        let body = stream_to_end(&client, &base, 3).await;
        assert!(complete(&body, 3), "{body}");
        srv.stop().await.unwrap();
    }

    async fn read_until_first_line(tcp: &mut TcpStream) -> String {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n") {
            assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "closed early");
            got.push(byte[0]);
        }
        String::from_utf8(got).unwrap().trim_end().to_string()
    }
}
