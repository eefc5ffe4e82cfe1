//! inference-perf (kubernetes-sigs/inference-perf) as BLIS reproduces it:
//! its run configuration (`results/config.yaml`), the prompts of its
//! `shared_prefix`, `random` and `synthetic` data generators, and its load
//! stages.
//!
//! What inference-perf does, and what this module mirrors (inference-perf
//! between b81afa4 and ad40050, late 2025):
//!
//! * **Prompts** (`SharedPrefixDataGenerator`): `num_groups` random-token
//!   system prompts of `system_prompt_len` tokens, each followed by
//!   `num_prompts_per_group` random questions of `question_len` tokens; the
//!   `num_groups · num_prompts_per_group` prompts are shuffled once, and the
//!   n-th request of every stage uses prompt `n mod count` (the generator
//!   restarts at each stage). A full prompt therefore recurs every `count`
//!   requests, which is what lets vLLM's prefix cache hit. Each prompt is
//!   here a shared synthetic run (the group's system prompt) plus a private
//!   one, so the simulated cache hits exactly where vLLM's would. Newer
//!   versions (2026) accept each length as a distribution ([`Length`]) and
//!   draw a system prompt length per group, then per group a question and
//!   an output length per prompt; a prompt keeps its lengths every time it
//!   recurs.
//! * **Drawn lengths** (`random`, `synthetic`): `input_distribution` and
//!   `output_distribution` (see [`crate::io_distribution`]), entry
//!   `n mod total_count` for the n-th request of a stage; random prompts are
//!   fresh random tokens (never shared), synthetic ones the first tokens of
//!   one fixed text (so any two share their common length as a prefix).
//! * **Arrivals** (`ConstantLoadTimer`): a stage of `rate` req/s for
//!   `duration` s sends N = ⌊rate·duration⌋ requests whose gaps are
//!   exponential, rescaled to sum exactly to `duration`, starting 1 s after
//!   the stage starts. `PoissonLoadTimer` draws a Poisson count per second
//!   and spreads it the same way over that second. Stages run one after
//!   another: the next starts `interval` s after every request of the
//!   previous one finished.
//! * **Outputs**: `max_tokens` = the prompt's output length (or the drawn
//!   one) with `ignore_eos`, so every successful request generates exactly that.
//! * **Client timeout**: `load.request_timeout`, else aiohttp's default total
//!   timeout of 300 s.
//!
//! [`StagedWorkload`] generates the whole run lazily, stage after stage.

use std::collections::BTreeMap;

use blis_engine::request::{Request, RequestId, RequestMeta, RequestRecord, TokenRun, TokenSeq, output_stream_seed};
use blis_engine::rng::{SimRng, mix64, subsystem_rng, subsystem_seed};
use blis_engine::driver::Workload;
use blis_engine::time::{MAX_SPAN_S, Micros};
use rand::RngExt;
use rand_distr::{Distribution, Exp, Poisson};
use serde::Deserialize;
use thiserror::Error;

use crate::concurrency::ConcurrencyGate;
use crate::io_distribution::{LengthDistribution, LengthShape, Sampler};

/// aiohttp's default total timeout, which inference-perf uses when
/// `load.request_timeout` is null.
pub const DEFAULT_CLIENT_TIMEOUT_S: f64 = 300.0;

/// Most requests BLIS reproduces from one configuration (all stages), to
/// bound time and memory on absurd input.
const MAX_RUN_REQUESTS: f64 = 1e7;

/// Longest shared-prefix prompt (system prompt + question), tokens.
const MAX_PROMPT_TOKENS: u32 = 10_000_000;

/// Largest shared-prefix prompt set BLIS builds.
const MAX_PROMPTS: u64 = 1_000_000;

/// Delay between a stage starting and its first scheduled send ("allow
/// generation a second to begin populating the queue").
pub const STAGE_START_OFFSET_S: f64 = 1.0;

/// Why an inference-perf configuration cannot be reproduced.
#[derive(Debug, Error, PartialEq)]
pub enum InferencePerfError {
    /// Not valid YAML, or a field has the wrong type.
    #[error("{0}")]
    Parse(String),
    /// A feature BLIS does not reproduce.
    #[error("field `{field}` = {value}: not supported; allowed: {allowed}")]
    Unsupported {
        /// Field path.
        field: &'static str,
        /// Value as written.
        value: String,
        /// What BLIS accepts.
        allowed: &'static str,
    },
    /// A value outside its range.
    #[error("field `{field}` = {value}: {reason}")]
    Invalid {
        /// Field path (with the index of a list entry).
        field: String,
        /// Value as written.
        value: String,
        /// What is allowed.
        reason: &'static str,
    },
}

/// `data.shared_prefix` of a configuration, its lengths resolved as
/// inference-perf resolves them. Both spellings inference-perf has used for
/// the counts are accepted: `num_groups`/`num_prompts_per_group` and
/// `num_unique_system_prompts`/`num_users_per_system_prompt`.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedPrefix {
    /// Distinct system prompts.
    pub num_groups: u32,
    /// Questions (users) per system prompt.
    pub num_prompts_per_group: u32,
    /// Tokens of each group's system prompt (before the server re-tokenises the text).
    pub system_prompt_len: Length,
    /// Tokens of each question.
    pub question_len: Length,
    /// `max_tokens` of each prompt's requests.
    pub output_len: Length,
    /// Each prompt is a user whose requests form one conversation: a round's
    /// prompt is the previous round's prompt and answer plus a new question,
    /// and a user's rounds never overlap (inference-perf's `LocalUserSession`).
    pub enable_multi_turn_chat: bool,
}

/// A shared-prefix length: one number, or (newer inference-perf) a
/// distribution drawn once per group (system prompts) or per prompt
/// (questions, outputs) by [`Sampler::SharedPrefix`].
#[derive(Clone, Debug, PartialEq)]
pub enum Length {
    /// Every group or prompt has this length.
    Fixed(u32),
    /// Lengths drawn from a distribution.
    Drawn(LengthDistribution),
}

impl Length {
    /// `count` lengths; a fixed length draws nothing from `rng`.
    fn draw(&self, count: usize, rng: &mut SimRng) -> Vec<u32> {
        match self {
            Length::Fixed(n) => vec![*n; count],
            Length::Drawn(d) => d.draw(Sampler::SharedPrefix, count, rng),
        }
    }

    /// The largest length this can give.
    fn upper_bound(&self) -> u64 {
        match self {
            Length::Fixed(n) => u64::from(*n),
            Length::Drawn(d) => d.upper_bound(),
        }
    }
}

