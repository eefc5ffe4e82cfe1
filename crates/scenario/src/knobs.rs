//! One table defines every knob of a scenario: its name, type, default,
//! documentation and (with the `clap` feature) its command-line flag. From it
//! come the file schema of `--config` (and of a Python scenario dict: the
//! same names, unknown keys rejected), the clap arguments of the `blis`
//! commands, and the resolved [`Knobs`] with the source of every value
//! (precedence: flag > file > default), which reports print so no default
//! is ever silent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use blis_physics::vllm::DEFAULTS;
use serde::Serialize;
use serde_json::Value;

#[cfg(feature = "clap")]
use crate::count::parse_count;
use crate::tier_list::KvTierList;

/// Where a resolved value came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A command-line flag (or the caller's own value).
    Flag,
    /// A file: `--config`, a trace header, an experiment's records.
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

impl<T: Clone> Knob<Option<T>> {
    /// The value when it was given (by flag or file), not defaulted.
    pub fn explicit(&self) -> Option<T> {
        if self.source == Source::Default { None } else { self.value.clone() }
    }
}

impl<T: Clone> Knob<T> {
    /// The value when it was given (by flag or file), not its default.
    pub fn given(&self) -> Option<T> {
        (self.source != Source::Default).then(|| self.value.clone())
    }
}

/// The JSON rendering of a resolved configuration: knob → {value, source}.
pub type ConfigReport = BTreeMap<String, Value>;

/// Adds one entry to a [`ConfigReport`].
pub fn report_entry<T: Serialize>(report: &mut ConfigReport, name: &str, value: &T, source: Source) {
    report.insert(name.to_string(), serde_json::json!({ "value": serde_json::to_value(value).unwrap_or(Value::Null), "source": source }));
}

/// How values of one knob type are read.
pub trait KnobValue: Sized {
    /// Whole numbers, read by `crate::count::parse_count` on the command line and in files.
    const IS_COUNT: bool = false;
    /// clap's parser for the type.
    #[cfg(feature = "clap")]
    fn value_parser() -> clap::builder::ValueParser;
    /// `self` with a relative path joined onto `dir`: paths in a file are
    /// relative to that file, as a user who moves the folder expects.
    fn rebased(self, _dir: &Path) -> Self {
        self
    }
}

macro_rules! plain_knob_value {
    ($($ty:ty),*) => { $( impl KnobValue for $ty {
        #[cfg(feature = "clap")]
        fn value_parser() -> clap::builder::ValueParser { clap::value_parser!($ty).into() }
    } )* };
}
plain_knob_value!(String, f64, bool);

impl KnobValue for PathBuf {
    #[cfg(feature = "clap")]
    fn value_parser() -> clap::builder::ValueParser {
        clap::value_parser!(PathBuf)
    }
    fn rebased(self, dir: &Path) -> PathBuf {
        if self.is_relative() { dir.join(self) } else { self }
    }
}

impl KnobValue for KvTierList {
    #[cfg(feature = "clap")]
    fn value_parser() -> clap::builder::ValueParser {
        clap::builder::ValueParser::new(KvTierList::parse)
    }
}

macro_rules! count_knob_value {
    ($($ty:ty),*) => { $( impl KnobValue for $ty {
        const IS_COUNT: bool = true;
        #[cfg(feature = "clap")]
        fn value_parser() -> clap::builder::ValueParser { clap::builder::ValueParser::new(parse_count::<$ty>) }
    } )* };
}
count_knob_value!(u32, u64);

/// `name` with its underscores as dashes, at compile time (a knob's flag from
/// its field name: `max_num_seqs` → `max-num-seqs`).
const fn kebab<const N: usize>(name: &str) -> [u8; N] {
    let bytes = name.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = if bytes[i] == b'_' { b'-' } else { bytes[i] };
        i += 1;
    }
    out
}

/// The flag of a knob field, as a `&'static str` ([`kebab`]).
macro_rules! const_kebab {
    ($name:ident) => {{
        const NAME: &str = stringify!($name);
        const BYTES: [u8; NAME.len()] = kebab::<{ NAME.len() }>(NAME);
        const FLAG: &str = match std::str::from_utf8(&BYTES) {
            Ok(flag) => flag,
            Err(_) => panic!("knob names are ASCII"),
        };
        FLAG
    }};
}

/// The type of a resolved knob: its value when it has a default, else an
/// `Option` (unset).
macro_rules! knob_type {
    ($ty:ty) => { Knob<Option<$ty>> };
    ($ty:ty, $default:expr) => { Knob<$ty> };
}

