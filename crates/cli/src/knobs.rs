//! One table defines every knob of `blis run`: its flag, help, heading, type
//! and default. From it come the clap arguments, the `--config` file schema
//! (same names as the flags, unknown keys rejected) and the resolved
//! configuration with the source of every value (precedence: flag > file >
//! default), which the JSON report prints so no default is ever silent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::count::parse_count;
use crate::error::{BadInput, bad_input};

/// Where a resolved value came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A command-line flag.
    Flag,
    /// The `--config` file.
    File,
    /// BLIS's default.
    Default,
    /// Computed from other values (model config, memory formula).
    Derived,
}

/// A resolved value and its source.
#[derive(Clone, Debug, PartialEq)]
pub struct Knob<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

fn pick<T: Clone>(flag: &Option<T>, file: &Option<T>, default: Option<T>) -> Knob<Option<T>> {
    match (flag, file) {
        (Some(v), _) => Knob { value: Some(v.clone()), source: Source::Flag },
        (None, Some(v)) => Knob { value: Some(v.clone()), source: Source::File },
        (None, None) => Knob { value: default, source: Source::Default },
    }
}

/// The JSON rendering of the resolved configuration: knob → {value, source}.
pub type ConfigReport = BTreeMap<String, Value>;

/// Adds one entry to a [`ConfigReport`].
pub fn report_entry<T: Serialize>(report: &mut ConfigReport, name: &str, value: &T, source: Source) {
    report.insert(
        name.to_string(),
        serde_json::json!({ "value": serde_json::to_value(value).unwrap_or(Value::Null), "source": source }),
    );
}

/// How the values of one knob type are read from the command line.
trait KnobValue {
    /// Whole numbers, read by [`parse_count`] on the command line and in files.
    const IS_COUNT: bool = false;
    /// clap's parser for the type.
    fn value_parser() -> clap::builder::ValueParser;
}

macro_rules! plain_knob_value {
    ($($ty:ty),*) => { $( impl KnobValue for $ty { fn value_parser() -> clap::builder::ValueParser { clap::value_parser!($ty).into() } } )* };
}
plain_knob_value!(String, PathBuf, f64, bool);

macro_rules! count_knob_value {
    ($($ty:ty),*) => { $( impl KnobValue for $ty {
        const IS_COUNT: bool = true;
        fn value_parser() -> clap::builder::ValueParser { clap::builder::ValueParser::new(parse_count::<$ty>) }
    } )* };
}
count_knob_value!(u32, u64);

