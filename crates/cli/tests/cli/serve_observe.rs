//! `blis serve` and `blis observe` flags a fuzzing pass found mishandled:
//! each is refused up front with one line naming the flag (exit 2), or
//! accepted as the help says.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::{Server, assert_refused, blis, is_empty_dir, scratch};

const MODEL: &str = "meta-llama/llama-3.1-8b-instruct";

/// Fuzzing finding: `--max-body-bytes 1e6` was refused although the help
/// says counts may be written so. It is read as 1 000 000: a request that
/// declares one byte more is answered 413 from its head alone (the body is
/// never sent), with an OpenAI error body naming the flag. The banner's
/// block count has thousands separators.
#[test]
fn serve_reads_max_body_bytes_as_a_count_and_answers_413_from_the_declared_length() {
    let server = Server::start(&["--max-body-bytes", "1e6"]);
    let blocks = server.banner.split(" KV blocks").next().and_then(|s| s.rsplit(", ").next()).unwrap_or_default();
    assert!(blocks.contains(',') && blocks.replace(',', "").parse::<u64>().is_ok(), "{}", server.banner);
    let mut tcp = TcpStream::connect(server.addr()).unwrap();
    // A guard against a hang only: the answer comes from the head.
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 1000001\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).expect("the server answers and closes the connection");
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(
        response.contains("the request body is 1000001 bytes, more than the 1000000 bytes this server accepts (--max-body-bytes)"),
        "{response}"
    );
}

#[test]
fn serve_refuses_body_limits_that_are_not_whole_counts_in_range() {
    for (value, needle) in [
        ("1.5", "`1.5` is not a whole number"),
        ("-1", "`-1` is negative: a count is 0 or more"),
        ("1e-3", "is not a whole number"),
        ("1e30", "too large"),
        ("0", "--max-body-bytes 0: must be from 1 to 1073741824 (1Gi) bytes"),
        ("2Gi", "--max-body-bytes 2147483648: must be from 1 to 1073741824"),
    ] {
        let out = blis(&["serve", "--model", MODEL, "--port", "0", "--max-body-bytes", value]);
        assert_refused(&out, value, needle);
        assert!(String::from_utf8_lossy(&out.stderr).contains("--max-body-bytes"), "{value}");
    }
    let out = blis(&["serve", "--model", MODEL, "--port", "0", "--idle-timeout-ms", "2.5"]);
    assert_refused(&out, "--idle-timeout-ms 2.5", "--idle-timeout-ms");
}

/// Fuzzing findings: an unusable `--prometheus-url` was silently ignored,
/// and an unparsable `--server-url` or an `--api-key` that cannot be a
/// header value failed every request, the run blaming the server (exit 3).
/// Each is refused before anything is sent or written, naming its flag;
/// nothing listens at the server URL, so any request would make it exit 3.
#[test]
fn observe_refuses_urls_and_api_keys_that_cannot_be_sent() {
    let dir = scratch("observe-urls-and-keys");
    let prefix = dir.join("t");
    let prefix = prefix.to_str().unwrap();
    let observe = |extra: &[&str], key_env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_blis"));
        cmd.args(["observe", "--model", "m", "--rate", "1", "--num-requests", "3", "--trace-output", prefix]).args(extra);
        match key_env {
            Some(key) => cmd.env("OPENAI_API_KEY", key),
            None => cmd.env_remove("OPENAI_API_KEY"),
        };
        cmd.output().expect("the blis binary runs")
    };
    let down = "http://127.0.0.1:9";
    for (extra, key_env, needle) in [
        (&["--server-url", down, "--prometheus-url", "notaurl"][..], None, "--prometheus-url notaurl: not a valid URL"),
        (&["--server-url", down, "--prometheus-url", "ftp://h/metrics"], None, "--prometheus-url ftp://h/metrics: scheme `ftp`"),
        (&["--server-url", "http://[::1"], None, "--server-url http://[::1: not a valid URL (invalid IPv6"),
        (&["--server-url", "http://h:99999"], None, "--server-url http://h:99999: not a valid URL (invalid port"),
        (&["--server-url", "localhost:8000"], None, "--server-url localhost:8000: scheme `localhost`"),
        (
            &["--server-url", down, "--api-key", "sk-secret\nX-Injected: 1"],
            None,
            "--api-key: contains the control character '\\n' at byte 9",
        ),
        (&["--server-url", down], Some("sk-secret\r"), "$OPENAI_API_KEY (the default of --api-key): contains the control character '\\r'"),
    ] {
        let out = observe(extra, key_env);
        assert_refused(&out, needle, needle);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("secret"), "the key is echoed: {extra:?}");
        assert!(is_empty_dir(&dir), "{extra:?}: left a file behind");
    }
    // A valid URL that nothing serves still reaches the server check (exit 3).
    let out = observe(&["--server-url", down, "--prometheus-url", "http://127.0.0.1:9/metrics", "--api-key", "sk-ok"], None);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Sends `signal` to a child not yet waited for.