impl<'de> Deserialize<'de> for Length {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Length, D::Error> {
        use serde::de::{self, Unexpected};
        struct LengthVisitor;
        impl<'de> de::Visitor<'de> for LengthVisitor {
            type Value = Length;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a token count (0 to 4294967295) or a distribution such as {type: normal, mean: 200, std_dev: 50, min: 10, max: 1000}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Length, E> {
                u32::try_from(v).map(Length::Fixed).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Length, E> {
                u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self)).and_then(|v| self.visit_u64(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Length, E> {
                // pydantic accepts a whole float for an int.
                if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
                    Ok(Length::Fixed(v as u32))
                } else {
                    Err(E::invalid_value(Unexpected::Float(v), &self))
                }
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Length, A::Error> {
                LengthDistribution::deserialize(de::value::MapAccessDeserializer::new(map)).map(Length::Drawn)
            }
        }
        deserializer.deserialize_any(LengthVisitor)
    }
}

/// `data.shared_prefix` as written, with inference-perf's defaults.
#[derive(Deserialize)]
struct RawSharedPrefix {
    #[serde(alias = "num_unique_system_prompts", default = "ten")]
    num_groups: u32,
    #[serde(alias = "num_users_per_system_prompt", default = "ten")]
    num_prompts_per_group: u32,
    #[serde(default = "hundred")]
    system_prompt_len: Length,
    #[serde(default = "fifty")]
    question_len: Length,
    #[serde(default = "fifty")]
    output_len: Length,
    #[serde(default)]
    enable_multi_turn_chat: bool,
    /// The older spelling of a question length distribution.
    #[serde(default)]
    question_distribution: Option<LengthDistribution>,
    /// The older spelling of an output length distribution.
    #[serde(default)]
    output_distribution: Option<LengthDistribution>,
    /// A short-lived spelling: a normal spread around `question_len`,
    /// clamped to `question_len_min` / `_max`.
    #[serde(default)]
    question_len_std: f64,
    #[serde(default)]
    question_len_min: Option<u32>,
    #[serde(default)]
    question_len_max: Option<u32>,
    /// The same around `output_len`.
    #[serde(default)]
    output_len_std: f64,
    #[serde(default)]
    output_len_min: Option<u32>,
    #[serde(default)]
    output_len_max: Option<u32>,
    /// Images, video or audio attached to the prompts.
    #[serde(default)]
    multimodal: Option<serde::de::IgnoredAny>,
}

fn ten() -> u32 {
    10
}
fn hundred() -> Length {
    Length::Fixed(100)
}
fn fifty() -> Length {
    Length::Fixed(50)
}

/// Resolves a length as inference-perf's `_resolve_distribution` does: an
/// inline distribution, else the older `<name>_distribution`, else the
/// number, spread by `<name>_len_std` and clamped to `<name>_len_min` /
/// `_max` when those are set (a spread is drawn per prompt and rounded).
fn resolve_length(
    name: &'static str,
    length: Length,
    older: Option<LengthDistribution>,
    (std_dev, min, max): (f64, Option<u32>, Option<u32>),
) -> Result<Length, InferencePerfError> {
    let spread = std_dev != 0.0 || min.is_some() || max.is_some();
    let (field, resolved) = match (length, older) {
        (Length::Drawn(_), Some(_)) => {
            return Err(InferencePerfError::Invalid {
                field: format!("data.shared_prefix.{name}_distribution"),
                value: "set".into(),
                reason: "the length is already a distribution: give one or the other",
            });
        }
        (Length::Drawn(_), None) | (Length::Fixed(_), Some(_)) if spread => {
            return Err(InferencePerfError::Invalid {
                field: format!("data.shared_prefix.{name}_len_std"),
                value: std_dev.to_string(),
                reason: "a spread (with _min / _max) applies to a fixed length only",
            });
        }
        (Length::Drawn(d), None) => (format!("data.shared_prefix.{name}_len"), d),
        (Length::Fixed(_), Some(d)) => (format!("data.shared_prefix.{name}_distribution"), d),
        (Length::Fixed(n), None) if spread => (
            format!("data.shared_prefix.{name}_len_std"),
            LengthDistribution {
                min: min.unwrap_or(1).max(1),
                // Unbounded above in inference-perf; ten standard deviations are never reached in practice.
                max: max.unwrap_or_else(|| if std_dev.is_finite() { (f64::from(n) + 10.0 * std_dev).ceil().min(f64::from(u32::MAX)) as u32 } else { u32::MAX }),
                mean: f64::from(n),
                std_dev,
                shape: LengthShape::Normal,
                ..LengthDistribution::default()
            },
        ),
        (fixed @ Length::Fixed(_), None) => return Ok(fixed),
    };
    match resolved.problem(Sampler::SharedPrefix) {
        Some((sub, value, reason)) => Err(InferencePerfError::Invalid { field, value: format!("{{{sub}: {value}}}"), reason }),
        None => Ok(Length::Drawn(resolved)),
    }
}

impl SharedPrefix {
    fn from_raw(raw: RawSharedPrefix) -> Result<SharedPrefix, InferencePerfError> {
        if raw.multimodal.is_some() {
            return Err(InferencePerfError::Unsupported { field: "data.shared_prefix.multimodal", value: "set".into(), allowed: "null (BLIS simulates text prompts)" });
        }
        Ok(SharedPrefix {
            num_groups: raw.num_groups,
            num_prompts_per_group: raw.num_prompts_per_group,
            system_prompt_len: resolve_length("system_prompt", raw.system_prompt_len, None, (0.0, None, None))?,
            question_len: resolve_length("question", raw.question_len, raw.question_distribution, (raw.question_len_std, raw.question_len_min, raw.question_len_max))?,
            output_len: resolve_length("output", raw.output_len, raw.output_distribution, (raw.output_len_std, raw.output_len_min, raw.output_len_max))?,
            enable_multi_turn_chat: raw.enable_multi_turn_chat,
        })
    }
}

/// How arrivals within a stage are drawn (inference-perf's default: constant).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadKind {
    /// `ConstantLoadTimer`: N exponential gaps rescaled to the stage duration.
    #[default]
    Constant,
    /// `PoissonLoadTimer`: a Poisson count per second, spread over that second.
    Poisson,
    /// `concurrent`: a stage of `num_requests` scheduled within one second
    /// (inference-perf runs it as rate N for 1 s) and sent through
    /// `concurrency_level` slots, each request when a slot frees.
    Concurrent,
}

/// One load stage.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Stage {
    /// Requests per second (a concurrent stage: its request count).
    pub rate: f64,
    /// Seconds (a concurrent stage: 1).
    pub duration: f64,
    /// Most requests in flight (a concurrent stage's `concurrency_level`).
    pub concurrency: Option<u32>,
}

impl Stage {
    /// Requests the stage sends: ⌊rate·duration⌋.
    pub fn num_requests(&self) -> u64 {
        (self.rate * self.duration).floor() as u64
    }

    /// The rate the stage offers, requests per second; `None` for a
    /// concurrent stage, whose rate is whatever the server sustains.
    pub fn offered_rate(&self) -> Option<f64> {
        self.concurrency.is_none().then_some(self.rate)
    }

    /// The stage for people: `5/s × 600 s`, or `2000 requests, 64 at a time`.
    pub fn describe(&self) -> String {
        match self.concurrency {
            Some(c) => format!("{} requests, {c} at a time", self.num_requests()),
            None => format!("{}/s × {} s", self.rate, self.duration),
        }
    }
}

/// A stage as written: `rate` and `duration`, or for a concurrent load
/// `num_requests` and `concurrency_level`.
#[derive(Deserialize)]
struct RawStage {
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    duration: Option<f64>,
    #[serde(default)]
    num_requests: Option<u64>,
    #[serde(default)]
    concurrency_level: Option<u32>,
}

/// `load` of the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// Arrival process.
    pub kind: LoadKind,
    /// Seconds between a stage draining and the next starting.
    pub interval: f64,
    /// Stages, in order.
    pub stages: Vec<Stage>,
    /// Client timeout, seconds (null: aiohttp's 300 s).
    pub request_timeout: Option<f64>,
}

#[derive(Deserialize)]
struct RawLoad {
    #[serde(rename = "type", default)]
    kind: LoadKind,
    #[serde(default = "default_interval")]
    interval: f64,
    stages: Vec<RawStage>,
    #[serde(default)]
    request_timeout: Option<f64>,
    #[serde(default)]
    sweep: Option<serde::de::IgnoredAny>,
}

impl Load {
    /// The stages as inference-perf runs them: a concurrent stage becomes
    /// `num_requests` requests within one second, capped at its concurrency.
    fn from_raw(raw: RawLoad) -> Result<Load, InferencePerfError> {
        if raw.sweep.is_some() {
            return Err(InferencePerfError::Unsupported { field: "load.sweep", value: "set".into(), allowed: "null (list the stages the sweep would run)" });
        }
        let stages = raw
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let field = |name: &str| format!("load.stages[{i}].{name}");
                let missing = |name: &str, reason| InferencePerfError::Invalid { field: field(name), value: "null".into(), reason };
                let extra = |name: &str, reason| InferencePerfError::Invalid { field: field(name), value: "set".into(), reason };
                match raw.kind {
                    LoadKind::Constant | LoadKind::Poisson => {
                        let not_concurrent = "only a concurrent load takes num_requests and concurrency_level";
                        if s.num_requests.is_some() {
                            return Err(extra("num_requests", not_concurrent));
                        }
                        if s.concurrency_level.is_some() {
                            return Err(extra("concurrency_level", not_concurrent));
                        }
                        let rate = s.rate.ok_or_else(|| missing("rate", "required for a constant or poisson load"))?;
                        let duration = s.duration.ok_or_else(|| missing("duration", "required for a constant or poisson load"))?;
                        Ok(Stage { rate, duration, concurrency: None })
                    }
                    LoadKind::Concurrent => {
                        let n = s.num_requests.ok_or_else(|| missing("num_requests", "required for a concurrent load"))?;
                        let c = s.concurrency_level.ok_or_else(|| missing("concurrency_level", "required for a concurrent load"))?;
                        if c == 0 {
                            return Err(InferencePerfError::Invalid { field: field("concurrency_level"), value: "0".into(), reason: "must be at least 1" });
                        }
                        // The rate and duration inference-perf fills in at run time (and writes back) are ignored.
                        Ok(Stage { rate: n as f64, duration: 1.0, concurrency: Some(c) })
                    }
                }
            })
            .collect::<Result<Vec<Stage>, InferencePerfError>>()?;
        Ok(Load { kind: raw.kind, interval: raw.interval, stages, request_timeout: raw.request_timeout })
    }
}

fn default_interval() -> f64 {
    1.0
}

#[derive(Deserialize)]
struct RawData {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    shared_prefix: Option<RawSharedPrefix>,
    #[serde(default)]
    input_distribution: Option<LengthDistribution>,
    #[serde(default)]
    output_distribution: Option<LengthDistribution>,
    #[serde(default)]
    multimodal: Option<serde::de::IgnoredAny>,
}

/// `data` of a configuration: the prompts and output lengths of its data generator.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// `shared_prefix`: groups of prompts sharing a system prompt, cycled.
    SharedPrefix(SharedPrefix),
    /// `random`: prompts of random tokens (never shared, even when a length
    /// recurs), lengths from the two distributions.
    Random(IoLengths),
    /// `synthetic`: prompt n is the first `input[n]` tokens of one fixed
    /// text, so every two prompts share their common length as a prefix.
    Synthetic(IoLengths),
}

/// `data.input_distribution` and `data.output_distribution`.
#[derive(Clone, Debug, PartialEq)]
pub struct IoLengths {
    /// Prompt lengths, tokens.
    pub input: LengthDistribution,
    /// Output lengths (`max_tokens`), tokens.
    pub output: LengthDistribution,
}

#[derive(Deserialize)]
struct RawApi {
    #[serde(rename = "type", default = "default_api")]
    kind: String,
    #[serde(default)]
    streaming: bool,
}

fn default_api() -> String {
    "completion".into()
}

#[derive(Deserialize, Default)]
struct RawServer {
    #[serde(default)]
    ignore_eos: bool,
    #[serde(default)]
    model_name: Option<String>,
}

