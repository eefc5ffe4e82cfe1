//! An inference-perf run configuration (`results/config.yaml` or a profile):
//! parsed in every spelling inference-perf versions have used, its
//! defaults applied, and refused with the field named when BLIS cannot
//! reproduce it.

use std::collections::BTreeMap;

use blis_engine::rng::SimRng;
use blis_engine::time::{MAX_SPAN_S, Micros};
use serde::Deserialize;
use thiserror::Error;

use crate::io_distribution::{LengthDistribution, LengthShape, MAX_TOTAL_COUNT, Sampler};

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
    /// A dataset run asked for without the records that give its lengths.
    #[error(
        "field `data.type` = {dataset}: its prompt and output lengths are the dataset's text as its tokenizer counted it, which BLIS does not have; \
         reproduce a recorded run instead (`blis validate` on its result directory, whose reports give the lengths), \
         or describe the lengths with data.type random and input_distribution / output_distribution"
    )]
    DatasetLengths {
        /// `data.type` as inference-perf names it.
        dataset: &'static str,
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
    pub(crate) fn draw(&self, count: usize, rng: &mut SimRng) -> Vec<u32> {
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
                f.write_str(
                    "a token count (0 to 4294967295) or a distribution such as {type: normal, mean: 200, std_dev: 50, min: 10, max: 1000}",
                )
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
                max: max.unwrap_or_else(|| {
                    if std_dev.is_finite() { (f64::from(n) + 10.0 * std_dev).ceil().min(f64::from(u32::MAX)) as u32 } else { u32::MAX }
                }),
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
            return Err(InferencePerfError::Unsupported {
                field: "data.shared_prefix.multimodal",
                value: "set".into(),
                allowed: "null (BLIS simulates text prompts)",
            });
        }
        Ok(SharedPrefix {
            num_groups: raw.num_groups,
            num_prompts_per_group: raw.num_prompts_per_group,
            system_prompt_len: resolve_length("system_prompt", raw.system_prompt_len, None, (0.0, None, None))?,
            question_len: resolve_length(
                "question",
                raw.question_len,
                raw.question_distribution,
                (raw.question_len_std, raw.question_len_min, raw.question_len_max),
            )?,
            output_len: resolve_length(
                "output",
                raw.output_len,
                raw.output_distribution,
                (raw.output_len_std, raw.output_len_min, raw.output_len_max),
            )?,
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
    /// `sweep`: stages generated at run time from a saturation probe; the
    /// configuration's own stages are then empty, and a recorded run's
    /// stages are read from its reports.
    pub sweep: Option<Sweep>,
}

/// `load.sweep`: inference-perf first sends a probe burst to measure where
/// the server saturates, then runs `num_stages` stages of `stage_duration`
/// at rates spread up to that point (which only the run's reports record).
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// Requests of the probe burst (sent within [`PROBE_DURATION_S`]).
    pub probe_requests: u64,
    /// `timeout`: seconds after the probe starts sending when the client
    /// cancels whatever of it has not finished.
    pub probe_timeout_s: f64,
    /// `probe` is set: newer inference-perf measures the server with a
    /// closed-loop concurrency ladder instead of the burst, which BLIS does
    /// not simulate.
    pub closed_loop_probe: bool,
    /// Stages generated.
    pub num_stages: u32,
    /// Seconds of each generated stage.
    pub stage_duration: f64,
}

/// Seconds over which a sweep's probe burst sends its requests.
pub const PROBE_DURATION_S: f64 = 5.0;

/// [`RequestMeta::stage`](blis_engine::request::RequestMeta::stage) of a
/// sweep's probe requests (inference-perf's stage −1), which no stage
/// report counts.
pub const PROBE_STAGE: u32 = u32::MAX;

impl Sweep {
    /// The probe burst as a stage (`num_requests` at `num_requests / 5` req/s
    /// for 5 s, as inference-perf runs it), or `None` when there is none to
    /// simulate (no requests, or the closed-loop probe).
    pub fn probe_stage(&self) -> Option<Stage> {
        (self.probe_requests > 0 && !self.closed_loop_probe).then(|| Stage {
            rate: self.probe_requests as f64 / PROBE_DURATION_S,
            duration: PROBE_DURATION_S,
            concurrency: None,
        })
    }
}

#[derive(Deserialize)]
struct RawSweep {
    #[serde(default = "default_probe_requests")]
    num_requests: u64,
    #[serde(default = "default_probe_timeout")]
    timeout: f64,
    #[serde(default)]
    probe: Option<serde::de::IgnoredAny>,
    #[serde(default = "default_sweep_stages")]
    num_stages: u32,
    #[serde(default = "default_stage_duration")]
    stage_duration: f64,
}

fn default_probe_requests() -> u64 {
    2000
}

fn default_probe_timeout() -> f64 {
    60.0
}

fn default_sweep_stages() -> u32 {
    5
}

fn default_stage_duration() -> f64 {
    180.0
}

#[derive(Deserialize)]
struct RawLoad {
    #[serde(rename = "type", default)]
    kind: LoadKind,
    #[serde(default = "default_interval")]
    interval: f64,
    #[serde(default)]
    stages: Vec<RawStage>,
    #[serde(default)]
    request_timeout: Option<f64>,
    #[serde(default)]
    sweep: Option<RawSweep>,
}

impl Load {
    /// The stages as inference-perf runs them: a concurrent stage becomes
    /// `num_requests` requests within one second, capped at its concurrency.
    fn from_raw(raw: RawLoad) -> Result<Load, InferencePerfError> {
        let sweep = match raw.sweep {
            None => None,
            Some(_) if raw.kind == LoadKind::Concurrent => {
                return Err(InferencePerfError::Invalid {
                    field: "load.sweep".into(),
                    value: "set".into(),
                    reason: "not valid for a concurrent load",
                });
            }
            Some(s) => {
                if !(s.stage_duration > 0.0 && s.stage_duration <= MAX_SPAN_S) || s.num_stages == 0 {
                    let value = format!("{{num_stages: {}, stage_duration: {}}}", s.num_stages, s.stage_duration);
                    return Err(InferencePerfError::Invalid {
                        field: "load.sweep".into(),
                        value,
                        reason: "needs at least one stage of (0, 1e8] seconds",
                    });
                }
                if s.num_requests as f64 > MAX_RUN_REQUESTS {
                    let value = s.num_requests.to_string();
                    return Err(InferencePerfError::Invalid {
                        field: "load.sweep.num_requests".into(),
                        value,
                        reason: "the probe sends at most 10^7 requests",
                    });
                }
                if !(s.timeout > 0.0 && s.timeout <= MAX_SPAN_S) {
                    return Err(InferencePerfError::Invalid {
                        field: "load.sweep.timeout".into(),
                        value: format!("{:?}", s.timeout),
                        reason: "must be in (0, 1e8] seconds",
                    });
                }
                Some(Sweep {
                    probe_requests: s.num_requests,
                    probe_timeout_s: s.timeout,
                    closed_loop_probe: s.probe.is_some(),
                    num_stages: s.num_stages,
                    stage_duration: s.stage_duration,
                })
            }
        };
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
                            return Err(InferencePerfError::Invalid {
                                field: field("concurrency_level"),
                                value: "0".into(),
                                reason: "must be at least 1",
                            });
                        }
                        // The rate and duration inference-perf fills in at run time (and writes back) are ignored.
                        Ok(Stage { rate: n as f64, duration: 1.0, concurrency: Some(c) })
                    }
                }
            })
            .collect::<Result<Vec<Stage>, InferencePerfError>>()?;
        // A sweep replaces the configured stages (checked all the same, as
        // inference-perf checks them) with those it generates.
        let stages = if sweep.is_some() { Vec::new() } else { stages };
        Ok(Load { kind: raw.kind, interval: raw.interval, stages, request_timeout: raw.request_timeout, sweep })
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
    /// A dataset inference-perf reads and tokenises itself: natural-text
    /// prompts, each sent once, whose lengths only the run's records know.
    Dataset(Dataset),
}