#[cfg(unix)]
fn send_signal(child: &std::process::Child, signal: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

/// Reads from `tcp` into `buf` until `buf` holds `needle` (or the peer closes).
fn read_until(tcp: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) {
    let mut chunk = [0u8; 4096];
    while !buf.windows(needle.len()).any(|w| w == needle) {
        let n = tcp.read(&mut chunk).unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reliability probe: SIGTERM (what Docker, Kubernetes and systemd stop a
/// service with) and SIGHUP ended `blis serve` at once (exit 143/129), every
/// stream cut without its error event or `[DONE]`. Both now shut down as
/// Ctrl-C does: a stream in flight past the grace ends with the shutdown
/// error event, `[DONE]` and a terminated chunked body, and the process
/// exits 0.
#[cfg(unix)]
#[test]
fn serve_shuts_down_gracefully_on_sigterm_and_sighup() {
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        let mut server = Server::start(&["--time-scale", "1", "--shutdown-grace-ms", "50"]);
        let mut tcp = TcpStream::connect(server.addr()).unwrap();
        // A guard against a hang only: the answer (4 000 tokens) would take ~30 s in real time.
        tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let body = r#"{"prompt": "one two three", "max_tokens": 4000, "stream": true}"#;
        write!(
            tcp,
            "POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = Vec::new();
        read_until(&mut tcp, &mut response, b"data: {");
        send_signal(&server.child, signal);
        read_until(&mut tcp, &mut response, b"0\r\n\r\n");
        let response = String::from_utf8_lossy(&response);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("the server is shutting down"), "signal {signal}: {response}");
        assert!(response.contains("data: [DONE]"), "signal {signal}: {response}");
        assert!(response.ends_with("0\r\n\r\n"), "signal {signal}: the chunked body is terminated");
        assert_eq!(server.child.wait().unwrap().code(), Some(0), "signal {signal}: a graceful exit");
    }
}

/// Reliability probe: `blis observe` on SIGTERM lost its requests in flight
/// and never finalised the trace header. SIGTERM and SIGHUP now stop it as
/// Ctrl-C does: no new request is sent, the ones in flight are waited for
/// and recorded, the header says the run was interrupted, and it exits 0.
/// The signal is sent once the run is announced: its handlers are in place
/// by then.
#[cfg(unix)]
#[test]
fn observe_stops_gracefully_on_sigterm_and_sighup() {
    for (signal, name) in [(libc::SIGTERM, "term"), (libc::SIGHUP, "hup")] {
        let dir = scratch(&format!("observe-{name}"));
        let prefix = dir.join("t");
        let server = Server::start(&["--time-scale", "1"]);
        let mut child = Command::new(env!("CARGO_BIN_EXE_blis"))
            .args(["observe", "--server-url", &server.url, "--model", "meta-llama/Llama-3.1-8B-Instruct"])
            .args(["--rate", "2", "--num-requests", "1000", "--output-tokens", "200", "--trace-output", prefix.to_str().unwrap()])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut announced = String::new();
        while !announced.starts_with("blis observe:") {
            announced.clear();
            assert!(std::io::BufRead::read_line(&mut stderr, &mut announced).unwrap() > 0, "observe ended before announcing its run");
        }
        send_signal(&child, signal);
        let mut rest = String::new();
        stderr.read_to_string(&mut rest).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0), "signal {signal}: {rest}");
        assert!(rest.contains("(interrupted)"), "signal {signal}: {rest}");
        let header = std::fs::read_to_string(prefix.with_extension("header.yaml")).unwrap();
        assert!(header.contains("interrupted: true"), "signal {signal}: the header is finalised: {header}");
        let sent: u64 = rest.split("sent ").nth(1).and_then(|s| s.split(' ').next()).and_then(|n| n.parse().ok()).unwrap();
        let rows = std::fs::read_to_string(prefix.with_extension("csv")).unwrap().lines().count() as u64 - 1;
        assert_eq!(rows, sent, "signal {signal}: every request sent is recorded");
    }
}