/// One `storage` backend: only the prefix of its report file names is read.
#[derive(Deserialize)]
struct RawStorageBackend {
    #[serde(default)]
    report_file_prefix: Option<String>,
}

#[derive(Deserialize)]
struct RawConfig {
    api: RawApi,
    data: RawData,
    load: RawLoad,
    #[serde(default)]
    server: Option<RawServer>,
    /// Backend name → its settings (null when unused).
    #[serde(default)]
    storage: Option<BTreeMap<String, Option<RawStorageBackend>>>,
}

impl RawConfig {
    /// The prefix of the report files: local storage's, else any backend's.
    fn report_file_prefix(&self) -> Option<String> {
        let backends = self.storage.as_ref()?;
        let prefix = |name: &str| backends.get(name).and_then(|b| b.as_ref()?.report_file_prefix.clone());
        prefix("local_storage").or_else(|| backends.keys().find_map(|k| prefix(k)))
    }
}

/// Whether a YAML document is an inference-perf configuration rather than a
/// BLIS workload spec: a mapping with `load` or `data` and no `clients`.
pub fn looks_like_inference_perf(text: &str) -> bool {
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        Ok(serde_yaml_ng::Value::Mapping(m)) => !m.contains_key("clients") && (m.contains_key("load") || m.contains_key("data")),
        _ => false,
    }
}

/// The parts of an inference-perf configuration BLIS reproduces. Fields
/// inference-perf has and BLIS does not need (storage, reporting, metrics
/// endpoints, worker counts) are ignored.
#[derive(Clone, Debug, PartialEq)]
pub struct InferencePerfConfig {
    /// `api.type`: `completion` or `chat`.
    pub api: String,
    /// `api.streaming`.
    pub streaming: bool,
    /// `data`.
    pub data: Data,
    /// `load`.
    pub load: Load,
    /// `server.ignore_eos`.
    pub ignore_eos: bool,
    /// `server.model_name`.
    pub model_name: Option<String>,
    /// `storage.*.report_file_prefix`: what inference-perf put before each
    /// report file name (`{prefix}stage_0_lifecycle_metrics.json`); empty when unset.
    pub report_file_prefix: String,
}

impl InferencePerfConfig {
    /// Parses the YAML text of an inference-perf configuration (as written to
    /// `results/config.yaml`) and checks it can be reproduced.
    pub fn from_yaml_str(text: &str) -> Result<InferencePerfConfig, InferencePerfError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de)
            .map_err(|e| InferencePerfError::Parse(blis_data::locate::located_message(&e)))?;
        let report_file_prefix = raw.report_file_prefix().unwrap_or_default();
        let data = Data::from_raw(raw.data)?;
        if !matches!(raw.api.kind.as_str(), "completion" | "chat") {
            return Err(InferencePerfError::Unsupported { field: "api.type", value: raw.api.kind, allowed: "completion, chat" });
        }
        let server = raw.server.unwrap_or_default();
        let cfg = InferencePerfConfig {
            api: raw.api.kind,
            streaming: raw.api.streaming,
            data,
            load: Load::from_raw(raw.load)?,
            ignore_eos: server.ignore_eos,
            model_name: server.model_name,
            report_file_prefix,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The shared-prefix data of a `shared_prefix` configuration.
    pub fn shared_prefix(&self) -> Option<&SharedPrefix> {
        match &self.data {
            Data::SharedPrefix(sp) => Some(sp),
            Data::Random(_) | Data::Synthetic(_) => None,
        }
    }

    fn validate(&self) -> Result<(), InferencePerfError> {
        if let Some(sp) = self.shared_prefix() {
            validate_shared_prefix(sp)?;
        }
        if self.load.stages.is_empty() {
            return Err(InferencePerfError::Invalid { field: "load.stages".into(), value: "[]".into(), reason: "needs at least one stage" });
        }
        let mut total_requests = 0.0;
        for (i, s) in self.load.stages.iter().enumerate() {
            let invalid = |name: &str, value: f64, reason| InferencePerfError::Invalid { field: format!("load.stages[{i}].{name}"), value: format!("{value:?}"), reason };
            if !(s.rate.is_finite() && s.rate > 0.0) {
                return Err(invalid("rate", s.rate, "must be a positive number"));
            }
            if !(s.duration > 0.0 && s.duration <= MAX_SPAN_S) {
                return Err(invalid("duration", s.duration, "must be in (0, 1e8] seconds"));
            }
            total_requests += s.rate * s.duration;
            if total_requests > MAX_RUN_REQUESTS {
                let (name, reason) = match s.concurrency {
                    Some(_) => ("num_requests", "the stages must add up to at most 10^7 requests"),
                    None => ("rate", "the stages' rate·duration must add up to at most 10^7 requests"),
                };
                return Err(invalid(name, s.rate, reason));
            }
        }
        if !(self.load.interval >= 0.0 && self.load.interval <= MAX_SPAN_S) {
            return Err(InferencePerfError::Invalid { field: "load.interval".into(), value: format!("{:?}", self.load.interval), reason: "must be in [0, 1e8] seconds" });
        }
        if let Some(t) = self.load.request_timeout
            && !(t > 0.0 && t <= MAX_SPAN_S)
        {
            return Err(InferencePerfError::Invalid { field: "load.request_timeout".into(), value: format!("{t:?}"), reason: "must be in (0, 1e8] seconds" });
        }
        Ok(())
    }

    /// The client timeout in effect: `load.request_timeout` or 300 s.
    pub fn client_timeout(&self) -> Micros {
        Micros::from_secs_f64(self.load.request_timeout.unwrap_or(DEFAULT_CLIENT_TIMEOUT_S)).unwrap_or(Micros::MAX)
    }
}

fn validate_shared_prefix(sp: &SharedPrefix) -> Result<(), InferencePerfError> {
    for (field, zero) in [
        ("data.shared_prefix.num_groups", sp.num_groups == 0),
        ("data.shared_prefix.num_prompts_per_group", sp.num_prompts_per_group == 0),
        ("data.shared_prefix.question_len", sp.question_len == Length::Fixed(0)),
        ("data.shared_prefix.output_len", sp.output_len == Length::Fixed(0)),
    ] {
        if zero {
            return Err(InferencePerfError::Invalid { field: field.into(), value: "0".into(), reason: "must be at least 1" });
        }
    }
    let longest = sp.system_prompt_len.upper_bound() + sp.question_len.upper_bound();
    if longest > u64::from(MAX_PROMPT_TOKENS) {
        return Err(InferencePerfError::Invalid {
            field: "data.shared_prefix.question_len".into(),
            value: longest.to_string(),
            reason: "the longest system_prompt_len + question_len must be at most 10^7 tokens",
        });
    }
    if u64::from(sp.num_groups) * u64::from(sp.num_prompts_per_group) > MAX_PROMPTS {
        return Err(InferencePerfError::Invalid {
            field: "data.shared_prefix.num_prompts_per_group".into(),
            value: sp.num_prompts_per_group.to_string(),
            reason: "num_groups × num_prompts_per_group must be at most 10^6",
        });
    }
    Ok(())
}

/// A distribution random and synthetic data need, present and drawable.
fn checked_distribution(field: &'static str, d: Option<LengthDistribution>) -> Result<LengthDistribution, InferencePerfError> {
    let d = d.ok_or(InferencePerfError::Invalid { field: field.into(), value: "null".into(), reason: "required when data.type is random or synthetic" })?;
    match d.problem(Sampler::IoDistribution) {
        Some((sub, value, reason)) => Err(InferencePerfError::Invalid { field: field.into(), value: format!("{{{sub}: {value}}}"), reason }),
        None => Ok(d),
    }
}

impl Data {
    fn from_raw(raw: RawData) -> Result<Data, InferencePerfError> {
        if raw.multimodal.is_some() {
            return Err(InferencePerfError::Unsupported { field: "data.multimodal", value: "set".into(), allowed: "null (BLIS simulates text prompts)" });
        }
        let lengths = |raw: RawData| -> Result<IoLengths, InferencePerfError> {
            Ok(IoLengths {
                input: checked_distribution("data.input_distribution", raw.input_distribution)?,
                output: checked_distribution("data.output_distribution", raw.output_distribution)?,
            })
        };
        match raw.kind.as_str() {
            "shared_prefix" => match raw.shared_prefix {
                Some(sp) => Ok(Data::SharedPrefix(SharedPrefix::from_raw(sp)?)),
                None => Err(InferencePerfError::Invalid {
                    field: "data.shared_prefix".into(),
                    value: "null".into(),
                    reason: "required when data.type is shared_prefix",
                }),
            },
            "random" => Ok(Data::Random(lengths(raw)?)),
            "synthetic" => Ok(Data::Synthetic(lengths(raw)?)),
            _ => Err(InferencePerfError::Unsupported { field: "data.type", value: raw.kind, allowed: "shared_prefix, random, synthetic" }),
        }
    }
}

/// One prompt of a shared-prefix set.
#[derive(Copy, Clone, Debug)]
struct PromptEntry {
    /// Its group (shared system prompt).
    group: u32,
    /// Seed of its question's token stream.
    question_seed: u64,
    /// Tokens of its question.
    question_tokens: u32,
    /// `max_tokens` of its requests (at least 1).
    output_tokens: u32,
}

/// The shuffled shared-prefix prompt set.
#[derive(Clone, Debug)]
pub struct SharedPrefixPrompts {
    /// System prompt run of each group.
    systems: Vec<TokenRun>,
    /// The prompts, in shuffled order.
    prompts: Vec<PromptEntry>,
}

