//! End-to-end tests of the `blis` binary, one module per behaviour, built
//! into one test binary.

mod architecture;
mod autoscaling;
mod bad_input;
mod calibrate;
mod cluster;
mod experiment_dir;
mod fit;
mod kernels;
mod memory;
mod plan;
mod run;
mod serve_observe;
mod sweep;
mod validate;
mod workload;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// Runs `blis` with `args`.
pub fn blis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis")).args(args).output().expect("the blis binary runs")
}

/// A `blis serve` child process of Llama-3.1-8B (seed 5) on an ephemeral
/// port; killed on drop.
pub struct Server {
    /// The process.
    pub child: Child,
    /// The first stderr line: the start-up banner.
    pub banner: String,
    /// The base URL the banner announces (`http://HOST:PORT`).
    pub url: String,
}

impl Server {
    /// Starts `blis serve` with `extra` flags and waits for its banner.
    pub fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_blis"))
            .args(["serve", "--model", "meta-llama/llama-3.1-8b-instruct", "--port", "0", "--seed", "5"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("blis serve starts");
        let mut banner = String::new();
        BufReader::new(child.stderr.take().unwrap()).read_line(&mut banner).unwrap();
        let url = banner.split("listening on ").nth(1).unwrap_or_else(|| panic!("no address in {banner:?}")).trim().to_string();
        Server { child, banner, url }
    }

    /// `HOST:PORT`, for a raw TCP connection.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    // Under target/tmp (Cargo's scratch space for integration tests), not the system temp dir.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("blis-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `blis` with `base` then `extra` (a `--format json` run), which
/// must succeed; returns stdout and its JSON.
pub fn json_of(base: &[&str], extra: &[&str]) -> (String, serde_json::Value) {
    let mut args = base.to_vec();
    args.extend_from_slice(extra);
    let out = blis(&args);
    assert!(out.status.success(), "blis failed: {}", stderr(&out));
    let text = stdout(&out);
    let json = serde_json::from_str(&text).expect("stdout is one JSON document");
    (text, json)
}

/// Checks that `out` is a refusal of bad input: exit code 2, one line on
/// stderr (no panic) that contains `needle`; `what` names the case.
pub fn assert_refused(out: &Output, what: &str, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(err.contains(needle), "{what}: {err}");
}

/// Whether `dir` contains no files.
pub fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}
