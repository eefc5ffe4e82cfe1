//! Fuzzing that stays (issue 27): every parser BLIS exposes to user input
//! gets mutated versions of real inputs (the bundled examples, data files
//! and validation runs) and must never panic.
//!
//! Each target reads a seed corpus; each case picks a seed, applies one to
//! four mutations (bit flips, byte edits, deleted or duplicated ranges,
//! hostile tokens such as `NaN`, `-1`, `1e309`, unbalanced brackets, NUL,
//! splices from another seed) and feeds the result to the parser through
//! the same entry point the CLI uses. Cases come from a seeded PCG stream,
//! so a failure is reproduced by its target, seed and case number, which
//! the failure message gives along with the input saved under
//! `target/fuzz-failures/`.
//!
//! Cases per target: `BLIS_FUZZ_CASES` (default 2000, which keeps the whole
//! harness near 10 s in CI, inputs written to /dev/shm; run `BLIS_FUZZ_CASES=1000000 cargo test
//! --release -p blis --test fuzz -- --nocapture` for the long campaign).
//! `BLIS_FUZZ_SEED` picks another stream, and `BLIS_FUZZ_ONLY` (target
//! names, comma-separated) runs only those, to split a campaign over cores. The exit-code contract of the
//! CLI on the same kinds of input (exit 2, one line of at most 1 KiB, no
//! output file) is checked on a sample of the failing cases by running the
//! binary, and every parse's memory against the budget of `docs/cli.md`
//! (a counting allocator: at most 16× the input plus 128 MiB).

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use blis_engine::rng::SimRng as Pcg64Mcg;
use rand::{RngExt, SeedableRng};