impl SharedPrefixPrompts {
    /// The prompt set of `sp`: lengths drawn as inference-perf draws them
    /// (per group for system prompts, then per group its questions and
    /// outputs), prompt lengths scaled to `measured_prompt_tokens` when
    /// given (see [`StagePrompts::new`]); contents, lengths and the shuffle
    /// are deterministic in `seed`.
    fn new(sp: &SharedPrefix, measured_prompt_tokens: Option<f64>, seed: u64) -> SharedPrefixPrompts {
        let (groups, per_group) = (sp.num_groups as usize, sp.num_prompts_per_group as usize);
        let mut lengths = subsystem_rng(seed, "inference-perf/shared-prefix-lengths");
        let system_lens = sp.system_prompt_len.draw(groups, &mut lengths);
        let (mut question_lens, mut output_lens) = (Vec::with_capacity(groups * per_group), Vec::with_capacity(groups * per_group));
        for _ in 0..groups {
            question_lens.extend(sp.question_len.draw(per_group, &mut lengths));
            output_lens.extend(sp.output_len.draw(per_group, &mut lengths));
        }
        let tokens = |v: &[u32]| v.iter().map(|&n| f64::from(n)).sum::<f64>();
        let nominal = (tokens(&system_lens) * per_group as f64 + tokens(&question_lens)) / (groups * per_group) as f64;
        let scale = length_scale(measured_prompt_tokens, nominal);
        let scaled = |n: u32| (f64::from(n) * scale).round() as u32;

        let content = subsystem_seed(seed, "inference-perf/prompts");
        let systems =
            system_lens.iter().enumerate().map(|(g, &len)| TokenRun::synthetic(mix64(content ^ 0x7379_7374_656d ^ (g as u64).rotate_left(40)), scaled(len))).collect();
        let mut prompts: Vec<PromptEntry> = (0..groups)
            .flat_map(|g| (0..per_group).map(move |q| (g, q)))
            .map(|(g, q)| PromptEntry {
                group: g as u32,
                question_seed: mix64(content ^ ((g as u64) << 32 | q as u64) ^ 0x7175_6573),
                question_tokens: scaled(question_lens[g * per_group + q]),
                output_tokens: output_lens[g * per_group + q].max(1),
            })
            .collect();
        // Fisher–Yates, as Python's random.shuffle.
        let mut rng = subsystem_rng(seed, "inference-perf/shuffle");
        for i in (1..prompts.len()).rev() {
            let j = rng.random_range(0..=i);
            prompts.swap(i, j);
        }
        SharedPrefixPrompts { systems, prompts }
    }

    /// Number of distinct prompts.
    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    /// Whether the set is empty (never, for a validated configuration).
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }

    fn entry(&self, n: u64) -> &PromptEntry {
        &self.prompts[(n % self.prompts.len() as u64) as usize]
    }

    /// Group (shared system prompt) of request `n` of a stage.
    pub fn group_of(&self, n: u64) -> usize {
        self.entry(n).group as usize
    }

    /// Tokens of the question of request `n` of a stage (of every round of
    /// user `n`, with multi-turn chat).
    pub fn question_tokens(&self, n: u64) -> u32 {
        self.entry(n).question_tokens
    }

    /// `max_tokens` of request `n` of a stage (of every round of user `n`,
    /// with multi-turn chat); at least 1.
    pub fn output_tokens(&self, n: u64) -> u32 {
        self.entry(n).output_tokens
    }

    /// Stream seed of user `user`'s question in round `round` (multi-turn).
    pub fn question_seed(&self, user: usize, round: u32) -> u64 {
        let seed = self.entry(user as u64).question_seed;
        if round == 0 { seed } else { mix64(seed ^ u64::from(round).rotate_left(48) ^ 0x0072_6f75_6e64) }
    }

    /// The prompt of request `n` of a stage: its group's system prompt then
    /// its question, at least one token. `total_tokens` overrides the length
    /// (as measured by the server): the question absorbs the difference, and
    /// a total shorter than the system prompt cuts the system prompt.
    pub fn prompt(&self, n: u64, total_tokens: Option<u32>) -> TokenSeq {
        let e = self.entry(n);
        let system = &self.systems[e.group as usize];
        let total = total_tokens.unwrap_or(system.len().saturating_add(e.question_tokens)).max(1);
        let system_len = system.len().min(total);
        let mut seq = TokenSeq::new();
        if let TokenRun::Synthetic { seed, .. } = *system {
            seq.push(TokenRun::synthetic(seed, system_len));
        }
        seq.push(TokenRun::synthetic(e.question_seed, total - system_len));
        seq
    }
}

/// Send offsets (seconds from the stage's first possible send) of one stage,
/// as inference-perf's load timers draw them.
pub fn stage_send_offsets(kind: LoadKind, stage: &Stage, rng: &mut SimRng) -> Vec<f64> {
    let n = stage.num_requests() as usize;
    match kind {
        LoadKind::Constant | LoadKind::Concurrent => spread(n, stage.rate, stage.duration, 0.0, rng),
        LoadKind::Poisson => {
            let mut out = Vec::with_capacity(n);
            let poisson = Poisson::new(stage.rate).ok();
            let mut second = 0.0;
            while out.len() < n {
                let count = poisson.as_ref().map_or(0.0, |p| p.sample(rng)) as usize;
                if count > 0 {
                    out.extend(spread(count, count as f64, 1.0, second, rng));
                }
                second += 1.0;
            }
            out.truncate(n);
            out
        }
    }
}

/// `ConstantLoadTimer`: `n` exponential gaps of mean 1/rate rescaled to sum
/// to `duration`, as cumulative offsets after `start`.
fn spread(n: usize, rate: f64, duration: f64, start: f64, rng: &mut SimRng) -> Vec<f64> {
    let Ok(exp) = Exp::new(rate) else { return vec![start; n] };
    let gaps: Vec<f64> = (0..n).map(|_| exp.sample(rng)).collect();
    let total: f64 = gaps.iter().sum();
    let scale = if total > 0.0 { duration / total } else { 0.0 };
    let mut t = start;
    gaps.iter()
        .map(|g| {
            t += g * scale;
            t
        })
        .collect()
}

/// One user's conversation (multi-turn chat).
#[derive(Clone, Debug, Default)]
struct Conversation {
    /// The last round's prompt, its output stream seed and output length.
    last: Option<(TokenSeq, u64, u32)>,
    /// Rounds sent so far.
    rounds: u32,
    /// A round is in flight: later rounds wait (the session lock).
    busy: bool,
    /// Rounds the timer fired while one was in flight: (scheduled send, stage).
    blocked: std::collections::VecDeque<(Micros, u32)>,
}

/// What the n-th request of a stage sends, by data generator: the prompts
/// and `max_tokens` of a run, shared by the staged workload and by replays
/// of `requests.csv`.
pub enum StagePrompts {
    /// `shared_prefix`: prompt n mod count and its output length.
    Shared(SharedPrefixPrompts),
    /// `random` / `synthetic`: lengths `n mod total_count`; synthetic prompts
    /// are prefixes of the one stream `text_seed`, random ones fresh tokens.
    Drawn {
        /// Prompt lengths, cycled.
        input: Vec<u32>,
        /// `max_tokens`, cycled.
        output: Vec<u32>,
        /// The one text of `synthetic` prompts; `None` for `random`.
        text_seed: Option<u64>,
        /// Seed of `random` prompts' tokens, mixed with the request id.
        tokens_seed: u64,
    },
}

/// `measured` over `nominal` when both make a positive finite ratio, else 1:
/// how much longer the server's tokenisation made the prompts.
fn length_scale(measured: Option<f64>, nominal: f64) -> f64 {
    let scale = measured.map_or(1.0, |m| m / nominal);
    if scale.is_finite() && scale > 0.0 { scale } else { 1.0 }
}

impl StagePrompts {
    /// The prompts of `data`, deterministic in `seed`. `measured_prompt_tokens`
    /// is the mean prompt length the server saw, when known: inference-perf
    /// decodes random tokens to text and the server re-tokenises it, so real
    /// prompts come out a few percent longer than configured, and the
    /// prompts (shared-prefix token counts, drawn input lengths) are scaled
    /// to that mean.
    pub fn new(data: &Data, measured_prompt_tokens: Option<f64>, seed: u64) -> StagePrompts {
        let cycle = |d: &LengthDistribution, stream: &str| {
            let count = d.total_count.unwrap_or(1) as usize;
            d.draw(Sampler::IoDistribution, count, &mut subsystem_rng(seed, stream)).into_iter().map(|n| n.max(1)).collect::<Vec<u32>>()
        };
        let drawn = |io: &IoLengths, shared_text: bool| {
            let input = cycle(&io.input, "inference-perf/input-lengths");
            let drawn_mean = input.iter().map(|&n| f64::from(n)).sum::<f64>() / input.len().max(1) as f64;
            let scale = length_scale(measured_prompt_tokens, drawn_mean);
            StagePrompts::Drawn {
                input: input.into_iter().map(|n| ((f64::from(n) * scale).round() as u32).max(1)).collect(),
                output: cycle(&io.output, "inference-perf/output-lengths"),
                text_seed: shared_text.then(|| subsystem_seed(seed, "inference-perf/synthetic-text")),
                tokens_seed: subsystem_seed(seed, "inference-perf/random-tokens"),
            }
        };
        match data {
            Data::SharedPrefix(sp) => StagePrompts::Shared(SharedPrefixPrompts::new(sp, measured_prompt_tokens, seed)),
            Data::Random(io) => drawn(io, false),
            Data::Synthetic(io) => drawn(io, true),
        }
    }