/// The datasets inference-perf samples prompts from. Its
/// `input_distribution` and `output_distribution` only filter which entries
/// it sends; the lengths come from the dataset's text as the tokenizer
/// counts it, so BLIS takes them from the run's records (see
/// [`super::MeasuredLengths`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dataset {
    /// `shareGPT`: first user turn and first answer of ShareGPT conversations.
    ShareGpt,
    /// `cnn_dailymail`: news articles to summarise.
    CnnDailyMail,
    /// `billsum_conversations`: bills to summarise.
    BillsumConversations,
    /// `infinity_instruct`: instruction-following conversations.
    InfinityInstruct,
}

impl Dataset {
    /// Every dataset, in the order error messages list them.
    pub const ALL: [Dataset; 4] = [Dataset::ShareGpt, Dataset::CnnDailyMail, Dataset::BillsumConversations, Dataset::InfinityInstruct];

    /// The name inference-perf's `data.type` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Dataset::ShareGpt => "shareGPT",
            Dataset::CnnDailyMail => "cnn_dailymail",
            Dataset::BillsumConversations => "billsum_conversations",
            Dataset::InfinityInstruct => "infinity_instruct",
        }
    }
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
    #[serde(default, rename = "type")]
    kind: Option<String>,
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
    blis_data::yaml::top_level_keys(text).ok().flatten().is_some_and(|keys| are_inference_perf_keys(&keys))
}

