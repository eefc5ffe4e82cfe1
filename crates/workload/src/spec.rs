//! The workload spec language: serde types, strict loading, and overrides.
//!
//! Parsing is strict: unknown keys are errors naming their key path,
//! optional values are `Option`s (so "unset" and "zero" differ), and
//! [`crate::plan`] rejects NaN, infinite, negative and absurd values when it
//! turns a spec into a runnable [`crate::plan::Plan`]. Every key is
//! documented in `docs/workloads.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::builtin;
use crate::empirical::Pdf;
use crate::error::{WorkloadError, from_yaml};

/// Workload category (ServeGen's three families).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Text in, text out.
    #[default]
    Language,
    /// Text plus images, audio or video in; clients may have a `multimodal` section.
    Multimodal,
    /// Reasoning models; clients may have a `reasoning` section.
    Reasoning,
}

impl Category {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Language => "language",
            Category::Multimodal => "multimodal",
            Category::Reasoning => "reasoning",
        }
    }
}

/// A workload spec document.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Spec format version; only "1" exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Master seed of the arrival and length draws [default: 42].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Workload family [default: language].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    /// Free text shown by `blis workload list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Mean total request rate, requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_rate: Option<f64>,
    /// Stop after this many requests from the arrival processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_requests: Option<u64>,
    /// Stop arrivals at this time, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon: Option<u64>,
    /// The clients whose requests make up the workload.
    #[serde(default)]
    pub clients: Vec<ClientSpec>,
}

/// One client: a source of requests with its own arrival process and lengths.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// Unique name.
    pub id: String,
    /// Tenant for per-tenant metrics [default: "default"].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// SLO class for per-class metrics [default: "default"].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_class: Option<String>,
    /// Relative share of `aggregate_rate` (normalised over clients) [default: 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_fraction: Option<f64>,
    /// Seed of this client's draws [default: the spec's seed].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Arrival process [default: poisson].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<ArrivalSpec>,
    /// Prompt length, excluding the shared prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_distribution: Option<DistSpec>,
    /// Output length (`max_tokens`, generated in full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_distribution: Option<DistSpec>,
    /// Clients with the same group share their first `prefix_length` prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_group: Option<String>,
    /// Length of the shared prefix, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<u32>,
    /// Whether responses are streamed [default: true].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Client-side network, for client-perspective latencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
    /// When the client is active [default: always].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleSpec>,
    /// Image, audio and video inputs (category multimodal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multimodal: Option<MultimodalSpec>,
    /// Reasoning outputs (category reasoning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningSpec>,
    /// Multi-turn conversations (any category).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_turn: Option<MultiTurnSpec>,
}

/// Arrival process names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps with a given CV.
    Gamma,
    /// Weibull gaps with a given CV.
    Weibull,
    /// Equal gaps.
    Constant,
}

/// A client's (or window's) arrival process.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalSpec {
    /// Gap distribution [default: poisson].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessKind>,
    /// Coefficient of variation of the gaps (gamma and weibull only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// Periodic rate spikes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursty: Option<BurstySpec>,
    /// Sinusoidal rate cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diurnal: Option<DiurnalSpec>,
}

/// Periodic spikes of the arrival rate.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BurstySpec {
    /// Time from one spike's start to the next, µs.
    pub interval_us: u64,
    /// Length of a spike, µs.
    pub duration_us: u64,
    /// Rate during a spike over the rate between spikes [default: 10].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier: Option<f64>,
    /// Start of the first spike, µs [default: 0].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_us: Option<u64>,
}

/// A sinusoidal cycle of the arrival rate.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DiurnalSpec {
    /// Cycle length, µs [default: 86 400 000 000 = 24 h].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_us: Option<u64>,
    /// Peak rate over trough rate (≥ 1).
    pub peak_to_trough: f64,
    /// Time of the first peak, µs [default: half a period].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_at_us: Option<u64>,
}

/// Distribution names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DistKind {
    /// Pareto/lognormal mixture.
    ParetoLognormal,
    /// Exponential.
    Exponential,
    /// Gaussian, clamped.
    Gaussian,
    /// Lognormal.
    Lognormal,
    /// A fixed value.
    Constant,
    /// An empirical PDF (inline `pdf`, or a `file`).
    Empirical,
}

impl DistKind {
    /// Parameter names: (required, optional).
    pub fn params(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            DistKind::ParetoLognormal => (&["alpha", "xm", "mu", "sigma", "mix_weight"], &["min", "max"]),
            DistKind::Exponential => (&["mean"], &["min", "max"]),
            DistKind::Gaussian => (&["mean", "std_dev"], &["min", "max"]),
            DistKind::Lognormal => (&["mu", "sigma"], &["min", "max"]),
            DistKind::Constant => (&["value"], &[]),
            DistKind::Empirical => (&[], &["min", "max"]),
        }
    }
}