    /// Prompt and `max_tokens` of request `n` of a stage, whose id is `id`
    /// (single-turn); `input_tokens` replaces the prompt's length when known
    /// (a recorded request). Lengths are at least 1: the engine needs a token.
    pub fn nth(&self, n: u64, id: RequestId, input_tokens: Option<u32>) -> (TokenSeq, u32) {
        match self {
            StagePrompts::Shared(prompts) => (prompts.prompt(n, input_tokens), prompts.output_tokens(n)),
            StagePrompts::Drawn { input, output, text_seed, tokens_seed } => {
                let len = input_tokens.unwrap_or(input[(n % input.len() as u64) as usize]).max(1);
                let stream = text_seed.unwrap_or_else(|| mix64(tokens_seed ^ id.0));
                (TokenSeq::synthetic(stream, len), output[(n % output.len() as u64) as usize])
            }
        }
    }

    /// Requests after which prompts recur with the same length: the prompt
    /// count of a shared prefix, `total_count` of drawn input lengths.
    pub fn prompt_cycle(&self) -> u64 {
        match self {
            StagePrompts::Shared(prompts) => prompts.len() as u64,
            StagePrompts::Drawn { input, .. } => input.len() as u64,
        }
    }

    /// `max_tokens` of each request of the cycle.
    fn output_lengths(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match self {
            StagePrompts::Shared(prompts) => Box::new(prompts.prompts.iter().map(|e| e.output_tokens)),
            StagePrompts::Drawn { output, .. } => Box::new(output.iter().copied()),
        }
    }

    /// Whether every request has the same `max_tokens`, so that a recorded
    /// request's output length is known.
    pub fn fixed_output(&self) -> bool {
        let mut lengths = self.output_lengths();
        let first = lengths.next();
        lengths.all(|n| Some(n) == first)
    }

    /// Mean `max_tokens` over the cycle of requests.
    pub fn mean_output_tokens(&self) -> f64 {
        let (count, sum) = self.output_lengths().fold((0u64, 0.0), |(c, s), n| (c + 1, s + f64::from(n)));
        sum / count.max(1) as f64
    }
}

/// The whole inference-perf run as a lazy workload: stage after stage, each
/// starting `interval` after the previous one drained, prompts cycled per
/// stage, `max_tokens` per request as the data generator sets it, `meta.stage` set. With
/// multi-turn chat, request `n` is a round of user `n mod prompts`, sent
/// when its timer fires or, if the user's previous round is still running,
/// when that round finishes; `meta.session` is `(user, round)`.
pub struct StagedWorkload {
    kind: LoadKind,
    stages: Vec<Stage>,
    interval: Micros,
    prompts: StagePrompts,
    rng: SimRng,
    content_seed: u64,
    stage: usize,
    stage_start: Micros,
    offsets: Vec<f64>,
    next_in_stage: usize,
    outstanding: BTreeMap<u32, u64>,
    next_id: u64,
    conversations: Option<Vec<Conversation>>,
    /// Released rounds: (send time, sequence, user, stage), earliest first.
    ready: std::collections::BinaryHeap<std::cmp::Reverse<(Micros, u64, usize, u32)>>,
    released: u64,
    /// The current stage's concurrency cap (concurrent loads).
    gate: ConcurrencyGate,
}

impl StagedWorkload {
    /// The run of `cfg`, deterministic in `seed`, its prompts scaled to
    /// `measured_prompt_tokens` when given (see [`StagePrompts::new`]).
    pub fn new(cfg: &InferencePerfConfig, measured_prompt_tokens: Option<f64>, seed: u64) -> StagedWorkload {
        StagedWorkload::with_prompts(cfg, StagePrompts::new(&cfg.data, measured_prompt_tokens, seed), seed)
    }

    /// The run of `cfg` sending `prompts` (built by [`StagePrompts::new`]
    /// from `cfg.data` and the same `seed`), deterministic in `seed`.
    pub fn with_prompts(cfg: &InferencePerfConfig, prompts: StagePrompts, seed: u64) -> StagedWorkload {
        let conversations = match (&prompts, cfg.shared_prefix()) {
            (StagePrompts::Shared(prompts), Some(sp)) if sp.enable_multi_turn_chat => Some(vec![Conversation::default(); prompts.len()]),
            _ => None,
        };
        let mut w = StagedWorkload {
            kind: cfg.load.kind,
            stages: cfg.load.stages.clone(),
            interval: Micros::from_secs_f64(cfg.load.interval).unwrap_or(Micros::ZERO),
            prompts,
            rng: subsystem_rng(seed, "inference-perf/arrivals"),
            content_seed: subsystem_seed(seed, "inference-perf/outputs"),
            stage: 0,
            stage_start: Micros::ZERO,
            offsets: Vec::new(),
            next_in_stage: 0,
            outstanding: BTreeMap::new(),
            next_id: 0,
            conversations,
            ready: std::collections::BinaryHeap::new(),
            released: 0,
            gate: ConcurrencyGate::new(None),
        };
        w.begin_stage(0, Micros::ZERO);
        w
    }

    fn begin_stage(&mut self, stage: usize, start: Micros) {
        self.stage = stage;
        self.stage_start = start + Micros::from_secs_f64(STAGE_START_OFFSET_S).unwrap_or(Micros::ZERO);
        self.offsets = stage_send_offsets(self.kind, &self.stages[stage], &mut self.rng);
        self.next_in_stage = 0;
        self.gate.set_limit(self.stages[stage].concurrency);
    }

    fn stage_sent_everything(&self) -> bool {
        self.next_in_stage >= self.offsets.len()
    }

    /// Send time of the stage's next timer event.
    fn next_timer(&self) -> Option<Micros> {
        let offset = self.offsets.get(self.next_in_stage)?;
        Some(self.stage_start + Micros::from_secs_f64(*offset).unwrap_or(Micros::MAX))
    }

    /// Multi-turn: timer events of busy users are parked until their round
    /// finishes, so the next send is the next free user's or a released one.
    fn park_busy_users(&mut self) {
        let Some(convs) = self.conversations.as_mut() else { return };
        while let Some(t) = self.offsets.get(self.next_in_stage).map(|o| self.stage_start + Micros::from_secs_f64(*o).unwrap_or(Micros::MAX)) {
            let user = self.next_in_stage % convs.len();
            if !convs[user].busy {
                return;
            }
            convs[user].blocked.push_back((t, self.stage as u32));
            *self.outstanding.entry(self.stage as u32).or_default() += 1;
            self.next_in_stage += 1;
        }
    }

    fn request(&mut self, arrival: Micros, n: u64, stage: u32) -> Request {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let output_seed = output_stream_seed(id, self.content_seed);
        let (prompt, max_output_tokens, session) = match (self.conversations.as_mut(), &self.prompts) {
            (Some(convs), StagePrompts::Shared(prompts)) => {
                let user = (n % convs.len() as u64) as usize;
                let output_len = prompts.output_tokens(n);
                let conv = &mut convs[user];
                let round = conv.rounds;
                let prompt = match &conv.last {
                    None => prompts.prompt(n, None),
                    Some((prev, prev_seed, prev_len)) => {
                        let mut p = prev.clone();
                        p.push(TokenRun::synthetic(*prev_seed, *prev_len));
                        p.push(TokenRun::synthetic(prompts.question_seed(user, round), prompts.question_tokens(n)));
                        p
                    }
                };
                conv.rounds += 1;
                conv.busy = true;
                conv.last = Some((prompt.clone(), output_seed, output_len));
                (prompt, output_len, Some((user as u64, round)))
            }
            _ => {
                let (prompt, max_output_tokens) = self.prompts.nth(n, id, None);
                (prompt, max_output_tokens, None)
            }
        };
        Request { id, arrival, prompt, max_output_tokens, output_seed, meta: RequestMeta { stage, session, ..RequestMeta::default() } }
    }

    /// When the next request is due: its timer fired, or (multi-turn) its
    /// user's previous round ended.
    fn next_due(&mut self) -> Option<Micros> {
        self.park_busy_users();
        let ready = self.ready.peek().map(|r| r.0.0);
        [self.next_timer(), ready].into_iter().flatten().min()
    }
}

impl Workload for StagedWorkload {
    fn peek_arrival(&mut self) -> Option<Micros> {
        let due = self.next_due()?;
        self.gate.send_time(due)
    }

    fn next_request(&mut self) -> Option<Request> {
        let due = self.next_due()?;
        let sent = self.gate.send_time(due)?;
        self.gate.on_send();
        if let Some(std::cmp::Reverse((t, _, user, stage))) = self.ready.peek().copied()
            && t == due
            && self.next_timer().is_none_or(|timer| t <= timer)
        {
            self.ready.pop();
            return Some(self.request(sent, user as u64, stage));
        }
        let n = self.next_in_stage as u64;
        self.next_in_stage += 1;
        let stage = self.stage as u32;
        *self.outstanding.entry(stage).or_default() += 1;
        Some(self.request(sent, n, stage))
    }