/// [`looks_like_inference_perf`] for a mapping's top-level keys.
pub(crate) fn are_inference_perf_keys(keys: &[String]) -> bool {
    let has = |key: &str| keys.iter().any(|k| k == key);
    !has("clients") && (has("load") || has("data"))
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
    /// `server.type`: the serving engine the run measured (`vllm`,
    /// `sglang`, `tgi`, `mock`), when recorded.
    pub server_type: Option<String>,
    /// `storage.*.report_file_prefix`: what inference-perf put before each
    /// report file name (`{prefix}stage_0_lifecycle_metrics.json`); empty when unset.
    pub report_file_prefix: String,
    /// Lines for the user to see: one per key no inference-perf version has
    /// in a section BLIS reads (ignored, as inference-perf ignores it),
    /// naming the key it is closest to, since a misspelt key leaves a
    /// default; and one per length that can be 0 tokens
    /// (`zero_length_notes`).
    pub notes: Vec<String>,
}

impl InferencePerfConfig {
    /// Parses the YAML text of an inference-perf configuration (as written to
    /// `results/config.yaml`) and checks it can be reproduced.
    pub fn from_yaml_str(text: &str) -> Result<InferencePerfConfig, InferencePerfError> {
        let raw: RawConfig = blis_data::yaml::from_str(text).map_err(|e| InferencePerfError::Parse(e.to_string()))?;
        let report_file_prefix = raw.report_file_prefix().unwrap_or_default();
        let load = Load::from_raw(raw.load)?;
        let data = Data::from_raw(raw.data, &load)?;
        if !matches!(raw.api.kind.as_str(), "completion" | "chat") {
            return Err(InferencePerfError::Unsupported { field: "api.type", value: raw.api.kind, allowed: "completion, chat" });
        }
        let server = raw.server.unwrap_or_default();
        let notes = super::keys::unknown_keys(text).into_iter().chain(zero_length_notes(&data)).collect();
        let cfg = InferencePerfConfig {
            api: raw.api.kind,
            streaming: raw.api.streaming,
            data,
            load,
            ignore_eos: server.ignore_eos,
            model_name: server.model_name,
            server_type: server.kind,
            report_file_prefix,
            notes,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The shared-prefix data of a `shared_prefix` configuration.
    pub fn shared_prefix(&self) -> Option<&SharedPrefix> {
        match &self.data {
            Data::SharedPrefix(sp) => Some(sp),
            Data::Random(_) | Data::Synthetic(_) | Data::Dataset(_) => None,
        }
    }

    fn validate(&self) -> Result<(), InferencePerfError> {
        if let Some(sp) = self.shared_prefix() {
            validate_shared_prefix(sp)?;
        }
        if self.load.stages.is_empty() && self.load.sweep.is_none() {
            return Err(InferencePerfError::Invalid {
                field: "load.stages".into(),
                value: "[]".into(),
                reason: "needs at least one stage",
            });
        }
        let mut total_requests = 0.0;
        for (i, s) in self.load.stages.iter().enumerate() {
            let invalid = |name: &str, value: f64, reason| InferencePerfError::Invalid {
                field: format!("load.stages[{i}].{name}"),
                value: format!("{value:?}"),
                reason,
            };
            if !(s.rate.is_finite() && s.rate > 0.0) {
                // A concurrent stage's rate is its request count.
                return Err(match s.concurrency {
                    Some(_) => invalid("num_requests", s.rate, "must be at least 1"),
                    None => invalid("rate", s.rate, "must be a positive number"),
                });
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
            return Err(InferencePerfError::Invalid {
                field: "load.interval".into(),
                value: format!("{:?}", self.load.interval),
                reason: "must be in [0, 1e8] seconds",
            });
        }
        if let Some(t) = self.load.request_timeout
            && !(t > 0.0 && t <= MAX_SPAN_S)
        {
            return Err(InferencePerfError::Invalid {
                field: "load.request_timeout".into(),
                value: format!("{t:?}"),
                reason: "must be in (0, 1e8] seconds",
            });
        }
        Ok(())
    }

    /// Whether the configuration can be run as it is: a sweep's stages are
    /// known only once a run has measured the server, so a sweep whose
    /// stages were not filled in from a recorded run's reports cannot.
    pub fn check_runnable(&self) -> Result<(), InferencePerfError> {
        if self.load.stages.is_empty() {
            return Err(InferencePerfError::Invalid {
                field: "load.sweep".into(),
                value: "set".into(),
                reason: "a sweep's stage rates come from the server's saturation point measured at run time: list them under load.stages \
                         to run this configuration (blis validate reproduces a recorded sweep from its stage reports)",
            });
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
    let (system, question) = (sp.system_prompt_len.upper_bound(), sp.question_len.upper_bound());
    if system + question > u64::from(MAX_PROMPT_TOKENS) {
        // The larger part is the one to blame.
        let (field, value) = if system >= question { ("system_prompt_len", system) } else { ("question_len", question) };
        return Err(InferencePerfError::Invalid {
            field: format!("data.shared_prefix.{field}"),
            value: value.to_string(),
            reason: "the longest system_prompt_len + question_len must be at most 10^7 tokens",
        });
    }
    if u64::from(sp.num_groups) * u64::from(sp.num_prompts_per_group) > MAX_PROMPTS {
        let (field, value) = if sp.num_groups >= sp.num_prompts_per_group {
            ("num_groups", sp.num_groups)
        } else {
            ("num_prompts_per_group", sp.num_prompts_per_group)
        };
        return Err(InferencePerfError::Invalid {
            field: format!("data.shared_prefix.{field}"),
            value: value.to_string(),
            reason: "num_groups × num_prompts_per_group must be at most 10^6",
        });
    }
    Ok(())
}

/// A distribution random and synthetic data need, present and drawable;
/// a `total_count` left unset becomes `default_count`, as inference-perf
/// sets it.
/// The lengths of `data` that inference-perf can draw as 0 tokens (a
/// minimum of 0, or a fixed length under 1): vLLM refuses an empty prompt
/// and `max_tokens` 0 with HTTP 400, so in the real run those requests
/// fail, where BLIS simulates them with 1 token. One line each.
fn zero_length_notes(data: &Data) -> Vec<String> {
    let can_be_zero = |d: &LengthDistribution| if d.shape == LengthShape::Fixed { d.mean < 1.0 } else { d.min == 0 };
    let lengths: Vec<(&str, &str, bool)> = match data {
        Data::Random(io) | Data::Synthetic(io) => {
            vec![
                ("data.input_distribution", "prompts", can_be_zero(&io.input)),
                ("data.output_distribution", "outputs", can_be_zero(&io.output)),
            ]
        }
        Data::SharedPrefix(sp) => {
            // A fixed length of 0 is refused (`validate_shared_prefix`).
            let output = matches!(&sp.output_len, Length::Drawn(d) if can_be_zero(d));
            vec![("data.shared_prefix.output_len", "outputs", output)]
        }
        Data::Dataset(_) => Vec::new(),
    };
    lengths
        .into_iter()
        .filter(|(_, _, zero)| *zero)
        .map(|(field, what, _)| format!("{field}: inference-perf can draw {what} of 0 tokens, which vLLM refuses (HTTP 400: the request fails); BLIS simulates 1 token"))
        .collect()
}

fn checked_distribution(
    field: &'static str,
    d: Option<LengthDistribution>,
    default_count: u32,
) -> Result<LengthDistribution, InferencePerfError> {
    let mut d = d.ok_or(InferencePerfError::Invalid {
        field: field.into(),
        value: "null".into(),
        reason: "required when data.type is random or synthetic",
    })?;
    d.total_count = d.total_count.or(Some(default_count));
    match d.problem(Sampler::IoDistribution) {
        Some((sub, value, reason)) => {
            Err(InferencePerfError::Invalid { field: field.into(), value: format!("{{{sub}: {value}}}"), reason })
        }
        None => Ok(d),
    }
}

impl Data {
    /// `raw` checked; `load` is the run's, whose largest stage sets the
    /// `total_count` of drawn lengths that leave it unset (inference-perf's
    /// requests of its largest stage plus one: no length recurs).
    fn from_raw(raw: RawData, load: &Load) -> Result<Data, InferencePerfError> {
        if raw.multimodal.is_some() {
            return Err(InferencePerfError::Unsupported {
                field: "data.multimodal",
                value: "set".into(),
                allowed: "null (BLIS simulates text prompts)",
            });
        }
        let largest_stage = load.stages.iter().map(Stage::num_requests).max().unwrap_or(0);
        let default_count = u32::try_from(largest_stage.saturating_add(1)).unwrap_or(MAX_TOTAL_COUNT).min(MAX_TOTAL_COUNT);
        let lengths = |raw: RawData| -> Result<IoLengths, InferencePerfError> {
            Ok(IoLengths {
                input: checked_distribution("data.input_distribution", raw.input_distribution, default_count)?,
                output: checked_distribution("data.output_distribution", raw.output_distribution, default_count)?,
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
            kind => match Dataset::ALL.into_iter().find(|d| d.name() == kind) {
                Some(dataset) => Ok(Data::Dataset(dataset)),
                None => Err(InferencePerfError::Unsupported {
                    field: "data.type",
                    value: raw.kind,
                    allowed: "shared_prefix, random, synthetic, shareGPT, cnn_dailymail, billsum_conversations, infinity_instruct",
                }),
            },
        }
    }
}
