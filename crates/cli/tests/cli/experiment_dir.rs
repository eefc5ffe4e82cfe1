//! A small synthetic experiment directory in the layout of `validation/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("blis-cli-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn blis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis")).args(args).output().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A lifecycle report of `count` successes with the given E2E and TTFT means (seconds).
pub fn stage_json(e2e_s: f64, ttft_s: f64, count: u64) -> String {
    format!(
        r#"{{"load_summary": {{"count": {count}}},
 "successes": {{"count": {count},
   "latency": {{"request_latency": {{"mean": {e2e_s}, "median": {e2e_s}, "p90": {p90}, "p99": {p99}}},
                "time_to_first_token": {{"mean": {ttft_s}, "median": {ttft_s}, "p90": {ttft_s}, "p99": {ttft_s}}},
                "inter_token_latency": {{"mean": 0.004, "median": 0.00003, "p90": 0.009, "p99": 0.01}},
                "time_per_output_token": {{"mean": 0.004, "median": 0.004, "p90": 0.005, "p99": 0.005}}}},
   "throughput": {{"requests_per_sec": 1.9}},
   "prompt_len": {{"mean": 63.0}}}},
 "failures": {{"count": 0, "request_latency": null, "prompt_len": null}}}}"#,
        p90 = e2e_s * 1.1,
        p99 = e2e_s * 1.2
    )
}

/// Rewrites the `server-facts.yaml` of the experiment in `dir` as `edit`
/// makes its text.
pub fn edit_server_facts(dir: &Path, edit: impl FnOnce(&str) -> String) {
    let facts = dir.join("server-facts.yaml");
    let text = std::fs::read_to_string(&facts).unwrap();
    std::fs::write(&facts, edit(&text)).unwrap();
}

/// Writes a two-stage Llama-2-7B experiment of 10 + 10 requests (8 output
/// tokens each) under `root/name`; with `csv`, a requests.csv too.
pub fn write_experiment(root: &Path, name: &str, csv: bool) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("results")).unwrap();
    std::fs::write(
        dir.join("exp-config.yaml"),
        "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\nmax_model_len: 4096\nmax_num_batched_tokens: 2048\nmax_num_seqs: 128\n",
    )
    .unwrap();
    std::fs::write(dir.join("server-facts.yaml"), "hardware: H100-SXM-80GB\nnum_gpu_blocks: 7462\nblock_size: 16\nstatus: active\n")
        .unwrap();
    std::fs::write(
        dir.join("results/config.yaml"),
        "api:\n  type: completion\n  streaming: true\ndata:\n  type: shared_prefix\n  shared_prefix:\n    num_groups: 2\n    num_prompts_per_group: 2\n    \
         system_prompt_len: 20\n    question_len: 40\n    output_len: 8\nload:\n  type: constant\n  interval: 1.0\n  stages:\n  - rate: 2.0\n    duration: 5\n  \
         - rate: 4.0\n    duration: 2.5\nserver:\n  ignore_eos: true\n",
    )
    .unwrap();
    std::fs::write(dir.join("results/stage_0_lifecycle_metrics.json"), stage_json(0.08, 0.025, 10)).unwrap();
    std::fs::write(dir.join("results/stage_1_lifecycle_metrics.json"), stage_json(0.09, 0.027, 10)).unwrap();
    if csv {
        let mut text = String::from("index,stage,arrival_time_us,input_tokens,output_tokens_retokenized,has_error,e2e_ms,ttft_ms\n");
        for i in 0..20u64 {
            let stage = i / 10;
            text += &format!(
                "{i},{stage},{},{},8,0,{},{}\n",
                i * 450_000 + stage * 2_000_000,
                60 + i % 4,
                80.0 + i as f64,
                25.0 + (i % 3) as f64
            );
        }
        std::fs::write(dir.join("requests.csv"), text).unwrap();
    }
    dir
}