/// A knob resolved from the first layer that gives it, else its default (or unset).
macro_rules! knob_resolve {
    ($given:expr) => {
        match $given {
            Some((value, source)) => Knob { value: Some(value), source },
            None => Knob { value: None, source: Source::Default },
        }
    };
    ($given:expr, $default:expr) => {
        match $given {
            Some((value, source)) => Knob { value, source },
            None => Knob { value: $default, source: Source::Default },
        }
    };
}

/// A resolved knob's value, if it has one.
macro_rules! knob_value {
    ($knob:expr) => {
        $knob.value.as_ref()
    };
    ($knob:expr, $default:expr) => {
        Some(&$knob.value)
    };
}

macro_rules! knob_table {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty $(= $default:expr)? $(, alias $alias:literal)? , flag($($arg:tt)*) ;)*) => {
        /// Every knob as optional values: what flags give, what a file gives.
        /// Files use the same names (`max-num-seqs`, or `max_num_seqs`, or
        /// vLLM's spelling where a flag has an alias); unknown keys are errors.
        #[derive(serde::Deserialize, Debug, Default, Clone, PartialEq)]
        #[cfg_attr(feature = "clap", derive(clap::Args))]
        #[serde(deny_unknown_fields, rename_all = "kebab-case")]
        pub struct KnobValues {
            $(
                $(#[doc = $doc])*
                #[cfg_attr(feature = "clap", arg(value_parser = <$ty as KnobValue>::value_parser(), allow_negative_numbers = <$ty as KnobValue>::IS_COUNT, $($arg)* $(, visible_alias = $alias)?))]
                #[serde(default)]
                pub $name: Option<$ty>,
            )*
        }

        /// A knob by name, for what is said about it (an error's subject):
        /// the knob table's names, so a misspelt one does not compile.
        #[allow(non_camel_case_types)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum KnobId {
            $( $(#[doc = $doc])* $name, )*
        }

        impl KnobId {
            /// Every knob, in the table's order.
            pub const ALL: &[KnobId] = &[$( KnobId::$name, )*];

            /// Its flag's name without dashes, which is also its key in files: `max-num-seqs`.
            pub fn flag(self) -> &'static str {
                match self {
                    $( KnobId::$name => const_kebab!($name), )*
                }
            }

            /// Whether it takes a whole number.
            pub(crate) fn takes_count(self) -> bool {
                match self {
                    $( KnobId::$name => <$ty as KnobValue>::IS_COUNT, )*
                }
            }

            /// The knob whose flag or alias is `name` (`tensor-parallel-size` → `tp`).
            pub fn from_flag(name: &str) -> Option<KnobId> {
                $( if name == const_kebab!($name) $( || name == $alias )? { return Some(KnobId::$name); } )*
                None
            }

            /// The knob an alias names, when `name` is an alias (`tensor-parallel-size` → `tp`).
            pub(crate) fn of_alias(name: &str) -> Option<KnobId> {
                $( $( if name == $alias { return Some(KnobId::$name); } )? )*
                None
            }
        }

        /// Every knob after applying flag > file > default, with the source of
        /// each value. A knob with a default holds its value; one without
        /// holds an `Option` (unset when nothing gave it).
        #[derive(Clone, Debug, PartialEq)]
        pub struct Knobs {
            $( $(#[doc = $doc])* pub $name: knob_type!($ty $(, $default)?), )*
        }

        impl KnobValues {
            /// Each knob from `self`, else from `fallback`.
            pub fn or(self, fallback: KnobValues) -> KnobValues {
                KnobValues { $( $name: self.$name.or(fallback.$name), )* }
            }

            /// Relative paths made relative to `dir` (the file's folder).
            pub(crate) fn rebased(self, dir: &Path) -> KnobValues {
                KnobValues { $( $name: self.$name.map(|v| v.rebased(dir)), )* }
            }

            /// The knobs this layer sets.
            pub fn set(&self) -> Vec<KnobId> {
                let mut set = Vec::new();
                $( if self.$name.is_some() { set.push(KnobId::$name); } )*
                set
            }

            /// The names of the knobs this layer sets.
            pub fn keys(&self) -> Vec<String> {
                self.set().into_iter().map(|k| k.flag().to_string()).collect()
            }
        }

        impl Knobs {
            /// Resolves `layers`, first winning (flags, then files, ...), over the defaults.
            pub fn layered(layers: &[(&KnobValues, Source)]) -> Knobs {
                Knobs { $( $name: {
                    let given = layers.iter().find_map(|(l, source)| l.$name.clone().map(|v| (v, *source)));
                    knob_resolve!(given $(, $default)?)
                }, )* }
            }

            /// Where the value of knob `id` came from.
            pub fn source(&self, id: KnobId) -> Source {
                match id {
                    $( KnobId::$name => self.$name.source, )*
                }
            }

            /// Every knob with a value, for the report.
            pub fn report(&self) -> ConfigReport {
                let mut r = ConfigReport::new();
                $( if let Some(v) = knob_value!(self.$name $(, $default)?) {
                    report_entry(&mut r, const_kebab!($name), v, self.$name.source);
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
    model: String, flag(long, value_name = "ID", help_heading = "Model and hardware");
    /// Path to a HuggingFace config.json for a model that is not bundled.
    model_config: PathBuf, flag(long, value_name = "PATH", help_heading = "Model and hardware");
    /// GPU type, bundled or as nvidia-smi names it. [default: H100]
    hardware: String = "H100".into(), alias "gpu", flag(long, value_name = "GPU", help_heading = "Model and hardware", help = crate::help::hardware());
    /// Path to a GPU spec JSON (same fields as data/hardware/*.json) instead of a bundled GPU.
    hardware_config: PathBuf, flag(long, value_name = "PATH", help_heading = "Model and hardware");
    /// Tensor-parallel degree: GPUs per instance. [default: 1]
    tp: u32 = 1, alias "tensor-parallel-size", flag(long, value_name = "N", help_heading = "Model and hardware");
    /// Engine replicas of one server (vLLM --data-parallel-size), each on --tp GPUs, behind
    /// vLLM's own load balancer: --routing-policy vllm-dp on queue and batch counts read every
    /// 100 ms, unless --routing-policy or --snapshot-refresh say otherwise. Instead of
    /// --num-instances. [default: 1]
    data_parallel_size: u32, flag(long, value_name = "N", help_heading = "Model and hardware");

    // ── Server (vLLM flags) ──────────────────────────────────────────────
    /// Maximum requests in the running batch (vLLM --max-num-seqs). [default: vLLM's for the GPU:
    /// 1024 on GPUs of 70 GiB or more except the A100 (H100, H200), else 256]
    max_num_seqs: u32, flag(long, value_name = "N", help_heading = "Server (vLLM flags)");
    /// Token budget per scheduler step (vLLM --max-num-batched-tokens). [default: vLLM's for the
    /// GPU: 8192 on GPUs of 70 GiB or more except the A100 (H100, H200), else 2048]
    max_num_batched_tokens: u32, flag(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)");
    /// Maximum prompt + output tokens per request; at most what the model's config.json allows
    /// (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lifts that, as in vLLM). [default: what its config.json allows]
    max_model_len: u32, flag(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)");
    /// Tokens per KV block: 1, 8, 16, 32, 64, 128 or 256, as in vLLM. [default: 16]
    block_size: u32 = DEFAULTS.block_size, flag(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)");
    /// Quantize the weights at load (vLLM --quantization): fp8 gives a half-precision checkpoint
    /// one-byte weights, multiplied at the FP8 peak where the GPU has one; a quantized checkpoint
    /// takes its own method (or its Marlin kernels, awq_marlin, gptq_marlin). [default: the
    /// checkpoint's quantization_config, else none]
    quantization: String, flag(long, value_name = "METHOD", help_heading = "Server (vLLM flags)");
    /// What the KV cache stores each element as (vLLM --kv-cache-dtype): auto (the model's dtype),
    /// bfloat16, float16, or fp8 (fp8_e4m3, fp8_e5m2, fp8_inc), which halves the bytes of every
    /// cached token: twice the blocks, half the attention reads. [default: auto]
    kv_cache_dtype: String = "auto".into(), flag(long, value_name = "DTYPE", help_heading = "Server (vLLM flags)");
    /// GPU KV blocks (vLLM --num-gpu-blocks-override). [default: derived from GPU memory, see docs]
    num_gpu_blocks: u64, alias "num-gpu-blocks-override", flag(long, value_name = "N", help_heading = "Server (vLLM flags)");
    /// Fraction of GPU memory vLLM may use, for the derived block count. [default: 0.9]
    gpu_memory_utilization: f64 = DEFAULTS.gpu_memory_utilization, flag(long, value_name = "FRACTION", allow_negative_numbers = true, help_heading = "Server (vLLM flags)");
    /// Split long prompts across steps (--no-enable-chunked-prefill turns it off, as in vLLM). [default: true]
    enable_chunked_prefill: bool = DEFAULTS.enable_chunked_prefill, flag(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)");
    /// Reuse KV blocks of shared prompt prefixes (--no-enable-prefix-caching turns it off). [default: true]
    enable_prefix_caching: bool = DEFAULTS.enable_prefix_caching, flag(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)");
    /// Schedule the next step while the current one runs (vLLM --async-scheduling):
    /// requests arriving during a step join the step after next; --no-async-scheduling (or
    /// =false) for a server that runs without it. [default: true, as in vLLM since 0.14]
    async_scheduling: bool = DEFAULTS.async_scheduling, flag(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)");
    /// Spread a MoE model's experts whole over the --tp GPUs and route tokens to them by an
    /// all-to-all (vLLM --enable-expert-parallel); no effect on dense models. [default: false]
    enable_expert_parallel: bool = false, flag(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)");
    /// Turn off vLLM's hybrid KV cache manager (vLLM --disable-hybrid-kv-cache-manager): a model
    /// with sliding-window and full-attention layers then keeps every token's KV in all of them.
    /// KV offloading, P/D and KV events turn it off too, as in vLLM. [default: false]
    disable_hybrid_kv_cache_manager: bool = false, flag(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Server (vLLM flags)");
    /// What a server with a cold Triton cache stalls the first time a step needs a fused-MoE
    /// kernel config it has not compiled yet (MoE models; vLLM compiles one per tuned config on
    /// first use): a duration (950ms, 1s) or seconds; 0 for a server whose cache is warm.
    /// [default: 950ms, measured on the shared Mixtral runs]
    moe_kernel_compile: String, flag(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "Server start");
    /// Cap on one request's prefill tokens per step; 0 = off. [default: 0]
    long_prefill_token_threshold: u32 = DEFAULTS.long_prefill_token_threshold, flag(long, value_name = "TOKENS", help_heading = "Server (vLLM flags)");
    /// Host memory for offloaded KV blocks, GiB, for the whole instance (vLLM --kv-offloading-size):
    /// turns on a CPU tier below the GPU cache. [default: off]
    kv_offloading_size: f64, flag(long, value_name = "GIB", allow_negative_numbers = true, help_heading = "KV offloading");
    /// KV offloading implementation (vLLM --kv-offloading-backend): native (vLLM's
    /// OffloadingConnector: every full block, host memory only) or lmcache (prompt
    /// chunks of 256 tokens; CPU, disk and remote tiers). [default: native; lmcache with disk or remote tiers]
    kv_offloading_backend: String, flag(long, value_name = "NAME", help_heading = "KV offloading");
    /// Host KV blocks of the CPU tier (the OffloadingConnector's num_cpu_blocks), instead of
    /// --kv-offloading-size. [default: off]
    kv_cpu_blocks: u64, flag(long, value_name = "N", help_heading = "KV offloading");
    /// Tiers below the GPU, nearest first: MEDIUM:SIZE_GIB[:GB_PER_S[:LATENCY]],... with MEDIUM
    /// cpu, disk or remote (e.g. cpu:64,disk:1024:5:100us; SIZE may be Nblocks). In a --config
    /// file also a list of {medium, size_gib or blocks, bandwidth_gb_s, latency}. [default: none;
    /// disk 5 GB/s and 100us, remote 12.5 GB/s and 500us]
    kv_tiers: KvTierList, flag(long, value_name = "TIERS", help_heading = "KV offloading");
    /// GPU ↔ host bandwidth per GPU and direction, GB/s. [default: half the GPU's PCIe figure
    /// (it counts both directions) × 0.75]
    kv_transfer_bandwidth: f64, flag(long, value_name = "GB_PER_S", allow_negative_numbers = true, help_heading = "KV offloading");
    /// Fixed cost of one GPU ↔ host transfer: a duration (20us, 0.1ms) or seconds. [default: 20us]
    kv_transfer_latency: String, flag(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "KV offloading");

    // ── Latency model ──────────────────────────────────────────────────
    /// Step-time model. [default: the model of the bundled default coefficient set]
    latency_model: String, flag(long, value_name = "NAME", help_heading = "Latency model", help = crate::help::latency_model());
    /// Coefficient file (YAML or JSON: latency_model, alpha, beta, provenance).
    /// [default: the bundled set for --latency-model, or the bundled default set]
    coefficients: PathBuf, flag(long, value_name = "FILE", help_heading = "Latency model");
    /// Replace the set's α: comma-separated, in the model's order (blackbox: queueing µs, µs per prompt token, µs per output token; trained-physics: queueing µs, completion µs, token emission µs, queueing µs per running request, which may be left out as 0).
    alpha_coeffs: String, flag(long, value_name = "A0,A1,...", allow_hyphen_values = true, help_heading = "Latency model");
    /// Replace the set's β: comma-separated, in the model's order (blackbox: step µs, µs per prefill token, µs per decode token; trained-physics: its twelve, or the published formula's eleven).
    beta_coeffs: String, flag(long, value_name = "B0,B1,...", allow_hyphen_values = true, help_heading = "Latency model");

    // ── Workload ─────────────────────────────────────────────────────────
    /// Mean arrival rate, requests per second. [default: 10]
    rate: f64 = 10.0, flag(long, value_name = "REQ_PER_S", allow_negative_numbers = true, help_heading = "Workload");
    /// Arrival process: poisson or constant. [default: poisson]
    arrival: String = "poisson".into(), flag(long, value_name = "KIND", help_heading = "Workload");
    /// Number of requests. [default: 1000]
    num_requests: u64 = 1000, flag(long, value_name = "N", help_heading = "Workload");
    /// Most requests in flight at once, as a client with N connections (vllm bench serve
    /// --max-concurrency): a request due while all are busy is sent when one ends, and its
    /// latency counts from then. [default: unlimited; `blis observe`: 256]
    max_concurrency: u32, flag(long, value_name = "N", help_heading = "Workload");
    /// Mean prompt length in tokens (excluding any shared prefix). [default: 512]
    prompt_tokens: f64 = 512.0, flag(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload");
    /// Standard deviation of the prompt length; 0 = fixed. [default: 0]
    prompt_tokens_stdev: f64 = 0.0, flag(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload");
    /// Smallest prompt length drawn, at most the mean (--prompt-tokens). [default: 1]
    prompt_tokens_min: u32 = 1, flag(long, value_name = "TOKENS", help_heading = "Workload");
    /// Largest prompt length drawn, at least the mean (--prompt-tokens). [default: unbounded]
    prompt_tokens_max: u32 = u32::MAX, flag(long, value_name = "TOKENS", help_heading = "Workload");
    /// Mean output length in tokens (generated in full, as with ignore_eos). [default: 256]
    output_tokens: f64 = 256.0, flag(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload");
    /// Standard deviation of the output length; 0 = fixed. [default: 0]
    output_tokens_stdev: f64 = 0.0, flag(long, value_name = "TOKENS", allow_negative_numbers = true, help_heading = "Workload");
    /// Smallest output length drawn, at most the mean (--output-tokens). [default: 1]
    output_tokens_min: u32 = 1, flag(long, value_name = "TOKENS", help_heading = "Workload");
    /// Largest output length drawn, at least the mean (--output-tokens). [default: unbounded]
    output_tokens_max: u32 = u32::MAX, flag(long, value_name = "TOKENS", help_heading = "Workload");
    /// Length of a shared prompt prefix prepended to every prompt; 0 = none. [default: 0]
    prefix_tokens: u32 = 0, flag(long, value_name = "TOKENS", help_heading = "Workload");
    /// Number of distinct shared prefixes; each request draws one uniformly. [default: 1]
    prefix_groups: u32 = 1, flag(long, value_name = "N", help_heading = "Workload");
    /// Run a workload spec file (YAML; see docs/workloads.md) or an inference-perf configuration
    /// instead of the flags above; --rate, --num-requests and --seed still override a spec's values.
    workload_spec: PathBuf, flag(long, value_name = "PATH", help_heading = "Workload");
    /// Run a built-in workload (`blis workload list`).
    workload: String, flag(long, value_name = "NAME", help_heading = "Workload", help = crate::help::builtin_workloads());
    /// Replay a trace: a trace v2 CSV (header in NAME.header.yaml beside it) or a Mooncake JSONL file;
    /// --num-requests caps the requests replayed.
    trace: PathBuf, flag(long, value_name = "PATH", help_heading = "Workload");
    /// Assign SLO classes by weight, e.g. `realtime:0.2,interactive:0.5,batch:0.3` (seeded).
    slo_class_mix: String, flag(long, value_name = "NAME:WEIGHT,...", help_heading = "Workload");
    /// Assign tenants by weight, e.g. `alice:1,bob:3` (seeded).
    tenant_mix: String, flag(long, value_name = "NAME:WEIGHT,...", help_heading = "Workload");

    // ── Cluster ──────────────────────────────────────────────────────────
    /// Identical instances behind the control plane. [default: 1]
    num_instances: u32 = 1, flag(long, value_name = "N", help_heading = "Cluster");
    /// Every policy and its parameters in one YAML file (see examples/policies.yaml); the flags below override it.
    policy_config: PathBuf, flag(long, value_name = "PATH", help_heading = "Cluster");
    /// Admission policy. [default: always-admit]
    admission_policy: String, flag(long, value_name = "NAME", help_heading = "Cluster", help = crate::help::admission());
    /// Priority policy. [default: constant]
    priority_policy: String, flag(long, value_name = "NAME", help_heading = "Cluster", help = crate::help::priority());
    /// Routing policy. [default: round-robin]
    routing_policy: String, flag(long, value_name = "NAME", help_heading = "Cluster", help = crate::help::routing());
    /// Scorers of weighted routing, e.g. `prefix-affinity:4,queue-depth:3` (implies --routing-policy weighted).
    routing_scorers: String, flag(long, value_name = "SCORER:WEIGHT,...", help_heading = "Cluster", help = crate::help::scorers());
    /// Instance scheduler. [default: fcfs]
    scheduler: String, flag(long, value_name = "NAME", help_heading = "Cluster", help = crate::help::scheduler());
    /// Preemption victim: tail or lowest-priority. [default: lowest-priority with priority-fcfs, else tail]
    preemption: String, flag(long, value_name = "NAME", help_heading = "Cluster");
    /// Arrival → admission decision latency, microseconds. [default: 0]
    admission_latency: u64 = 0, flag(long, value_name = "MICROS", help_heading = "Cluster");
    /// Routing decision → delivery latency, microseconds. [default: 0]
    routing_latency: u64 = 0, flag(long, value_name = "MICROS", help_heading = "Cluster");
    /// Snapshot staleness per field, e.g. `kv-utilization=periodic:100ms,queue-depth=on-demand`
    /// (fields queue-depth, batch-size, kv-utilization; modes immediate, on-demand, periodic:`N`ms).
    snapshot_refresh: String, flag(long, value_name = "FIELD=MODE,...", help_heading = "Cluster");
    /// SLO targets in ms per class, e.g. `realtime.ttft_ms=200,realtime.itl_ms=50,batch.e2e_ms=60000`.
    slo_targets: String, flag(long, value_name = "CLASS.METRIC=MS,...", help_heading = "Cluster");
    /// Fitness weights, e.g. `throughput:0.5,ttft_p99:0.3,goodput:0.2`.
    fitness_weights: String, flag(long, value_name = "METRIC:WEIGHT,...", help_heading = "Cluster", help = crate::help::fitness());
    /// Decision tracing: none or decisions (one JSON line per admission and routing decision). [default: none]
    trace_level: String, flag(long, value_name = "LEVEL", help_heading = "Cluster");
    /// Keep the K best alternatives of every routing decision and estimate its regret; 0 = off. [default: 0]
    counterfactual_k: u32 = 0, flag(long, value_name = "K", help_heading = "Cluster");

    // ── Prefill/decode disaggregation ──────────────────────────────────
    /// Prefill instances: with --decode-instances, a disaggregated deployment (llm-d P/D)
    /// instead of --num-instances monolithic ones. [default: off]
    prefill_instances: u32, flag(long, value_name = "N", help_heading = "Prefill/decode disaggregation");
    /// Decode instances of a disaggregated deployment. [default: off]
    decode_instances: u32, flag(long, value_name = "N", help_heading = "Prefill/decode disaggregation");
    /// Which requests go through the prefill pool: always, never, or prefix-threshold (only
    /// when the prompt tokens the decode instance has not cached exceed --pd-prefix-threshold). [default: always]
    pd_decider: String, flag(long, value_name = "NAME", help_heading = "Prefill/decode disaggregation");
    /// Uncached prompt tokens above which prefix-threshold disaggregates. [default: 0]
    pd_prefix_threshold: u32, flag(long, value_name = "TOKENS", help_heading = "Prefill/decode disaggregation");
    /// Prefill → decode KV bandwidth per GPU, GB/s (a decode instance's inbound NIC; concurrent
    /// transfers share it). [default: 50, a 400 Gb/s RDMA NIC per GPU]
    pd_transfer_bandwidth: f64, flag(long, value_name = "GB_PER_S", allow_negative_numbers = true, help_heading = "Prefill/decode disaggregation");
    /// Fixed cost of one prefill → decode transfer: a duration (1ms, 500us) or seconds. [default: 1ms]
    pd_transfer_latency: String, flag(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "Prefill/decode disaggregation");
    /// The prefill pool's GPU. [default: --hardware]
    prefill_hardware: String, flag(long, value_name = "GPU", help_heading = "Prefill/decode disaggregation");
    /// The decode pool's GPU. [default: --hardware]
    decode_hardware: String, flag(long, value_name = "GPU", help_heading = "Prefill/decode disaggregation");
    /// The prefill pool's tensor-parallel degree. [default: --tp]
    prefill_tp: u32, flag(long, value_name = "N", help_heading = "Prefill/decode disaggregation");
    /// The decode pool's tensor-parallel degree. [default: --tp]
    decode_tp: u32, flag(long, value_name = "N", help_heading = "Prefill/decode disaggregation");
    /// The prefill pool's --max-num-seqs. [default: --max-num-seqs]
    prefill_max_num_seqs: u32, flag(long, value_name = "N", help_heading = "Prefill/decode disaggregation");
    /// The decode pool's --max-num-seqs. [default: --max-num-seqs]
    decode_max_num_seqs: u32, flag(long, value_name = "N", help_heading = "Prefill/decode disaggregation");
    /// The prefill pool's --max-num-batched-tokens. [default: --max-num-batched-tokens]
    prefill_max_num_batched_tokens: u32, flag(long, value_name = "TOKENS", help_heading = "Prefill/decode disaggregation");
    /// The decode pool's --max-num-batched-tokens. [default: --max-num-batched-tokens]
    decode_max_num_batched_tokens: u32, flag(long, value_name = "TOKENS", help_heading = "Prefill/decode disaggregation");
    /// What a prefill instance does with a prompt's blocks once the decode instance pulled them:
    /// keep (in its prefix cache, as vLLM does) or drop (forget them). [default: keep]
    pd_prefill_cache: String, flag(long, value_name = "keep|drop", help_heading = "Prefill/decode disaggregation");
    /// Scorers of the prefill pool's routing, as --routing-scorers (the decode pool's routing is
    /// --routing-policy / --routing-scorers). [default: prefix-affinity:3,queue-depth:2]
    prefill_routing_scorers: String, flag(long, value_name = "SCORER:WEIGHT,...", help_heading = "Prefill/decode disaggregation");

    // ── Autoscaling ──────────────────────────────────────────────────────
    /// Autoscaling policy (none = a fixed fleet); --num-instances is then the initial replica count. [default: none, or the policy file's autoscale section]
    autoscale_policy: String, flag(long, value_name = "NAME", help_heading = "Autoscaling", help = crate::help::autoscale());
    /// Fewest replicas; 0 allows scaling to zero (requests then wait at the gateway for a cold start). [default: 1]
    min_instances: u32, flag(long, value_name = "N", help_heading = "Autoscaling");
    /// Most replicas. [default: 8, or more if --num-instances or --min-instances is]
    max_instances: u32, flag(long, value_name = "N", help_heading = "Autoscaling");
    /// Time between the autoscaler's metric scrapes and decisions, e.g. 30s. [default: 30s]
    autoscale_interval: String, flag(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "Autoscaling");
    /// Node request → node up: a duration, uniform:MIN,MAX or lognormal:MEDIAN,SIGMA (seeded), e.g. uniform:1m,3m. [default: 0s]
    provisioning_delay: String, flag(long, value_name = "DELAY", allow_hyphen_values = true, help_heading = "Autoscaling");
    /// Replica start → model loaded: a duration or distribution as --provisioning-delay. [default: weight bytes at 2 GB/s]
    loading_delay: String, flag(long, value_name = "DELAY", allow_hyphen_values = true, help_heading = "Autoscaling");
    /// A fresh replica's warm-up, during which its steps are --warmup-slowdown times slower, e.g. 10s. [default: 0s]
    warmup_duration: String, flag(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "Autoscaling");
    /// Step-time multiplier while warming up (≥ 1). [default: 2]
    warmup_slowdown: f64, flag(long, value_name = "FACTOR", allow_negative_numbers = true, help_heading = "Autoscaling");
    /// What a removed replica does: wait (finish in-flight work), immediate (abort and re-route), redirect (finish running, re-route waiting). [default: wait]
    drain_policy: String, flag(long, value_name = "NAME", help_heading = "Autoscaling");
    /// Price of one GPU-hour in dollars, for the cost report (every node pool without its own price).
    gpu_hour_cost: f64, flag(long, value_name = "DOLLARS", allow_negative_numbers = true, help_heading = "Autoscaling");

    // ── Run ──────────────────────────────────────────────────────────────
    /// Master random seed: same seed, same result, byte for byte. [default: 42]
    seed: u64 = 42, flag(long, value_name = "N", help_heading = "Run");
    /// Stop the simulation at this simulated time, seconds; unfinished requests are reported as queued/running.
    horizon: f64, flag(long, allow_negative_numbers = true, value_name = "SECONDS", help_heading = "Run");
    /// Client timeout, seconds: requests unfinished this long after arrival are abandoned and aborted.
    client_timeout: f64, flag(long, allow_negative_numbers = true, value_name = "SECONDS", help_heading = "Run");
}

/// Knobs of the deployment (model, GPU, vLLM server flags, latency model).
pub const SERVER_KNOBS: [&str; 20] = [
    "model-config",
    "hardware",
    "hardware-config",
    "tp",
    "max-num-seqs",
    "max-num-batched-tokens",
    "max-model-len",
    "block-size",
    "quantization",
    "kv-cache-dtype",
    "num-gpu-blocks",
    "gpu-memory-utilization",
    "enable-chunked-prefill",
    "enable-prefix-caching",
    "async-scheduling",
    "long-prefill-token-threshold",
    "latency-model",
    "coefficients",
    "alpha-coeffs",
    "beta-coeffs",
];

/// Knobs of the workload (which requests arrive when).
pub const WORKLOAD_KNOBS: [&str; 20] = [
    "rate",
    "arrival",
    "num-requests",
    "max-concurrency",
    "prompt-tokens",
    "prompt-tokens-stdev",
    "prompt-tokens-min",
    "prompt-tokens-max",
    "output-tokens",
    "output-tokens-stdev",
    "output-tokens-min",
    "output-tokens-max",
    "prefix-tokens",
    "prefix-groups",
    "workload-spec",
    "workload",
    "trace",
    "slo-class-mix",
    "tenant-mix",
    "horizon",
];

/// Knobs of the cluster's control plane.
pub const CLUSTER_KNOBS: [&str; 25] = [
    "num-instances",
    "policy-config",
    "admission-policy",
    "priority-policy",
    "routing-policy",
    "routing-scorers",
    "scheduler",
    "preemption",
    "admission-latency",
    "routing-latency",
    "snapshot-refresh",
    "slo-targets",
    "fitness-weights",
    "trace-level",
    "counterfactual-k",
    "autoscale-policy",
    "min-instances",
    "max-instances",
    "autoscale-interval",
    "provisioning-delay",
    "loading-delay",
    "warmup-duration",
    "warmup-slowdown",
    "drain-policy",
    "gpu-hour-cost",
];

/// Knobs that only mean something with autoscaling.
pub const AUTOSCALE_KNOBS: [KnobId; 9] = [
    KnobId::min_instances,
    KnobId::max_instances,
    KnobId::autoscale_interval,
    KnobId::provisioning_delay,
    KnobId::loading_delay,
    KnobId::warmup_duration,
    KnobId::warmup_slowdown,
    KnobId::drain_policy,
    KnobId::gpu_hour_cost,
];

/// Boolean server knobs that vLLM also spells negatively (`--no-enable-prefix-caching`).
pub const NEGATABLE_KNOBS: [&str; 3] = ["enable-chunked-prefill", "enable-prefix-caching", "async-scheduling"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_layer_with_a_value_wins_and_says_where_it_came_from() {
        let flags = KnobValues { rate: Some(3.0), ..KnobValues::default() };
        let file = KnobValues { rate: Some(5.0), tp: Some(2), ..KnobValues::default() };
        let k = Knobs::layered(&[(&flags, Source::Flag), (&file, Source::File)]);
        assert_eq!(k.rate, Knob { value: 3.0, source: Source::Flag });
        assert_eq!(k.tp, Knob { value: 2, source: Source::File });
        assert_eq!(k.block_size, Knob { value: DEFAULTS.block_size, source: Source::Default });
        assert_eq!(k.rate.given(), Some(3.0));
        assert_eq!(k.block_size.given(), None);
        assert_eq!(k.max_num_seqs, Knob { value: None, source: Source::Default }, "the GPU's default, derived once it is known");
    }
}