/// A length, count or ratio distribution.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DistSpec {
    /// Which distribution.
    #[serde(rename = "type")]
    pub kind: DistKind,
    /// Its numeric parameters (see [`DistKind::params`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, f64>,
    /// Empirical only: the PDF inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdf: Option<Pdf>,
    /// Empirical only: a PDF file (JSON/YAML map or list), or a ServeGen
    /// `chunk-*-dataset.json` when `field` is given. Relative to the spec file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Empirical from a ServeGen dataset: the field (`input_tokens`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Empirical from a ServeGen dataset: the window's start, seconds [default: the first window].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
}

/// Client-side network characteristics.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Round-trip time, ms.
    pub rtt_ms: f64,
    /// Link bandwidth, megabits per second [default: unlimited].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
}

/// When a client is active.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleSpec {
    /// Active windows, in increasing time, not overlapping.
    pub windows: Vec<WindowSpec>,
}

/// One active window, optionally with its own rate, arrival process and lengths.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    /// Start, µs (inclusive).
    pub start_us: u64,
    /// End, µs (exclusive).
    pub end_us: u64,
    /// Multiplies the client's rate inside the window [default: 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_scale: Option<f64>,
    /// Gap distribution inside the window (process and cv only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<ArrivalSpec>,
    /// Prompt lengths inside the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_distribution: Option<DistSpec>,
    /// Output lengths inside the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_distribution: Option<DistSpec>,
}

/// Per-modality inputs of a multimodal client.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MultimodalSpec {
    /// Text tokens (instead of the client's `input_distribution`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_distribution: Option<DistSpec>,
    /// Tokens per image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_distribution: Option<DistSpec>,
    /// Images per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_count_distribution: Option<DistSpec>,
    /// Tokens per audio segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_distribution: Option<DistSpec>,
    /// Audio segments per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_count_distribution: Option<DistSpec>,
    /// Tokens per video segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video_distribution: Option<DistSpec>,
    /// Video segments per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video_count_distribution: Option<DistSpec>,
}

/// Reasoning outputs.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningSpec {
    /// Fraction of output tokens that are reasoning tokens, in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_ratio_distribution: Option<DistSpec>,
    /// Multi-turn conversations (same as the client-level `multi_turn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_turn: Option<MultiTurnSpec>,
}

/// How a conversation's prompt grows from round to round.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextGrowth {
    /// Next prompt = previous prompt + previous answer + new question.
    #[default]
    Accumulate,
    /// Every round's prompt is independent (shared prefix + new question).
    Fixed,
}

impl ContextGrowth {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextGrowth::Accumulate => "accumulate",
            ContextGrowth::Fixed => "fixed",
        }
    }
}

/// Multi-turn conversations: each arrival starts a session whose next
/// round is sent when the previous one completes, after a think time.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MultiTurnSpec {
    /// Rounds per session (≥ 1).
    pub max_rounds: u32,
    /// Delay between a round's completion and the next round, µs [default: 0].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time_us: Option<u64>,
    /// Prompt growth [default: accumulate].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_growth: Option<ContextGrowth>,
}

/// Command-line values that replace the spec's (each only when given).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// Replaces `aggregate_rate`.
    pub aggregate_rate: Option<f64>,
    /// Replaces `seed`.
    pub seed: Option<u64>,
    /// Replaces `num_requests` (and drops `horizon`).
    pub num_requests: Option<u64>,
    /// Used as `num_requests` when the spec bounds neither requests nor time.
    pub default_num_requests: Option<u64>,
}

/// A parsed spec and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedSpec {
    /// The document.
    pub spec: WorkloadSpec,
    /// The file path, or `preset:NAME` / `scenario:NAME`, for messages.
    pub source_name: String,
    /// Directory that relative `file` paths are resolved against.
    pub base_dir: PathBuf,
}

impl LoadedSpec {
    /// Applies command-line overrides.
    pub fn apply(&mut self, o: &Overrides) {
        let s = &mut self.spec;
        if let Some(r) = o.aggregate_rate {
            s.aggregate_rate = Some(r);
        }
        if let Some(seed) = o.seed {
            s.seed = Some(seed);
        }
        if let Some(n) = o.num_requests {
            s.num_requests = Some(n);
            s.horizon = None;
        }
        if s.num_requests.is_none() && s.horizon.is_none() {
            s.num_requests = o.default_num_requests;
        }
    }
}