macro_rules! knob_table {
    ($( $(#[$meta:meta])* $name:ident : $ty:ty = $default:expr ),* $(,)?) => {
        /// Every knob of `blis run` as flags (all optional; defaults are applied on resolution).
        #[derive(clap::Args, Debug, Default, Clone)]
        pub struct KnobArgs {
            $( $(#[$meta])* #[arg(value_parser = <$ty as KnobValue>::value_parser())] pub $name: Option<$ty>, )*
        }

        /// Whether the knob whose flag is `flag` takes a whole number.
        fn takes_count(flag: &str) -> bool {
            $( if flag == stringify!($name).replace('_', "-") { return <$ty as KnobValue>::IS_COUNT; } )*
            false
        }

        /// The `--config` file: the same knobs, keyed by flag name.
        #[derive(serde::Deserialize, Debug, Default)]
        #[serde(deny_unknown_fields, rename_all = "kebab-case")]
        pub struct KnobFile {
            $( #[serde(default)] pub $name: Option<$ty>, )*
        }

        /// Knobs after applying flag > file > default.
        #[derive(Clone, Debug)]
        pub struct Knobs {
            $( pub $name: Knob<Option<$ty>>, )*
        }

        impl KnobFile {
            /// Each knob from `self`, else from `fallback`.
            pub fn or(self, fallback: KnobFile) -> KnobFile {
                KnobFile { $( $name: self.$name.or(fallback.$name), )* }
            }

            /// Relative paths made relative to `dir` (the file's folder).
            fn rebased(self, dir: &Path) -> KnobFile {
                KnobFile { $( $name: self.$name.map(|v| v.rebased(dir)), )* }
            }

            /// The flag names of the knobs this file sets.
            pub fn keys(&self) -> Vec<String> {
                let mut keys = Vec::new();
                $( if self.$name.is_some() { keys.push(stringify!($name).replace('_', "-")); } )*
                keys
            }
        }

        impl Knobs {
            /// Resolves flags over file values over defaults.
            pub fn resolve(flags: &KnobArgs, file: &KnobFile) -> Knobs {
                Knobs { $( $name: pick(&flags.$name, &file.$name, $default), )* }
            }

            /// Every knob with a value, for the report.
            pub fn report(&self) -> ConfigReport {
                let mut r = ConfigReport::new();
                $( if let Some(v) = &self.$name.value {
                    report_entry(&mut r, &stringify!($name).replace('_', "-"), v, self.$name.source);
                } )*
                r
            }
        }
    };
}

knob_table! {
    // ── Model and hardware ───────────────────────────────────────────────
    /// Model to simulate: a bundled HuggingFace id (case-insensitive; `blis models` lists them),
    /// or any name when --model-config is given.
    #[arg(long, value_name = "ID", help_heading = "Model and hardware")]
    model: String = None,
    /// Path to a HuggingFace config.json for a model that is not bundled.
    #[arg(long, value_name = "PATH", help_heading = "Model and hardware")]
    model_config: PathBuf = None,
    /// GPU type: H100, H100-NVL, A100-80GB, L40S, H200 (or as nvidia-smi names them). [default: H100]
    #[arg(long, value_name = "GPU", help_heading = "Model and hardware")]
    hardware: String = Some("H100".into()),
    /// Path to a GPU spec JSON (same fields as data/hardware/*.json) instead of a bundled GPU.
    #[arg(long, value_name = "PATH", help_heading = "Model and hardware")]
    hardware_config: PathBuf = None,
    /// Tensor-parallel degree: GPUs per instance. [default: 1]
    #[arg(long, value_name = "N", visible_alias = "tensor-parallel-size", help_heading = "Model and hardware")]
    tp: u32 = Some(1),

    // ── Server (vLLM flags) ──────────────────────────────────────────────
    /// Maximum requests in the running batch (vLLM --max-num-seqs). [default: 256]
    #[arg(long, value_name = "N", help_heading = "Server (vLLM flags)")]
    max_num_seqs: u32 = Some(256),
    /// Token budget per scheduler step (vLLM --max-num-batched-tokens). [default: 8192]
    #[arg(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)")]
    max_num_batched_tokens: u32 = Some(8192),
    /// Maximum prompt + output tokens per request; at most what the model's config.json allows
    /// (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lifts that, as in vLLM). [default: what its config.json allows]
    #[arg(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)")]
    max_model_len: u32 = None,
    /// Tokens per KV block: 1, 8, 16, 32, 64, 128 or 256, as in vLLM. [default: 16]
    #[arg(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)")]
    block_size: u32 = Some(16),
    /// GPU KV blocks (vLLM --num-gpu-blocks-override). [default: derived from GPU memory, see docs]
    #[arg(long, value_name = "N", visible_alias = "num-gpu-blocks-override", help_heading = "Server (vLLM flags)")]
    num_gpu_blocks: u64 = None,
    /// Fraction of GPU memory vLLM may use, for the derived block count. [default: 0.9]
    #[arg(long, value_name = "FRACTION", allow_negative_numbers = true, help_heading = "Server (vLLM flags)")]
    gpu_memory_utilization: f64 = Some(0.9),
    /// Split long prompts across steps (--no-enable-chunked-prefill turns it off, as in vLLM). [default: true]
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)")]
    enable_chunked_prefill: bool = Some(true),
    /// Reuse KV blocks of shared prompt prefixes (--no-enable-prefix-caching turns it off). [default: true]
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)")]
    enable_prefix_caching: bool = Some(true),
    /// Schedule the next step while the current one runs (vLLM --async-scheduling):
    /// requests arriving during a step join the step after next. [default: false]
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)")]
    async_scheduling: bool = Some(false),
    /// Cap on one request's prefill tokens per step; 0 = off. [default: 0]
    #[arg(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)")]
    long_prefill_token_threshold: u32 = Some(0),

    // ── Latency model ──────────────────────────────────────────────────
    /// Step-time model: roofline, blackbox, trained-physics, unified-5 or physics-normalized.
    /// [default: the model of the bundled default coefficient set (trained-physics)]
    #[arg(long, value_name = "NAME", help_heading = "Latency model")]
    latency_model: String = None,
    /// Coefficient file (YAML or JSON: latency_model, alpha, beta, provenance).
    /// [default: the bundled set for --latency-model, or the bundled default set]
    #[arg(long, value_name = "FILE", help_heading = "Latency model")]
    coefficients: PathBuf = None,
    /// Replace the set's α: comma-separated, in the model's order (blackbox: queueing µs, µs per prompt token, µs per output token).
    #[arg(long, value_name = "A0,A1,...", allow_hyphen_values = true, help_heading = "Latency model")]
    alpha_coeffs: String = None,
    /// Replace the set's β: comma-separated, in the model's order (blackbox: step µs, µs per prefill token, µs per decode token).
    #[arg(long, value_name = "B0,B1,...", allow_hyphen_values = true, help_heading = "Latency model")]
    beta_coeffs: String = None,

    // ── Workload ─────────────────────────────────────────────────────────
    /// Mean arrival rate, requests per second. [default: 10]
    #[arg(long, value_name = "REQ_PER_S", allow_negative_numbers = true, help_heading = "Workload")]
    rate: f64 = Some(10.0),
    /// Arrival process: poisson or constant. [default: poisson]
    #[arg(long, value_name = "KIND", help_heading = "Workload")]
    arrival: String = Some("poisson".into()),
    /// Number of requests. [default: 1000]
    #[arg(long, value_name = "N", help_heading = "Workload")]
    num_requests: u64 = Some(1000),
    /// Most requests in flight at once, as a client with N connections (vllm bench serve
    /// --max-concurrency): a request due while all are busy is sent when one ends, and its
    /// latency counts from then. [default: unlimited; `blis observe`: 256]
    #[arg(long, value_name = "N", help_heading = "Workload")]
    max_concurrency: u32 = None,
    /// Mean prompt length in tokens (excluding any shared prefix). [default: 512]
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload")]
    prompt_tokens: f64 = Some(512.0),
    /// Standard deviation of the prompt length; 0 = fixed. [default: 0]
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload")]
    prompt_tokens_stdev: f64 = Some(0.0),
    /// Smallest prompt length drawn. [default: 1]
    #[arg(long, value_name = "TOKENS", help_heading = "Workload")]
    prompt_tokens_min: u32 = Some(1),
    /// Largest prompt length drawn. [default: unbounded]
    #[arg(long, value_name = "TOKENS", help_heading = "Workload")]
    prompt_tokens_max: u32 = Some(u32::MAX),
    /// Mean output length in tokens (generated in full, as with ignore_eos). [default: 256]
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload")]
    output_tokens: f64 = Some(256.0),
    /// Standard deviation of the output length; 0 = fixed. [default: 0]
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload")]
    output_tokens_stdev: f64 = Some(0.0),
    /// Smallest output length drawn. [default: 1]
    #[arg(long, value_name = "TOKENS", help_heading = "Workload")]
    output_tokens_min: u32 = Some(1),
    /// Largest output length drawn. [default: unbounded]
    #[arg(long, value_name = "TOKENS", help_heading = "Workload")]
    output_tokens_max: u32 = Some(u32::MAX),
    /// Length of a shared prompt prefix prepended to every prompt; 0 = none. [default: 0]
    #[arg(long, value_name = "TOKENS", help_heading = "Workload")]
    prefix_tokens: u32 = Some(0),
    /// Number of distinct shared prefixes; each request draws one uniformly. [default: 1]
    #[arg(long, value_name = "N", help_heading = "Workload")]
    prefix_groups: u32 = Some(1),
    /// Run a workload spec file (YAML; see docs/workloads.md) instead of the flags above;
    /// --rate, --num-requests and --seed still override the spec's values.
    #[arg(long, value_name = "PATH", help_heading = "Workload")]
    workload_spec: PathBuf = None,
    /// Run a built-in workload: preset:chatbot|contentgen|summarization|multidoc or
    /// scenario:bursty-traffic|diurnal-cycle|unfair-tenants|prefix-heavy|mixed-slo (`blis workload list`).
    #[arg(long, value_name = "NAME", help_heading = "Workload")]
    workload: String = None,
    /// Replay a trace: a trace v2 CSV (header in NAME.header.yaml beside it) or a Mooncake JSONL file;
    /// --num-requests caps the requests replayed.
    #[arg(long, value_name = "PATH", help_heading = "Workload")]
    trace: PathBuf = None,

    /// Assign SLO classes by weight, e.g. `realtime:0.2,interactive:0.5,batch:0.3` (seeded).
    #[arg(long, value_name = "NAME:WEIGHT,...", help_heading = "Workload")]
    slo_class_mix: String = None,
    /// Assign tenants by weight, e.g. `alice:1,bob:3` (seeded).
    #[arg(long, value_name = "NAME:WEIGHT,...", help_heading = "Workload")]
    tenant_mix: String = None,

    // ── Cluster ──────────────────────────────────────────────────────────
    /// Identical instances behind the control plane. [default: 1]
    #[arg(long, value_name = "N", help_heading = "Cluster")]
    num_instances: u32 = Some(1),
    /// Every policy and its parameters in one YAML file (see examples/policies.yaml); the flags below override it.
    #[arg(long, value_name = "PATH", help_heading = "Cluster")]
    policy_config: PathBuf = None,
    /// Admission: always-admit, token-bucket, rate-limit, tenant-quota, slo-gated, predictive-slo, reject-all. [default: always-admit]
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    admission_policy: String = None,
    /// Priority: constant, slo-class, tenant-priority, deadline-aware, inverted-slo. [default: constant]
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    priority_policy: String = None,
    /// Routing: round-robin, least-loaded, weighted, prefix-affinity, always-busiest. [default: round-robin]
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    routing_policy: String = None,
    /// Scorers of weighted routing, e.g. `prefix-affinity:4,queue-depth:3` (implies --routing-policy weighted).
    #[arg(long, value_name = "SCORER:WEIGHT,...", help_heading = "Cluster")]
    routing_scorers: String = None,
    /// Instance scheduler: fcfs, priority-fcfs, sjf, reverse-priority. [default: fcfs]
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    scheduler: String = None,
    /// Preemption victim: tail or lowest-priority. [default: lowest-priority with priority-fcfs, else tail]
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    preemption: String = None,
    /// Arrival → admission decision latency, microseconds. [default: 0]
    #[arg(long, value_name = "MICROS", help_heading = "Cluster")]
    admission_latency: u64 = Some(0),
    /// Routing decision → delivery latency, microseconds. [default: 0]
    #[arg(long, value_name = "MICROS", help_heading = "Cluster")]
    routing_latency: u64 = Some(0),
    /// Snapshot staleness per field, e.g. `kv-utilization=periodic:100ms,queue-depth=on-demand`
    /// (fields queue-depth, batch-size, kv-utilization; modes immediate, on-demand, periodic:<N>ms).
    #[arg(long, value_name = "FIELD=MODE,...", help_heading = "Cluster")]
    snapshot_refresh: String = None,
    /// SLO targets in ms per class, e.g. `realtime.ttft_ms=200,realtime.itl_ms=50,batch.e2e_ms=60000`.
    #[arg(long, value_name = "CLASS.METRIC=MS,...", help_heading = "Cluster")]
    slo_targets: String = None,
    /// Fitness weights, e.g. `throughput:0.5,ttft_p99:0.3,goodput:0.2`.
    #[arg(long, value_name = "METRIC:WEIGHT,...", help_heading = "Cluster")]
    fitness_weights: String = None,
    /// Decision tracing: none or decisions (one JSON line per admission and routing decision). [default: none]
    #[arg(long, value_name = "LEVEL", help_heading = "Cluster")]
    trace_level: String = None,
    /// Keep the K best alternatives of every routing decision and estimate its regret; 0 = off. [default: 0]
    #[arg(long, value_name = "K", help_heading = "Cluster")]
    counterfactual_k: u32 = Some(0),

    // ── Run ──────────────────────────────────────────────────────────────
    /// Master random seed: same seed, same result, byte for byte. [default: 42]
    #[arg(long, value_name = "N", help_heading = "Run")]
    seed: u64 = Some(42),
    /// Stop the simulation at this simulated time, seconds; unfinished requests are reported as queued/running.
    #[arg(long, allow_negative_numbers = true, value_name = "SECONDS", help_heading = "Run")]
    horizon: f64 = None,
    /// Client timeout, seconds: requests unfinished this long after arrival are abandoned and aborted.
    #[arg(long, allow_negative_numbers = true, value_name = "SECONDS", help_heading = "Run")]
    client_timeout: f64 = None,
}

/// Knobs of the deployment (model, GPU, vLLM server flags, latency model).
pub const SERVER_KNOBS: [&str; 18] = [
    "model-config", "hardware", "hardware-config", "tp", "max-num-seqs", "max-num-batched-tokens", "max-model-len", "block-size",
    "num-gpu-blocks", "gpu-memory-utilization", "enable-chunked-prefill", "enable-prefix-caching", "async-scheduling",
    "long-prefill-token-threshold", "latency-model", "coefficients", "alpha-coeffs", "beta-coeffs",
];

/// Knobs of the workload (which requests arrive when).
pub const WORKLOAD_KNOBS: [&str; 20] = [
    "rate", "arrival", "num-requests", "max-concurrency", "prompt-tokens", "prompt-tokens-stdev", "prompt-tokens-min", "prompt-tokens-max",
    "output-tokens", "output-tokens-stdev", "output-tokens-min", "output-tokens-max", "prefix-tokens", "prefix-groups",
    "workload-spec", "workload", "trace", "slo-class-mix", "tenant-mix", "horizon",
];

/// Knobs of the cluster's control plane.
pub const CLUSTER_KNOBS: [&str; 15] = [
    "num-instances", "policy-config", "admission-policy", "priority-policy", "routing-policy", "routing-scorers", "scheduler",
    "preemption", "admission-latency", "routing-latency", "snapshot-refresh", "slo-targets", "fitness-weights", "trace-level",
    "counterfactual-k",
];

/// The knobs a command shares with `blis run` but does not use: they are
/// hidden from its help and refused when given ([`reject_unused`]).
pub fn unused_by(command: &str) -> Vec<&'static str> {
    let except = |list: &[&'static str], keep: &[&str]| list.iter().copied().filter(|k| !keep.contains(k)).collect::<Vec<_>>();
    match command {
        // A server takes requests from clients; only the answer length of clients without ignore_eos is a workload knob.
        "serve" => [except(&WORKLOAD_KNOBS, &["output-tokens", "output-tokens-stdev", "output-tokens-min", "output-tokens-max"]), CLUSTER_KNOBS.to_vec()].concat(),
        // A load generator drives someone else's server: no server, latency or cluster knobs.
        "observe" => [SERVER_KNOBS.to_vec(), CLUSTER_KNOBS.to_vec(), vec!["horizon", "client-timeout", "trace"]].concat(),
        // Replay takes its requests from the trace.
        "replay" => except(&WORKLOAD_KNOBS, &["trace", "num-requests", "horizon"]),
        _ => Vec::new(),
    }
}

/// Refuses knobs `command` does not use that were given by flag or file.
pub fn reject_unused(knobs: &Knobs, command: &str) -> Result<(), BadInput> {
    let report = knobs.report();
    for name in unused_by(command) {
        if report.get(name).is_some_and(|v| v["source"] != "default") {
            return Err(bad_input!("--{name} does not apply to `blis {command}`"));
        }
    }
    Ok(())
}

/// Boolean server knobs that vLLM also spells negatively (`--no-enable-prefix-caching`).
pub const NEGATABLE_KNOBS: [&str; 3] = ["enable-chunked-prefill", "enable-prefix-caching", "async-scheduling"];

/// Rewrites vLLM's negative boolean flags (`--no-enable-chunked-prefill`)
/// into the form clap parses (`--enable-chunked-prefill=false`), so a vLLM
/// command line can be pasted as is. Everything else passes through
/// unchanged, including anything after a `--` separator.
pub fn accept_vllm_negations(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut after_separator = false;
    args.into_iter()
        .map(|arg| {
            if after_separator {
                return arg;
            }
            after_separator = arg == "--";
            let negated = arg.to_str().and_then(|a| a.strip_prefix("--no-")).filter(|k| NEGATABLE_KNOBS.contains(k));
            match negated {
                Some(knob) => format!("--{knob}=false").into(),
                None => arg,
            }
        })
        .collect()
}

/// Hides the knobs each subcommand does not use from its `--help`.
pub fn hide_unused(mut cmd: clap::Command) -> clap::Command {
    for sub in ["serve", "observe", "replay"] {
        cmd = cmd.mut_subcommand(sub, |mut s| {
            for name in unused_by(sub) {
                // clap names arguments by field: `num-requests` is `num_requests`.
                s = s.mut_arg(name.replace('-', "_"), |a| a.hide(true));
            }
            s
        });
    }
    cmd
}

/// A knob value that may name a file: paths in a `--config` file are
/// relative to that file, as a user who moves the folder expects.
trait Rebase {
    /// `self` with a relative path joined onto `dir`; other values unchanged.
    fn rebased(self, dir: &Path) -> Self;
}

impl Rebase for PathBuf {
    fn rebased(self, dir: &Path) -> PathBuf {
        if self.is_relative() { dir.join(self) } else { self }
    }
}

macro_rules! not_a_path {
    ($($ty:ty),*) => { $( impl Rebase for $ty { fn rebased(self, _: &Path) -> $ty { self } } )* };
}
not_a_path!(String, u32, u64, f64, bool);

impl KnobFile {
    /// Reads a YAML (or JSON) knob file. Keys are flag names; `snake_case`
    /// spellings are accepted too. Unknown keys are errors naming the key.
    /// Relative paths in it are relative to the file's folder.
    pub fn load(path: &Path) -> Result<KnobFile, BadInput> {
        let text = blis_data::textfile::read(path).map_err(|e| bad_input!("cannot read --config {}: {e}", path.display()))?;
        let raw: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&text).map_err(|e| bad_input!("--config {}: not valid YAML: {e}", path.display()))?;
        let file = KnobFile::from_yaml(raw, &format!("--config {}", path.display()))?;
        Ok(file.rebased(path.parent().unwrap_or(Path::new(""))))
    }

    /// Reads knobs from a YAML mapping of flag names (or their `snake_case`
    /// spellings, or vLLM's names of the flags that have an alias) to
    /// values; `origin` names it in errors.
    pub fn from_yaml(raw: serde_yaml_ng::Value, origin: &str) -> Result<KnobFile, BadInput> {
        let serde_yaml_ng::Value::Mapping(map) = raw else {
            return Err(bad_input!("{origin}: expected a mapping of flag names to values"));
        };
        let mut normalized = serde_yaml_ng::Mapping::new();
        for (k, v) in map {
            let key = match k {
                serde_yaml_ng::Value::String(s) => s.replace('_', "-"),
                other => return Err(bad_input!("{origin}: key {other:?} is not a string")),
            };
            let key = flag_of_alias(&key).unwrap_or(key);
            let count = |text: &str| {
                parse_count::<u64>(text).map(|n| serde_yaml_ng::Value::Number(n.into())).map_err(|e| bad_input!("{origin}: field `{key}`: {e}"))
            };
            let v = match v {
                // `max-model-len: 32k` and `num-requests: 1e6` (a YAML float), as on the command line.
                serde_yaml_ng::Value::String(s) if takes_count(&key) => count(&s)?,
                serde_yaml_ng::Value::Number(n) if takes_count(&key) && n.is_f64() => count(&format!("{:e}", n.as_f64().unwrap_or(f64::NAN)))?,
                other => other,
            };
            if normalized.insert(serde_yaml_ng::Value::String(key.clone()), v).is_some() {
                return Err(bad_input!("{origin}: `{key}` is given twice (under its own name and vLLM's, or in two spellings)"));
            }
        }
        serde_path_to_error::deserialize(serde_yaml_ng::Value::Mapping(normalized))
            .map_err(|e| bad_input!("{origin}: {}", blis_data::locate::located_message(&e)))
    }
}

/// The files knob values were read from: for each, the flag names it set
/// and how messages name it (`--config run.yaml`).
pub type FileOrigins = Vec<(Vec<String>, String)>;

/// A bad-input error that names a knob by its flag (`--rate -1: ...`) when
/// the value came from a file, not the command line, is reworded to name
/// the file and its key (`--config run.yaml: rate -1: ...`); any other
/// error passes through unchanged.
pub fn blame_files(err: anyhow::Error, knobs: &Knobs, files: &FileOrigins) -> anyhow::Error {
    let Some(BadInput(message)) = err.downcast_ref::<BadInput>() else { return err };
    let Some(rest) = message.strip_prefix("--") else { return err };
    let name = rest.split([' ', ':', ',', '=']).next().unwrap_or_default();
    if knobs.report().get(name).is_none_or(|v| v["source"] != "file") {
        return err;
    }
    match files.iter().find(|(keys, _)| keys.iter().any(|k| k == name)) {
        Some((_, origin)) => BadInput(format!("{origin}: {rest}")).into(),
        None => err,
    }
}

/// Reads the `--config` file when one is given (else no knobs), with its
/// origin for [`blame_files`].
pub fn load_config(path: Option<&Path>) -> Result<(KnobFile, FileOrigins), BadInput> {
    let Some(path) = path else { return Ok((KnobFile::default(), Vec::new())) };
    let file = KnobFile::load(path)?;
    let origin = (file.keys(), format!("--config {}", path.display()));
    Ok((file, vec![origin]))
}

/// The flag whose visible alias `name` is (`tensor-parallel-size` → `tp`):
/// the aliases are declared once, on the clap arguments.
fn flag_of_alias(name: &str) -> Option<String> {
    let cmd = <KnobArgs as clap::Args>::augment_args(clap::Command::new("blis"));
    cmd.get_arguments()
        .find(|a| a.get_visible_aliases().is_some_and(|aliases| aliases.contains(&name)))
        .and_then(|a| a.get_long())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        accept_vllm_negations(args.iter().map(std::ffi::OsString::from)).into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn vllm_negations_become_explicit_false_values_and_nothing_else_changes() {
        assert_eq!(
            rewrite(&["blis", "run", "--no-enable-prefix-caching", "--no-async-scheduling", "--rate", "3"]),
            ["blis", "run", "--enable-prefix-caching=false", "--async-scheduling=false", "--rate", "3"]
        );
        // Unknown negations stay as they are (clap rejects them), and so does anything after `--`.
        assert_eq!(rewrite(&["blis", "--no-seed", "--", "--no-enable-chunked-prefill"]), ["blis", "--no-seed", "--", "--no-enable-chunked-prefill"]);
    }

    fn file(yaml: &str) -> Result<KnobFile, BadInput> {
        KnobFile::from_yaml(serde_yaml_ng::from_str(yaml).unwrap(), "--config f.yaml")
    }

    #[test]
    fn config_files_take_vllm_names_and_snake_case_but_not_one_knob_twice() {
        let f = file("tensor-parallel-size: 2\nnum_gpu_blocks_override: 5000\nmax_num_seqs: 64\n").unwrap();
        assert_eq!((f.tp, f.num_gpu_blocks, f.max_num_seqs), (Some(2), Some(5000), Some(64)));
        for twice in ["tp: 2\ntensor_parallel_size: 2\n", "max-num-seqs: 1\nmax_num_seqs: 2\n"] {
            let e = file(twice).unwrap_err().to_string();
            assert!(e.contains("f.yaml") && e.contains("given twice"), "{e}");
        }
        let f = file("max-model-len: 32k\nnum-requests: 1e6\nseed: 7\nhardware: '1k'\n").unwrap();
        assert_eq!((f.max_model_len, f.num_requests, f.seed, f.hardware.as_deref()), (Some(32_000), Some(1_000_000), Some(7), Some("1k")));
        let e = file("max-num-seqs: 64M\n").unwrap_err().to_string();
        assert!(e.contains("f.yaml: field `max-num-seqs`") && e.contains("ambiguous"), "{e}");
        let e = file("dtype: bfloat16\n").unwrap_err().to_string();
        assert!(e.contains("unknown field `dtype`") && e.contains("max-num-seqs"), "{e}");
    }
}