    fn on_finish(&mut self, record: &RequestRecord) {
        self.gate.on_finish(record.finished);
        if let (Some(convs), Some((user, _))) = (self.conversations.as_mut(), record.meta.session) {
            let conv = &mut convs[user as usize];
            conv.busy = false;
            if record.outcome != blis_engine::request::Outcome::Completed {
                conv.last = None; // a failed round ends the conversation's context
            }
            // The next parked round goes when its timer fired or now, whichever is later.
            if let Some((scheduled, stage)) = conv.blocked.pop_front() {
                self.released += 1;
                self.ready.push(std::cmp::Reverse((scheduled.max(record.finished), self.released, user as usize, stage)));
            }
        }
        if let Some(left) = self.outstanding.get_mut(&record.meta.stage) {
            *left = left.saturating_sub(1);
        }
        let drained = self.outstanding.get(&(self.stage as u32)).is_none_or(|&n| n == 0);
        if drained && self.stage_sent_everything() && self.ready.is_empty() && self.stage + 1 < self.stages.len() {
            self.begin_stage(self.stage + 1, record.finished + self.interval);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::request::Outcome;

    const CONFIG: &str = r#"
api:
  type: completion
  streaming: true
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 10
    num_prompts_per_group: 10
    system_prompt_len: 100
    question_len: 466
    output_len: 247
load:
  type: constant
  interval: 1.0
  stages:
  - rate: 5.0
    duration: 600
  - rate: 10.0
    duration: 600
  num_workers: 224
  request_timeout: null
server:
  type: vllm
  ignore_eos: true
  model_name: meta-llama/Llama-2-7b-hf
storage:
  local_storage:
    path: /tmp
"#;

    fn with_shared_prefix(extra: &str) -> Result<InferencePerfConfig, InferencePerfError> {
        InferencePerfConfig::from_yaml_str(&CONFIG.replace("output_len: 247", &format!("output_len: 247\n    {extra}")))
    }

    fn normal(mean: f64, std_dev: f64, min: u32, max: u32) -> Length {
        Length::Drawn(LengthDistribution { min, max, mean, std_dev, ..LengthDistribution::default() })
    }

    /// Every spelling inference-perf has had for a length resolves as its
    /// `_resolve_distribution` resolves it.
    #[test]
    fn lengths_resolve_as_inference_perf_resolves_them() {
        let sp = |extra: &str| with_shared_prefix(extra).unwrap().shared_prefix().unwrap().clone();
        // Inline distributions (newest), on all three lengths.
        let s = CONFIG
            .replace("system_prompt_len: 100", "system_prompt_len: {type: uniform, min: 50, max: 150}")
            .replace("question_len: 466", "question_len: {type: skew_normal, mean: 200, std_dev: 80, skew: 2.5, min: 10, max: 2000}");
        let c = InferencePerfConfig::from_yaml_str(&s).unwrap();
        let sp0 = c.shared_prefix().unwrap();
        assert!(matches!(&sp0.system_prompt_len, Length::Drawn(d) if d.shape == LengthShape::Uniform && (d.min, d.max) == (50, 150)));
        assert!(matches!(&sp0.question_len, Length::Drawn(d) if d.shape == LengthShape::SkewNormal && d.skew == 2.5));
        assert_eq!(sp0.output_len, Length::Fixed(247));
        // The older `<name>_distribution`, over a number.
        assert_eq!(sp("output_distribution: {mean: 247, std_dev: 20, min: 100, max: 400}").output_len, normal(247.0, 20.0, 100, 400));
        // The short-lived `_std` / `_min` / `_max`: a normal around the number, at least 1 token.
        assert_eq!(sp("question_len_std: 30").question_len, normal(466.0, 30.0, 1, 766));
        assert_eq!(sp("output_len_std: 20\n    output_len_min: 100").output_len, normal(247.0, 20.0, 100, 447));
        assert_eq!(sp("question_len_std: 0\n    output_len_std: 0").question_len, Length::Fixed(466), "a zero spread is no spread");
        let e = with_shared_prefix("question_len_std: .nan").unwrap_err().to_string();
        assert!(e.contains("data.shared_prefix.question_len_std") && e.contains("std_dev: NaN") && e.contains("finite"), "{e}");
        let e = with_shared_prefix("output_len_std: -300").unwrap_err().to_string();
        assert!(e.contains("data.shared_prefix.output_len_std") && e.contains("std_dev: -300"), "{e}");
        // Newer versions write null for what is unset; pydantic takes a whole float as an int.
        let nulls = sp("seed: null\n    question_distribution: null\n    output_distribution: null\n    multimodal: null");
        assert_eq!(nulls, sp(""));
        let whole = InferencePerfConfig::from_yaml_str(&CONFIG.replace("question_len: 466", "question_len: 466.0")).unwrap();
        assert_eq!(whole.shared_prefix().unwrap().question_len, Length::Fixed(466));
    }

    #[test]
    fn ambiguous_or_unreproducible_lengths_are_refused_with_the_field_named() {
        let err = |text: &str| InferencePerfConfig::from_yaml_str(text).unwrap_err().to_string();
        let both = CONFIG.replace("output_len: 247", "output_len: {mean: 247, std_dev: 5}\n    output_distribution: {mean: 247}");
        assert!(err(&both).contains("data.shared_prefix.output_distribution") && err(&both).contains("one or the other"), "{}", err(&both));
        let e = with_shared_prefix("question_distribution: {mean: 300}\n    question_len_std: 4").unwrap_err().to_string();
        assert!(e.contains("question_len_std"), "{e}");
        let e = with_shared_prefix("output_distribution: {type: lognormal, mean: 0}").unwrap_err().to_string();
        assert!(e.contains("data.shared_prefix.output_distribution") && e.contains("{mean: 0}") && e.contains("positive"), "{e}");
        let e = err(&CONFIG.replace("question_len: 466", "question_len: {type: triangle}"));
        assert!(e.contains("question_len") && e.contains("triangle"), "{e}");
        for bad in ["-5", "4.5", "\"long\"", "[1, 2]"] {
            let e = err(&CONFIG.replace("question_len: 466", &format!("question_len: {bad}")));
            assert!(e.contains("data.shared_prefix.question_len") && e.contains("a token count"), "{bad}: {e}");
        }
        let e = with_shared_prefix("multimodal: {image: {count: 1}}").unwrap_err().to_string();
        assert!(e.contains("data.shared_prefix.multimodal") && e.contains("not supported"), "{e}");
        let e = err(&CONFIG.replace("question_len: 466", "question_len: {type: fixed, mean: 2e7}"));
        assert!(e.contains("10^7 tokens"), "{e}");
    }

    /// inference-perf's defaults for an unset shared-prefix field.
    #[test]
    fn shared_prefix_defaults_are_inference_perfs() {
        let text = "api:\n  type: completion\ndata:\n  type: shared_prefix\n  shared_prefix: {}\nload:\n  stages:\n  - {rate: 1, duration: 1}\n";
        let c = InferencePerfConfig::from_yaml_str(text).unwrap();
        let sp = c.shared_prefix().unwrap();
        assert_eq!((sp.num_groups, sp.num_prompts_per_group), (10, 10));
        assert_eq!((&sp.system_prompt_len, &sp.question_len, &sp.output_len), (&Length::Fixed(100), &Length::Fixed(50), &Length::Fixed(50)));
    }

    /// Drawn lengths: a system prompt length per group, question and output
    /// lengths per prompt, within bounds, with the requested means; each
    /// prompt keeps its lengths every time it recurs.
    #[test]
    fn drawn_shared_prefix_lengths_follow_their_distributions() {
        let text = CONFIG
            .replace("num_groups: 10", "num_groups: 40")
            .replace("num_prompts_per_group: 10", "num_prompts_per_group: 50")
            .replace("system_prompt_len: 100", "system_prompt_len: {type: uniform, min: 50, max: 150}")
            .replace("question_len: 466", "question_len: {mean: 400, std_dev: 100, min: 100, max: 700}")
            .replace("output_len: 247", "output_len: {type: lognormal, mean: 250, std_dev: 60, min: 20, max: 2000}");
        let c = InferencePerfConfig::from_yaml_str(&text).unwrap();
        let StagePrompts::Shared(p) = StagePrompts::new(&c.data, None, 11) else { panic!("shared prefix") };
        let mut system_of_group = BTreeMap::new();
        let (mut questions, mut outputs) = (Vec::new(), Vec::new());
        for n in 0..p.len() as u64 {
            let prompt = p.prompt(n, None);
            let system = prompt.runs()[0].len();
            assert_eq!(*system_of_group.entry(p.group_of(n)).or_insert(system), system, "one system prompt per group");
            questions.push(f64::from(p.question_tokens(n)));
            outputs.push(f64::from(p.output_tokens(n)));
            assert_eq!(prompt.len(), system + p.question_tokens(n));
            assert_eq!(p.prompt(n + p.len() as u64, None), prompt, "a prompt recurs with its lengths");
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let systems: Vec<f64> = system_of_group.values().map(|&s| f64::from(s)).collect();
        assert!(systems.iter().all(|s| (50.0..=150.0).contains(s)) && (mean(&systems) - 100.5).abs() < 10.0, "{systems:?}");
        assert!(questions.iter().all(|q| (100.0..=700.0).contains(q)) && (mean(&questions) - 400.0).abs() < 8.0, "{}", mean(&questions));
        assert!(outputs.iter().all(|o| (20.0..=2000.0).contains(o)) && (mean(&outputs) - 250.0).abs() < 5.0, "{}", mean(&outputs));
        let sp = StagePrompts::Shared(p);
        assert!(!sp.fixed_output());
        assert!((sp.mean_output_tokens() - mean(&outputs)).abs() < 1e-9);
        // Scaled to a measured mean 10 % above the drawn one.
        let StagePrompts::Shared(p) = &sp else { unreachable!() };
        let drawn_mean = (0..p.len() as u64).map(|n| f64::from(p.prompt(n, None).len())).sum::<f64>() / p.len() as f64;
        let StagePrompts::Shared(scaled) = StagePrompts::new(&c.data, Some(1.1 * drawn_mean), 11) else { unreachable!() };
        let scaled_mean = (0..scaled.len() as u64).map(|n| f64::from(scaled.prompt(n, None).len())).sum::<f64>() / scaled.len() as f64;
        assert!((scaled_mean / drawn_mean - 1.1).abs() < 1e-3, "{scaled_mean} vs {drawn_mean}");
    }

    #[test]
    fn parses_the_effective_config_and_its_defaults() {
        let c = InferencePerfConfig::from_yaml_str(CONFIG).unwrap();
        let want = SharedPrefix {
            num_groups: 10,
            num_prompts_per_group: 10,
            system_prompt_len: Length::Fixed(100),
            question_len: Length::Fixed(466),
            output_len: Length::Fixed(247),
            enable_multi_turn_chat: false,
        };
        assert_eq!(c.shared_prefix().unwrap(), &want);
        assert_eq!(c.load.stages.iter().map(Stage::num_requests).collect::<Vec<_>>(), [3000, 6000]);
        assert_eq!((c.load.kind, c.ignore_eos, c.streaming), (LoadKind::Constant, true, true));
        assert_eq!(c.client_timeout(), Micros::from_secs(300));
        assert_eq!(c.report_file_prefix, "");
        let prefixed = CONFIG.replace("    path: /tmp", "    path: /tmp\n    report_file_prefix: run7_\n  google_cloud_storage: null");
        assert_eq!(InferencePerfConfig::from_yaml_str(&prefixed).unwrap().report_file_prefix, "run7_");
    }

    #[test]
    fn rejects_what_it_cannot_reproduce_with_the_field_named() {
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("type: shared_prefix", "type: shareGPT")).unwrap_err();
        assert!(e.to_string().contains("data.type") && e.to_string().contains("random, synthetic"), "{e}");
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("type: shared_prefix", "type: random")).unwrap_err();
        assert!(e.to_string().contains("data.input_distribution"), "{e}");
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 5.0", "rate: -5.0")).unwrap_err();
        assert!(e.to_string().contains("rate"), "{e}");
        // The request cap is on the whole run: 3 000 requests in stage 0 plus 600 s × 16 666/s in stage 1.
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 10.0", "rate: 16666")).unwrap_err().to_string();
        assert!(e.starts_with("field `load.stages[1].rate` = 16666.0") && e.contains("10^7"), "{e}");
        // u32 lengths whose sum would wrap.
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("system_prompt_len: 100", "system_prompt_len: 4294967000")).unwrap_err();
        assert!(e.to_string().contains("system_prompt_len + question_len"), "{e}");
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("num_groups: 10", "num_groups: 4000000000")).unwrap_err();
        assert!(e.to_string().contains("num_prompts_per_group"), "{e}");
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("duration: 600\n  - rate", "duration: nope\n  - rate")).unwrap_err();
        assert!(e.to_string().contains("duration"), "{e}");
        // A huge interval used to become 0 s silently; huge spans are refused.
        for (from, to, field) in [
            ("interval: 1.0", "interval: 1e300", "load.interval"),
            ("request_timeout: null", "request_timeout: 1e300", "load.request_timeout"),
            ("rate: 5.0\n    duration: 600", "rate: 1e-300\n    duration: 1e300", "load.stages[0].duration"),
        ] {
            let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace(from, to)).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains("1e8] seconds"), "{e}");
        }
        assert!(InferencePerfConfig::from_yaml_str("{").is_err());
    }

    #[test]
    fn prompts_cycle_and_share_their_group_prefix() {
        let c = InferencePerfConfig::from_yaml_str(CONFIG).unwrap();
        let sp = c.shared_prefix().unwrap();
        let p = SharedPrefixPrompts::new(sp, None, 7);
        assert_eq!(p.len(), 100);
        assert_eq!(p.prompt(3, None), p.prompt(103, None));
        assert_eq!(p.prompt(3, None).len(), 566);
        assert_eq!(p.prompt(3, Some(600)).len(), 600);
        assert_eq!(p.prompt(3, Some(50)).len(), 50);
        // Two prompts of one group share the system run and nothing else.
        let a = (0..100).find(|&i| p.group_of(i) == p.group_of(0) && i != 0).unwrap();
        let (x, y) = (p.prompt(0, None), p.prompt(a, None));
        assert_eq!(x.runs()[0], y.runs()[0]);
        assert_ne!(x.runs()[1], y.runs()[1]);
        // Every group holds ten prompts.
        let mut sizes = [0; 10];
        (0..100).for_each(|i| sizes[p.group_of(i)] += 1);
        assert_eq!(sizes, [10; 10]);
    }

    #[test]
    fn constant_stage_sends_exactly_n_requests_ending_at_the_duration() {
        let mut rng = subsystem_rng(1, "t");
        let offs = stage_send_offsets(LoadKind::Constant, &Stage { rate: 5.0, duration: 600.0, concurrency: None }, &mut rng);
        assert_eq!(offs.len(), 3000);
        assert!(offs.windows(2).all(|w| w[0] <= w[1]));
        assert!((offs[2999] - 600.0).abs() < 1e-6);
        let p = stage_send_offsets(LoadKind::Poisson, &Stage { rate: 5.0, duration: 600.0, concurrency: None }, &mut rng);
        assert_eq!(p.len(), 3000);
        assert!(p.windows(2).all(|w| w[0] <= w[1]));
        assert!((p[2999] / 600.0 - 1.0).abs() < 0.1, "{}", p[2999]);
    }

    fn finish(r: &Request, at: Micros) -> RequestRecord {
        RequestRecord {
            id: r.id,
            meta: r.meta,
            instance: Some(0),
            outcome: Outcome::Completed,
            arrival: r.arrival,
            enqueued: None,
            first_scheduled: None,
            first_token: None,
            last_token: None,
            finished: at,
            input_tokens: r.prompt_tokens(),
            output_tokens: r.max_output_tokens,
            cached_prompt_tokens: 0,
            preemptions: 0,
        }
    }

    #[test]
    fn next_stage_starts_after_the_previous_drains() {
        let c = InferencePerfConfig::from_yaml_str(CONFIG).unwrap();
        let mut w = StagedWorkload::new(&c, Some(1.05 * 566.0), 3);
        let mut stage0 = Vec::new();
        while let Some(r) = w.next_request() {
            stage0.push(r);
        }
        assert_eq!(stage0.len(), 3000);
        assert!(stage0[0].arrival >= Micros::from_secs(1));
        assert!(stage0.iter().all(|r| r.meta.stage == 0 && r.max_output_tokens == 247));
        // Nothing more until every stage-0 request has finished.
        let last = stage0.last().unwrap().arrival;
        for r in &stage0[..2999] {
            w.on_finish(&finish(r, last));
        }
        assert_eq!(w.peek_arrival(), None);
        let drained = last + Micros::from_secs(2);
        w.on_finish(&finish(&stage0[2999], drained));
        let first1 = w.next_request().unwrap();
        assert_eq!(first1.meta.stage, 1);
        // interval (1 s) + start offset (1 s) + the first gap.
        assert!(first1.arrival > drained + Micros::from_secs(2));
        assert_eq!(first1.prompt, stage0[0].prompt, "each stage restarts the prompt cycle");
    }

    /// Drives a workload as a server with a fixed service time would:
    /// requests finish `service` after they are sent, in time order.
    fn drive(w: &mut StagedWorkload, service: Micros) -> Vec<Request> {
        let mut sent: Vec<Request> = Vec::new();
        let mut running: std::collections::BTreeMap<(Micros, u64), Request> = Default::default();
        loop {
            let next_send = w.peek_arrival();
            let next_done = running.keys().next().copied();
            match (next_send, next_done) {
                (None, None) => return sent,
                (Some(t), Some((d, _))) if t < d => {
                    let r = w.next_request().unwrap();
                    running.insert((r.arrival + service, r.id.0), r.clone());
                    sent.push(r);
                }
                (Some(_), None) => {
                    let r = w.next_request().unwrap();
                    running.insert((r.arrival + service, r.id.0), r.clone());
                    sent.push(r);
                }
                (_, Some(key)) => {
                    let r = running.remove(&key).unwrap();
                    w.on_finish(&finish(&r, key.0));
                }
            }
        }
    }

    /// inference-perf sends ⌊rate × duration⌋ requests per stage, for both
    /// load types, with and without multi-turn chat; stages follow each other.
    #[test]
    fn stage_request_counts_equal_rate_times_duration() {
        for (load, multi_turn) in [("constant", false), ("poisson", false), ("constant", true)] {
            let text = CONFIG
                .replace("type: constant", &format!("type: {load}"))
                .replace("rate: 5.0\n    duration: 600", "rate: 8.0\n    duration: 30")
                .replace("rate: 10.0\n    duration: 600", "rate: 20.0\n    duration: 15")
                .replace("output_len: 247", &format!("output_len: 247\n    enable_multi_turn_chat: {multi_turn}"));
            let c = InferencePerfConfig::from_yaml_str(&text).unwrap();
            let mut w = StagedWorkload::new(&c, None, 9);
            let sent = drive(&mut w, Micros::from_ms(300));
            let per_stage = |s: u32| sent.iter().filter(|r| r.meta.stage == s).count();
            assert_eq!((per_stage(0), per_stage(1)), (240, 300), "{load}, multi-turn {multi_turn}");
            assert!(sent.windows(2).all(|p| p[0].arrival <= p[1].arrival));
        }
    }

    /// With multi-turn chat, request n is a round of user n mod 100: a round
    /// never starts before the user's previous round finished, and its prompt
    /// extends the previous prompt and answer (so the prefix cache can hit)
    /// with the user's question; every round generates the user's output length.
    #[test]
    fn multi_turn_rounds_wait_for_the_previous_round_and_accumulate_context() {
        let fixed = CONFIG.replace("output_len: 247", "output_len: 247\n    enable_multi_turn_chat: true").replace("rate: 5.0\n    duration: 600", "rate: 50.0\n    duration: 20");
        let drawn = fixed.replace("question_len: 466", "question_len: {mean: 466, std_dev: 100, min: 1, max: 1000}").replace("output_len: 247", "output_len: {mean: 247, std_dev: 50, min: 1, max: 500}");
        for text in [fixed, drawn] {
            let c = InferencePerfConfig::from_yaml_str(&text).unwrap();
            let StagePrompts::Shared(prompts) = StagePrompts::new(&c.data, None, 4) else { panic!("shared prefix") };
            let mut w = StagedWorkload::new(&c, None, 4);
            // Service 3 s: a user's next timer event (2 s later at 50 req/s) finds it busy.
            let service = Micros::from_secs(3);
            let sent = drive(&mut w, service);
            let mut by_user: std::collections::BTreeMap<u64, Vec<&Request>> = Default::default();
            for r in sent.iter().filter(|r| r.meta.stage == 0) {
                by_user.entry(r.meta.session.unwrap().0).or_default().push(r);
            }
            assert_eq!(by_user.len(), 100);
            for (&user, rounds) in &by_user {
                assert!(rounds.iter().all(|r| r.max_output_tokens == prompts.output_tokens(user)));
                for (k, pair) in rounds.windows(2).enumerate() {
                    assert_eq!(pair[1].meta.session.unwrap().1, k as u32 + 1);
                    assert!(pair[1].arrival >= pair[0].arrival + service, "round {} overlapped the previous one", k + 1);
                    let prev = &pair[0].prompt;
                    assert_eq!(pair[1].prompt.runs()[..prev.runs().len()], prev.runs()[..], "context accumulates");
                    assert_eq!(pair[1].prompt.len(), prev.len() + pair[0].max_output_tokens + prompts.question_tokens(user));
                }
            }
        }
    }

    fn concurrent_config(stages: &str) -> Result<InferencePerfConfig, InferencePerfError> {
        let load = format!("load:\n  type: concurrent\n  interval: 1.0\n  stages:\n{stages}  request_timeout: null\nserver:");
        InferencePerfConfig::from_yaml_str(&CONFIG.replace(&CONFIG[CONFIG.find("load:").unwrap()..CONFIG.find("server:").unwrap() + 7], &load))
    }

    /// A concurrent load: each stage is its requests scheduled within one
    /// second and sent through `concurrency_level` slots, so at most that
    /// many are ever in flight; stages still follow each other.
    #[test]
    fn a_concurrent_load_keeps_each_stage_within_its_concurrency() {
        // As written by hand, and as inference-perf writes it back with rate and duration filled in.
        let c = concurrent_config("  - {num_requests: 120, concurrency_level: 4}\n  - {num_requests: 90, concurrency_level: 16, rate: 90, duration: 1}\n").unwrap();
        assert_eq!(c.load.kind, LoadKind::Concurrent);
        assert_eq!(c.load.stages.iter().map(|s| (s.num_requests(), s.concurrency)).collect::<Vec<_>>(), [(120, Some(4)), (90, Some(16))]);
        assert_eq!(c.load.stages[0].offered_rate(), None);
        assert_eq!(c.load.stages[0].describe(), "120 requests, 4 at a time");
        let mut w = StagedWorkload::new(&c, None, 2);
        let service = Micros::from_ms(700);
        let sent = drive(&mut w, service);
        assert_eq!(sent.len(), 210);
        for (stage, limit) in [(0, 4), (1, 16)] {
            let sends: Vec<Micros> = sent.iter().filter(|r| r.meta.stage == stage).map(|r| r.arrival).collect();
            // With a fixed service time, requests in flight at t are those sent in (t − service, t].
            let most = sends.iter().map(|&t| sends.iter().filter(|&&s| s <= t && s + service > t).count()).max().unwrap();
            assert_eq!(most, limit, "stage {stage}");
        }
        // The first stage's 120 requests at 4 at a time take 30 rounds of 0.7 s.
        let last0 = sent.iter().filter(|r| r.meta.stage == 0).map(|r| r.arrival).max().unwrap();
        assert!((Micros::from_secs(21)..Micros::from_secs(22)).contains(&last0), "{last0:?}");
    }

    #[test]
    fn concurrent_and_rate_stages_refuse_each_others_fields() {
        let err = |r: Result<InferencePerfConfig, InferencePerfError>| r.unwrap_err().to_string();
        let e = err(concurrent_config("  - {num_requests: 120}\n"));
        assert!(e.contains("load.stages[0].concurrency_level") && e.contains("required"), "{e}");
        let e = err(concurrent_config("  - {num_requests: 120, concurrency_level: 0}\n"));
        assert!(e.contains("concurrency_level") && e.contains("at least 1"), "{e}");
        let e = err(concurrent_config("  - {num_requests: 20000000, concurrency_level: 4}\n"));
        assert!(e.contains("load.stages[0].num_requests") && e.contains("10^7"), "{e}");
        let e = err(InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 5.0", "rate: 5.0\n    concurrency_level: 3")));
        assert!(e.contains("load.stages[0].concurrency_level") && e.contains("only a concurrent load"), "{e}");
        let e = err(InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 5.0\n", "")));
        assert!(e.contains("load.stages[0].rate") && e.contains("required"), "{e}");
        let e = err(InferencePerfConfig::from_yaml_str(&CONFIG.replace("interval: 1.0", "interval: 1.0\n  sweep: {type: linear}")));
        assert!(e.contains("load.sweep") && e.contains("not supported"), "{e}");
    }

    /// A one-stage configuration of `data_type` with inference-perf's distribution fields.
    fn drawn_config(data_type: &str) -> InferencePerfConfig {
        let text = format!(
            "api:\n  type: completion\n  streaming: true\ndata:\n  type: {data_type}\n  input_distribution:\n    min: 50\n    max: 400\n    \
             mean: 200\n    std_dev: 80\n    total_count: 30\n  output_distribution:\n    min: 5\n    max: 60\n    mean: 20\n    std_dev: 10\n    \
             total_count: 30\nload:\n  type: poisson\n  stages:\n  - rate: 20\n    duration: 6\n"
        );
        InferencePerfConfig::from_yaml_str(&text).unwrap()
    }

    #[test]
    fn random_prompts_cycle_their_lengths_but_never_their_tokens() {
        let c = drawn_config("random");
        assert!(c.shared_prefix().is_none());
        let sent = drive(&mut StagedWorkload::new(&c, None, 5), Micros::from_ms(100));
        assert_eq!(sent.len(), 120);
        assert!(sent.iter().all(|r| (50..=400).contains(&r.prompt.len()) && (5..=60).contains(&r.max_output_tokens)));
        // Entry n mod total_count: request 3 and 33 have the same lengths, yet different tokens.
        assert_eq!((sent[3].prompt.len(), sent[3].max_output_tokens), (sent[33].prompt.len(), sent[33].max_output_tokens));
        assert_ne!(sent[3].prompt.runs()[0], sent[33].prompt.runs()[0]);
        let distinct_lengths: std::collections::BTreeSet<u32> = sent.iter().map(|r| r.prompt.len()).collect();
        assert!(distinct_lengths.len() > 10, "lengths are drawn, not fixed: {distinct_lengths:?}");
    }

    #[test]
    fn synthetic_prompts_are_prefixes_of_one_text() {
        let sent = drive(&mut StagedWorkload::new(&drawn_config("synthetic"), None, 5), Micros::from_ms(100));
        let first = sent[0].prompt.runs()[0].clone();
        for r in &sent {
            match (&r.prompt.runs()[0], &first) {
                (TokenRun::Synthetic { seed, offset: 0, .. }, TokenRun::Synthetic { seed: s0, .. }) => assert_eq!(seed, s0),
                other => panic!("not a prefix of the shared text: {other:?}"),
            }
        }
    }

    #[test]
    fn distribution_errors_name_the_field() {
        let text = "data:\n  type: synthetic\n  input_distribution:\n    mean: 5000\n  output_distribution: {}\nload:\n  stages:\n  - {rate: 1, duration: 1}\napi: {}\n";
        let e = InferencePerfConfig::from_yaml_str(&text.replace("api: {}\n", "api:\n  type: completion\n")).unwrap_err();
        assert!(e.to_string().contains("data.input_distribution") && e.to_string().contains("mean: 5000"), "{e}");
    }
}