/// Parses spec text. `source_name` names it in errors.
///
/// This is where a second input format plugs in: the text is parsed as a
/// spec first, and only a document that fails is looked at again (its
/// top-level keys, once) to say what it is instead: not YAML, not a
/// mapping, or an inference-perf config.
pub fn parse(text: &str, source_name: &str, base_dir: &Path) -> Result<LoadedSpec, WorkloadError> {
    let spec: WorkloadSpec = blis_data::yaml::from_str(text).map_err(|e| match blis_data::yaml::top_level_keys(text) {
        Err(e) => WorkloadError::spec(source_name, ".", format!("not valid YAML: {e}")),
        Ok(None) => {
            WorkloadError::spec(source_name, ".", "expected a mapping with `clients`, `aggregate_rate`, ... (see docs/workloads.md)")
        }
        Ok(Some(keys)) if crate::inference_perf::are_inference_perf_keys(&keys) => WorkloadError::spec(
            source_name,
            ".",
            "this is an inference-perf config (top-level `load`/`data`), not a BLIS workload spec; \
             `blis run --workload-spec` reads it directly",
        ),
        Ok(Some(_)) => from_yaml(source_name, e),
    })?;
    Ok(LoadedSpec { spec, source_name: source_name.to_string(), base_dir: base_dir.to_path_buf() })
}

/// Loads a spec: `preset:NAME` or `scenario:NAME` for a built-in, else a
/// YAML file.
pub fn load(reference: &str) -> Result<LoadedSpec, WorkloadError> {
    if let Some(b) = builtin::lookup(reference)? {
        return parse(b.yaml, reference, Path::new("."));
    }
    let path = Path::new(reference);
    let text = blis_data::textfile::read(path).map_err(|e| WorkloadError::read(path, e))?;
    parse_file(path, &text)
}

/// [`parse`] for the text of the spec file at `path`, which names it in
/// errors and anchors the relative paths inside it.
pub fn parse_file(path: &Path, text: &str) -> Result<LoadedSpec, WorkloadError> {
    let base = path.parent().filter(|b| !b.as_os_str().is_empty()).unwrap_or(Path::new("."));
    parse(text, &path.display().to_string(), base)
}

/// Serialises a spec as YAML.
pub fn to_yaml(spec: &WorkloadSpec) -> String {
    serde_yaml_ng::to_string(spec).unwrap_or_else(|e| format!("# cannot serialise the spec: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, "w.yaml", Path::new(".")).unwrap_err().to_string()
    }

    #[test]
    fn unknown_keys_and_bad_types_name_their_path() {
        let e = err("aggregate_rate: 5\nclients:\n  - id: a\n    arrival: {process: gamma, cvv: 2}\n");
        assert!(e.starts_with("w.yaml: clients[0].arrival.cvv: unknown field `cvv`"), "{e}");
        let e = err("clients:\n  - id: a\n    input_distribution: {type: zipf}\n");
        assert!(e.starts_with("w.yaml: clients[0].input_distribution.type: unknown variant `zipf`"), "{e}");
        assert!(e.contains("pareto_lognormal"), "{e}");
        let e = err("num_requests: -4\n");
        assert!(e.starts_with("w.yaml: num_requests: `-4` is not a non-negative whole number"), "{e}");
        let e = err("- 1\n");
        assert!(e.contains("expected a mapping"), "{e}");
        let e = err("clients: [\n");
        assert!(e.contains("not valid YAML"), "{e}");
    }

    #[test]
    fn inference_perf_configs_are_recognised() {
        let e = err("load:\n  type: constant\ndata:\n  type: shared_prefix\n");
        assert!(e.contains("inference-perf"), "{e}");
    }

    #[test]
    fn overrides_replace_only_what_they_give() {
        let mut l = parse("aggregate_rate: 5\nhorizon: 1000\nclients: [{id: a}]\n", "w", Path::new(".")).unwrap();
        l.apply(&Overrides { aggregate_rate: Some(9.0), default_num_requests: Some(7), ..Overrides::default() });
        assert_eq!((l.spec.aggregate_rate, l.spec.horizon, l.spec.num_requests), (Some(9.0), Some(1000), None));
        l.apply(&Overrides { num_requests: Some(3), ..Overrides::default() });
        assert_eq!((l.spec.horizon, l.spec.num_requests), (None, Some(3)));
    }

    #[test]
    fn specs_round_trip_through_yaml() {
        let text = "version: '1'\nseed: 3\naggregate_rate: 2.5\nclients:\n- id: a\n  input_distribution:\n    type: empirical\n    pdf: {10: 0.5, 20: 0.5}\n";
        let l = parse(text, "w", Path::new(".")).unwrap();
        let again = parse(&to_yaml(&l.spec), "w", Path::new(".")).unwrap();
        assert_eq!(l.spec, again.spec);
    }
}