/// The allocator of this test binary: the system's, counting the bytes
/// held and the most held since [`reset_peak`], so every case's memory can
/// be checked against the budget.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counters are
// only arithmetic on the sizes passed.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            PEAK.fetch_max(HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grown = new_size - layout.size();
                PEAK.fetch_max(HELD.fetch_add(grown, Ordering::Relaxed) + grown, Ordering::Relaxed);
            } else {
                HELD.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Starts a new peak at what is held now; returns it.
fn reset_peak() -> usize {
    let held = HELD.load(Ordering::Relaxed);
    PEAK.store(held, Ordering::Relaxed);
    held
}

/// The memory budget of one parse of `input_bytes` (docs/cli.md): YAML
/// costs at most ~12× its size plus ~3 MiB (its node budget), JSON data at
/// most ~6×, streams a line at a time.
fn memory_budget(input_bytes: usize) -> usize {
    16 * input_bytes + (32 << 20)
}

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: impl AsRef<Path>) -> Vec<u8> {
    let path = repo().join(path);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Tokens that break parsers: numbers at and past every limit, YAML and
/// JSON structure, and bytes that are not text.
const HOSTILE: &[&str] = &[
    "-1",
    "0",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "-1e309",
    "1e-320",
    "18446744073709551616",
    "9223372036854775808",
    "4294967296",
    "99999999999999999999999",
    "0.0000001",
    "\"\"",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "- ",
    "\n",
    "\r\n",
    "\t",
    "\0",
    "\u{feff}",
    "&a",
    "*a",
    "!!binary",
    "~",
    "null",
    "true",
    "'",
    "\"",
    "#",
    "|",
    ">",
    "---",
    "...",
    "%YAML 1.1",
    "ü",
    "\u{1F600}",
    "\\u0000",
    "1k",
    "1Mi",
    "1M",
    "30s",
    "-5m",
    "1e6",
    "type",
    "clients",
    "file",
    "/dev/zero",
];

/// One mutation of `input`, drawing from `other` for splices.
fn mutate(input: &mut Vec<u8>, other: &[u8], rng: &mut Pcg64Mcg) {
    let at = |rng: &mut Pcg64Mcg, len: usize| if len == 0 { 0 } else { rng.random_range(0..=len) };
    match rng.random_range(0..8) {
        0 if !input.is_empty() => {
            let i = rng.random_range(0..input.len());
            input[i] ^= 1 << rng.random_range(0..8);
        }
        1 if !input.is_empty() => {
            let i = rng.random_range(0..input.len());
            input[i] = rng.random();
        }
        2 if !input.is_empty() => {
            let start = rng.random_range(0..input.len());
            let end = (start + rng.random_range(1..64)).min(input.len());
            input.drain(start..end);
        }
        3 if !input.is_empty() => {
            let start = rng.random_range(0..input.len());
            let end = (start + rng.random_range(1..256)).min(input.len());
            let chunk = input[start..end].to_vec();
            let times = if rng.random_range(0..8) == 0 { rng.random_range(2..64) } else { 1 };
            let i = at(rng, input.len());
            input.splice(i..i, chunk.iter().copied().cycle().take(chunk.len() * times));
        }
        4 if !other.is_empty() => {
            let start = rng.random_range(0..other.len());
            let end = (start + rng.random_range(1..128)).min(other.len());
            let i = at(rng, input.len());
            input.splice(i..i, other[start..end].iter().copied());
        }
        5 | 6 => {
            // Replace a number or word with a hostile token.
            let token = HOSTILE[rng.random_range(0..HOSTILE.len())].as_bytes();
            let i = at(rng, input.len());
            let end = input[i..].iter().position(|b| !b.is_ascii_alphanumeric() && *b != b'.').map_or(input.len(), |n| i + n);
            input.splice(i..end, token.iter().copied());
        }
        _ => {
            let token = HOSTILE[rng.random_range(0..HOSTILE.len())].as_bytes();
            let i = at(rng, input.len());
            input.splice(i..i, token.iter().copied());
        }
    }
}

/// What a target's directory holds besides the mutated input.
enum Fixture {
    /// Nothing: the parser reads the one file.
    None,
    /// A repository folder copied into a subfolder, which the seeds refer to
    /// (a spec's ServeGen data); the parser reads only the mutated file.
    Referenced { from: &'static str, into: &'static str },
    /// A repository folder copied in whole, which the parser reads whole (an
    /// inference-perf run). Seed `k` replaces `files[k]` (all of them
    /// [`Target::file`] when empty), which is restored after each case, and
    /// the folder's size counts as input in the memory budget.
    Directory { from: &'static str, files: &'static [&'static str] },
}

/// Parses the input written at a path (in a directory); `Err` is a refusal.
type Parse = Box<dyn Fn(&Path, &Path) -> Result<(), String> + Send + Sync>;

/// A parser under test: its seeds and how to feed it one input.
struct Target {
    name: &'static str,
    /// File name the input is written under in the target's directory.
    file: &'static str,
    seeds: Vec<Vec<u8>>,
    /// What the target reads besides the mutated file; see [`Fixture`].
    fixture: Fixture,
    /// Parses the input written at `path` (in `dir`); `Err` is a refusal.
    parse: Parse,
    /// The `blis` arguments that read the same file, for the exit-code contract.
    cli: Option<fn(&Path) -> Vec<String>>,
}

fn model_args(path: &Path, flag: &str) -> Vec<String> {
    ["run", "--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "5", flag, path.to_str().unwrap()].map(String::from).to_vec()
}

/// Pulls up to 64 requests from a workload input, so that lazily parsed
/// rows (traces) are parsed too.
fn open_workload(input: blis_workload::WorkloadInput) -> Result<(), String> {
    let mut opened = blis_workload::open(&input, &blis_workload::OpenOptions::default()).map_err(|e| e.to_string())?;
    for _ in 0..64 {
        if opened.stream.next_request().is_none() {
            break;
        }
    }
    opened.stream.take_error().map_or(Ok(()), |e| Err(e.to_string()))
}

fn targets(scratch: &Path) -> Vec<Target> {
    let examples = |names: &[&str]| names.iter().map(|n| read(format!("examples/{n}"))).collect::<Vec<_>>();
    let experiment = "validation/vllm-h100/20260217-155451-llama-2-7b-tp1-codegen";
    // A trace v2 to start from: the CLI writes one.
    let trace_dir = scratch.join("trace-seed");
    std::fs::create_dir_all(&trace_dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_blis"))
        .args(["workload", "generate", "--spec", repo().join("examples/multimodal.yaml").to_str().unwrap(), "--num-requests", "40"])
        .args(["--output", trace_dir.join("t.csv").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace_csv = std::fs::read(trace_dir.join("t.csv")).unwrap();
    let trace_header = std::fs::read(trace_dir.join("t.header.yaml")).unwrap();
    vec![
        Target {
            name: "workload spec",
            file: "spec.yaml",
            seeds: examples(&["language.yaml", "multimodal.yaml", "reasoning.yaml", "servegen-language.yaml"]),
            fixture: Fixture::Referenced { from: "examples/servegen", into: "servegen" },
            parse: Box::new(|_, p| open_workload(blis_workload::WorkloadInput::File(p.to_path_buf()))),
            cli: Some(|p| model_args(p, "--workload-spec")),
        },
        Target {
            name: "inference-perf config",
            file: "ip.yaml",
            seeds: examples(&["inference-perf-synthetic.yaml", "inference-perf-shared-prefix.yaml"]),
            fixture: Fixture::None,
            parse: Box::new(|_, p| open_workload(blis_workload::WorkloadInput::File(p.to_path_buf()))),
            cli: Some(|p| model_args(p, "--workload-spec")),
        },
        Target {
            name: "policy YAML",
            file: "policy.yaml",
            seeds: [examples(&["policies.yaml"]), std::fs::read_dir(repo().join("examples/autoscaling"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .map(|p| std::fs::read(p).unwrap())
                .collect()]
            .concat(),
            fixture: Fixture::None,
            parse: Box::new(|_, p| {
                let yaml = format!("model: meta-llama/llama-3.1-8b-instruct\nnum-instances: 2\npolicy-config: {}\n", p.display());
                resolve(&yaml)
            }),
            cli: Some(|p| model_args(p, "--policy-config")),
        },
        Target {
            name: "run config",
            file: "config.yaml",
            seeds: vec![
                b"model: meta-llama/llama-3.1-8b-instruct\nrate: 10\nnum-requests: 100\nmax-num-seqs: 128\nmax-num-batched-tokens: 2k\nprompt-tokens: 512\noutput-tokens: 256\nseed: 7\n".to_vec(),
                // Billion laughs: aliases nine deep, 9^9 strings if expanded.
                (b"a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n".iter().copied())
                    .chain(('b'..='i').flat_map(|c| {
                        let prev = (c as u8 - 1) as char;
                        format!("{c}: &{c} [{}]\n", vec![format!("*{prev}"); 9].join(",")).into_bytes()
                    }))
                    .collect(),
                b"model: Qwen/Qwen3-14B\nhardware: A100-80GB\ntensor-parallel-size: 2\nnum-instances: 4\nrouting-policy: weighted\nrouting-scorers: prefix-affinity:4,queue-depth:3\nautoscale-policy: threshold\nmax-instances: 8\nprovisioning-delay: uniform:2m,5m\n".to_vec(),
            ],
            fixture: Fixture::None,
            parse: Box::new(|_, p| {
                let values = blis_scenario::knobs::KnobValues::load(p).map_err(|e| e.to_string())?;
                blis_scenario::Scenario::from_values(&values, Vec::new()).resolve().map(drop).map_err(|e| e.to_string())
            }),
            cli: Some(|p| ["run", "--config", p.to_str().unwrap(), "--num-requests", "5"].map(String::from).to_vec()),
        },
        Target {
            name: "HF config.json",
            file: "config.json",
            seeds: ["data/models/meta-llama/Llama-3.1-8B-Instruct.json", "data/models/Qwen/Qwen3-30B-A3B.json", "data/models/deepseek-ai/DeepSeek-V2-Lite.json"]
                .iter()
                .map(read)
                .collect(),
            fixture: Fixture::None,
            parse: text_parser(|t| blis_physics::model::ModelConfig::from_hf_json(t).map(drop).map_err(|e| e.to_string())),
            cli: Some(|p| model_args(p, "--model-config")),
        },
        Target {
            name: "GPU spec",
            file: "gpu.json",
            seeds: ["data/hardware/H100.json", "data/hardware/A100-80GB.json"].iter().map(read).collect(),
            fixture: Fixture::None,
            parse: text_parser(|t| blis_physics::hardware::GpuSpec::from_json(t).map(drop).map_err(|e| e.to_string())),
            cli: Some(|p| model_args(p, "--hardware-config")),
        },
        Target {
            name: "coefficients",
            file: "coefficients.yaml",
            seeds: ["data/coefficients/trained-physics-h100.yaml", "data/coefficients/physics-normalized-h100.yaml"].iter().map(read).collect(),
            fixture: Fixture::None,
            parse: Box::new(|_, p| blis_physics::coefficients::CoefficientSet::load(p).map(drop).map_err(|e| e.to_string())),
            cli: Some(|p| model_args(p, "--coefficients")),
        },
        Target {
            name: "trace v2 CSV",
            file: "t.csv",
            seeds: vec![trace_csv],
            fixture: Fixture::None,
            parse: Box::new({
                let header = trace_header.clone();
                move |dir, p| {
                    std::fs::write(dir.join("t.header.yaml"), &header).map_err(|e| e.to_string())?;
                    open_workload(blis_workload::WorkloadInput::Trace(p.to_path_buf()))
                }
            }),
            cli: Some(|p| model_args(p, "--trace")),
        },
        Target {
            name: "trace v2 header",
            file: "t.header.yaml",
            seeds: vec![trace_header],
            fixture: Fixture::None,
            parse: Box::new(|_, p| blis_workload::trace_v2::header::TraceHeader::load(p).map(drop).map_err(|e| e.to_string())),
            cli: None,
        },
        Target {
            name: "Mooncake JSONL",
            file: "m.jsonl",
            seeds: examples(&["mooncake-sample.jsonl"]),
            fixture: Fixture::None,
            parse: Box::new(|_, p| open_workload(blis_workload::WorkloadInput::Trace(p.to_path_buf()))),
            cli: Some(|p| model_args(p, "--trace")),
        },
        Target {
            name: "inference-perf directory",
            file: "results/config.yaml",
            seeds: vec![read(format!("{experiment}/results/config.yaml")), read(format!("{experiment}/server-facts.yaml")), read(format!("{experiment}/profile.yaml"))],
            fixture: Fixture::Directory {
                from: "validation/vllm-h100/20260217-155451-llama-2-7b-tp1-codegen",
                files: &["results/config.yaml", "server-facts.yaml", "profile.yaml"],
            },
            parse: Box::new(move |dir, _| {
                // The mutated text replaces one of the run's files (seed order).
                blis_calibrate::experiment::Experiment::load(dir).map(drop).map_err(|e| e.to_string())
            }),
            cli: Some(|p| ["validate", p.parent().unwrap().parent().unwrap().to_str().unwrap()].map(String::from).to_vec()),
        },
        Target {
            name: "ServeGen directory",
            file: "chunk-0-dataset.json",
            seeds: vec![read("examples/servegen/language-mini/chunk-0-dataset.json")],
            fixture: Fixture::Directory { from: "examples/servegen/language-mini", files: &[] },
            parse: Box::new(|dir, _| {
                blis_workload::servegen::convert(dir, dir, &blis_workload::servegen::ServeGenOptions::default()).map(drop).map_err(|e| e.to_string())
            }),
            cli: None,
        },
        Target {
            name: "SSE stream",
            file: "stream.txt",
            seeds: vec![
                b"data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"a\",\"index\":0}]}\n\ndata: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"b\",\"index\":0,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n".to_vec(),
                b": keep-alive\r\nevent: message\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\nid: 7\nretry: 10\ndata: [DONE]\n\n".to_vec(),
            ],
            fixture: Fixture::None,
            parse: Box::new(|_, p| {
                let bytes = std::fs::read(p).map_err(|e| e.to_string())?;
                let mut parser = blis_net::sse::SseParser::new();
                let mut events = Vec::new();
                // Fed in uneven chunks, as a network delivers it.
                for chunk in bytes.chunks(7) {
                    parser.feed(chunk, &mut events);
                }
                parser.finish(&mut events);
                Ok(())
            }),
            cli: None,
        },
        Target {
            name: "OpenAI request body",
            file: "body.json",
            seeds: vec![
                br#"{"model":"m","prompt":[1,2,3,4],"max_tokens":16,"stream":true,"ignore_eos":true,"stream_options":{"include_usage":true}}"#.to_vec(),
                br#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello there"}]}],"max_completion_tokens":8,"temperature":0.5,"n":1}"#.to_vec(),
                br#"{"model":"m","prompt":"once upon a time","max_tokens":4,"min_tokens":2,"stream":false}"#.to_vec(),
            ],
            fixture: Fixture::None,
            parse: Box::new(|_, p| {
                use blis_net::serve::openai::{Api, GenerationRequest};
                let bytes = std::fs::read(p).map_err(|e| e.to_string())?;
                let body: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
                for api in [Api::Completions, Api::Chat] {
                    let _ = GenerationRequest::parse(api, &body, "m");
                }
                Ok(())
            }),
            cli: None,
        },
    ]
}

/// A target whose parser takes the input as text (not UTF-8 is a refusal).
fn text_parser(parse: fn(&str) -> Result<(), String>) -> Parse {
    Box::new(move |_, p| parse(&std::fs::read_to_string(p).map_err(|e| e.to_string())?))
}

/// Resolves a scenario from a `--config` text.
fn resolve(yaml: &str) -> Result<(), String> {
    let raw = blis_data::yaml::from_str(yaml).map_err(|e| e.to_string())?;
    let values = blis_scenario::knobs::KnobValues::from_yaml(raw, "--config fuzz.yaml").map_err(|e| e.to_string())?;
    blis_scenario::Scenario::from_values(&values, Vec::new()).resolve().map(drop).map_err(|e| e.to_string())
}

/// Outcome counts of one target's campaign.
#[derive(Default)]
struct Tally {
    accepted: u64,
    refused: u64,
    panics: Vec<String>,
    /// Cases whose parse held more than [`memory_budget`] beyond what was held before.
    over_budget: Vec<String>,
    /// The most memory one parse held beyond what was held before it.
    peak_extra_bytes: usize,
    /// A few refused inputs, for the CLI contract check.
    refused_samples: Vec<Vec<u8>>,
}

/// Copies `from` (a directory) to `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest)
        } else {
            std::fs::copy(entry.path(), dest).map(drop).unwrap()
        }
    }
}

/// The directory a target's inputs are written in, with what its seeds
/// reference (the ServeGen data, a whole inference-perf run).
fn workspace(scratch: &Path, t: &Target) -> PathBuf {
    let dir = scratch.join(t.name.replace(' ', "-"));
    match t.fixture {
        Fixture::None => std::fs::create_dir_all(&dir).unwrap(),
        Fixture::Referenced { from, into } => copy_dir(&repo().join(from), &dir.join(into)),
        Fixture::Directory { from, .. } => copy_dir(&repo().join(from), &dir),
    }
    dir
}

fn campaign(t: &Target, dir: &Path, cases: u64, seed: u64) -> Tally {
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ blis_engine::rng::mix64(t.name.len() as u64 * 0x9e37));
    let mut tally = Tally::default();
    let (files, dir_bytes) = match t.fixture {
        Fixture::Directory { files, .. } if !files.is_empty() => (files.to_vec(), dir_size(dir)),
        Fixture::Directory { .. } => (vec![t.file; t.seeds.len()], dir_size(dir)),
        _ => (vec![t.file; t.seeds.len()], 0),
    };
    for case in 0..cases {
        let k = rng.random_range(0..t.seeds.len());
        let mut input = t.seeds[k].clone();
        let other = &t.seeds[rng.random_range(0..t.seeds.len())];
        for _ in 0..rng.random_range(1..=4) {
            mutate(&mut input, other, &mut rng);
        }
        let path = dir.join(files[k]);
        std::fs::write(&path, &input).unwrap();
        let before = reset_peak();
        let outcome = catch_unwind(AssertUnwindSafe(|| (t.parse)(dir, &path)));
        let extra = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        tally.peak_extra_bytes = tally.peak_extra_bytes.max(extra);
        if extra > memory_budget(input.len() + dir_bytes) {
            let saved = save_failure(t, seed, case, &input);
            tally.over_budget.push(format!(
                "{}: seed {seed} case {case}: {extra} bytes for a {}-byte input ({saved})",
                t.name,
                input.len()
            ));
        }
        match outcome {
            Ok(Ok(())) => tally.accepted += 1,
            Ok(Err(_)) => {
                tally.refused += 1;
                if tally.refused_samples.len() < 3 && rng.random_range(0..8) == 0 {
                    tally.refused_samples.push(input.clone());
                }
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let saved = save_failure(t, seed, case, &input);
                tally.panics.push(format!("{}: seed {seed} case {case}: {message} (input: {saved})", t.name));
            }
        }
        // A directory read whole gets its original file back for the next case.
        if let Fixture::Directory { .. } = t.fixture {
            std::fs::write(&path, &t.seeds[k]).unwrap();
        }
    }
    tally
}

/// Keeps a failing input under `target/fuzz-failures/`; returns where.
fn save_failure(t: &Target, seed: u64, case: u64, input: &[u8]) -> String {
    let saved = repo().join("target/fuzz-failures").join(format!("{}-{seed}-{case}", t.name.replace(' ', "-")));
    let _ = std::fs::create_dir_all(saved.parent().unwrap());
    let _ = std::fs::write(&saved, input);
    saved.display().to_string()
}

/// Bytes of the files under `dir`.
fn dir_size(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| if e.file_type().unwrap().is_dir() { dir_size(&e.path()) } else { e.metadata().unwrap().len() as usize })
        .sum()
}

/// The CLI contract on a refused input: exit 2, one line of at most 1 KiB
/// on stderr, no output file, no panic.
fn check_cli(t: &Target, dir: &Path, input: &[u8]) {
    let Some(args) = t.cli else { return };
    let path = dir.join(t.file);
    std::fs::write(&path, input).unwrap();
    let out_dir = dir.join("out");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut full = args(&path);
    if full[0] == "run" {
        full.extend(["--output".into(), out_dir.join("r.json").to_str().unwrap().into()]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_blis")).args(&full).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    // A refusal by the library may still be a valid run for the CLI (the
    // harness's entry point checks more or less than the command does);
    // what must hold is the contract whenever the CLI refuses.
    if code != Some(0) {
        assert_eq!(code, Some(2), "{}: {full:?}: {err}", t.name);
        assert_eq!(err.trim_end().lines().count(), 1, "{}: one line: {err}", t.name);
        assert!(err.len() <= 1024, "{}: {} bytes: {err}", t.name, err.len());
        assert!(std::fs::read_dir(&out_dir).unwrap().next().is_none(), "{}: an output file was left", t.name);
    }
    assert!(!err.contains("panicked"), "{}: {err}", t.name);
    if let Some(seed) = t.seeds.first() {
        std::fs::write(&path, seed).unwrap();
    }
}

#[test]
fn no_parser_panics_on_mutated_input() {
    let cases: u64 = std::env::var("BLIS_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let seed: u64 = std::env::var("BLIS_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(27);
    // Memory-backed where there is one: each case writes its input to a file.
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let scratch = base.join(format!("blis-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let only: Option<Vec<String>> = std::env::var("BLIS_FUZZ_ONLY").ok().map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let mut panics = Vec::new();
    for t in targets(&scratch).into_iter().filter(|t| only.as_ref().is_none_or(|o| o.iter().any(|n| n == t.name))) {
        let dir = workspace(&scratch, &t);
        let started = std::time::Instant::now();
        // Panics are caught and counted; keep the default hook from printing each.
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let tally = campaign(&t, &dir, cases, seed);
        std::panic::set_hook(default_hook);
        println!(
            "{:<26} {cases:>9} inputs: {:>9} accepted, {:>9} refused, {} panics, {} over the memory budget, peak {:.1} MiB, {:.1} s",
            t.name,
            tally.accepted,
            tally.refused,
            tally.panics.len(),
            tally.over_budget.len(),
            tally.peak_extra_bytes as f64 / (1 << 20) as f64,
            started.elapsed().as_secs_f64()
        );
        for input in &tally.refused_samples {
            check_cli(&t, &dir, input);
        }
        panics.extend(tally.panics);
        panics.extend(tally.over_budget);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(panics.is_empty(), "{} panics:\n{}", panics.len(), panics.join("\n"));
}
