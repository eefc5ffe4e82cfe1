//! A trace recorded by `blis observe` (trace v2 and its header) as a run the
//! fit learns from: replayed at its recorded send times on the server its
//! header describes, exactly as `blis replay` replays it, and compared
//! request by request.
//!
//! The trace's successful requests (after the header's warm-up) are cut, in
//! request id order, into windows of [`REQUEST_BLOCK`] requests; a window
//! plays the part an inference-perf stage plays for an experiment: its mean
//! TTFT and E2E are what the fit's objective scores, and its requests form
//! one block of the linear stage.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use blis_engine::instance::{Fanout, Observer};
use blis_engine::request::{Outcome, RequestRecord};
use blis_physics::catalog;
use blis_physics::coefficients::CoefficientSet;
use blis_scenario::deployment::Server;
use blis_scenario::knobs::KnobValues;
use blis_scenario::{Outputs, Scenario, ScenarioError};
use blis_workload::trace_v2::{TraceHeader, header_path};
use serde_json::{Map, Value};

use crate::error::ExperimentError;
use crate::fit::{Measured, REQUEST_BLOCK, RealLatency, Replayed, StageScore};
use crate::validate::compare::Metric;
use crate::validate::live::RealTrace;
use crate::validate::stats::{ape, mean};

/// Knob names that a trace header's `server:` section may spell differently
/// (the spec's example header), mapped onto BLIS's flags.
const HEADER_ALIASES: [(&str, &str); 3] =
    [("tensor_parallel", "tp"), ("tensor_parallel_size", "tp"), ("num_gpu_blocks_override", "num-gpu-blocks")];

/// Most failed requests (errors and timeouts over rows) a trace may have to
/// be fitted: beyond it the server was overloaded and its latencies say
/// more about its queue than about its steps.
pub const MAX_FAILURE_FRACTION: f64 = 0.1;

/// Server knobs a trace header records, as `blis replay` applies them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeaderKnobs {
    /// The knob values: the `server:` section (BLIS flag names or the spec's
    /// names), `hardware.gpu`, and the recording client's concurrency cap.
    pub values: KnobValues,
    /// `knob=value` for every value taken.
    pub matched: Vec<String>,
    /// `server.key` for every entry that names no knob (headers come from
    /// other tools, so these are reported, not refused).
    pub ignored: Vec<String>,
}

impl HeaderKnobs {
    /// The knobs of `header`, read from the file at `path` (named in errors).
    pub fn of(header: &TraceHeader, path: &Path) -> Result<HeaderKnobs, ScenarioError> {
        let origin = format!("trace header {}", path.display());
        let mut map = Map::new();
        let (mut matched, mut ignored) = (Vec::new(), Vec::new());
        let known = |k: &str| KnobValues::from_yaml(Value::Object(Map::from_iter([(k.to_string(), Value::Null)])), "").is_ok();
        if let Some(Value::Object(server)) = &header.server {
            for (key, v) in server {
                let key = key.as_str();
                let key = HEADER_ALIASES.iter().find(|(a, _)| *a == key).map_or(key, |(_, b)| b).replace('_', "-");
                if v.is_null() || key == "time-scale" {
                    continue; // time-scale is applied to the trace's times, not a knob
                }
                if known(&key) {
                    matched.push(format!("{key}={}", shown(v)));
                    map.insert(key, v.clone());
                } else {
                    ignored.push(format!("server.{key}"));
                }
            }
        }
        if let Some(gpu) = header_gpu(header, &origin)?
            && !map.contains_key("hardware")
        {
            matched.push(format!("hardware={gpu}"));
            map.insert("hardware".to_string(), Value::String(gpu));
        }
        // The recording client's cap on requests in flight holds in the replay too: a
        // request is sent at its recorded time, or later if the simulated server
        // still holds every connection.
        if let Some(cap) =
            header.load_generator.as_ref().and_then(|lg| lg.get("max_concurrency")).filter(|c| c.as_u64().is_some_and(|c| c >= 1))
        {
            matched.push(format!("max-concurrency={}", shown(cap)));
            map.insert("max-concurrency".to_string(), cap.clone());
        }
        let values = KnobValues::from_yaml(Value::Object(map), &format!("{origin} `server:`"))?;
        Ok(HeaderKnobs { values, matched, ignored })
    }

    /// A warning when a replay simulates `simulated`, a model other than
    /// the one the header records (names compared as the catalog finds
    /// them, so `meta-llama/llama-3.1-8b-instruct` is
    /// `meta-llama/Llama-3.1-8B-Instruct`); `origin` names the header.
    pub fn other_model(&self, origin: &str, simulated: &str) -> Option<String> {
        let recorded = self.values.model.as_deref()?;
        let id = |name: &str| catalog::find_model(name).map_or_else(|| name.to_ascii_lowercase(), |m| m.id.to_string());
        (id(recorded) != id(simulated))
            .then(|| format!("{origin} records model {recorded}, but the replay simulates {simulated}: its latencies are another model's"))
    }
}

/// A value as one line of YAML.
fn shown(v: &Value) -> String {
    serde_yaml_ng::to_string(v).unwrap_or_default().trim().to_string()
}

/// The GPU a header's `hardware:` section names: its `gpu` entry, or the
/// section itself when it is a name (`hardware: H100`, as `server:` and
/// `--server-config` spell it). Anything else is refused, not ignored: a
/// number or a list names no GPU, and dropping it would simulate the default one.
fn header_gpu(header: &TraceHeader, origin: &str) -> Result<Option<String>, ScenarioError> {
    let allowed = || format!("bundled: {}", catalog::gpu_names());
    match &header.hardware {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => Ok(Some(name.clone())),
        Some(Value::Object(section)) => match section.get("gpu") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(name)) => Ok(Some(name.clone())),
            Some(other) => {
                Err(ScenarioError::other(format!("{origin}: field `hardware.gpu` = {other}: must be a GPU name ({})", allowed())))
            }
        },
        Some(other) => Err(ScenarioError::other(format!(
            "{origin}: field `hardware` = {other}: must be a mapping naming the GPU (`hardware: {{gpu: H100}}`) or a GPU name ({})",
            allowed()
        ))),
    }
}

/// A recorded trace, ready to be replayed with any coefficients.
#[derive(Clone, Debug)]
pub struct ObservedRun {
    name: String,
    csv: PathBuf,
    /// Knobs given on the command line (the trace included).
    given: KnobValues,
    /// The header's knobs.
    header: HeaderKnobs,
    /// How errors name the header.
    header_origin: String,
    server: Server,
    /// Measured latencies of the fitted requests, by request id.
    requests: BTreeMap<u64, RealLatency>,
    /// Windows of the fitted requests, in id order.
    windows: Vec<Vec<u64>>,
}

fn unreproducible(csv: &Path, message: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Unreproducible { path: csv.to_path_buf(), message: message.to_string() }
}

impl ObservedRun {
    /// Loads the trace at `csv` (its header beside it) and resolves its
    /// server: `given` (command-line knobs) over the header's knobs over
    /// BLIS's defaults, as `blis replay` does. `warm_up` overrides the
    /// header's count of leading requests left out.
    pub fn load(csv: &Path, warm_up: Option<u64>, given: &KnobValues) -> Result<ObservedRun, ExperimentError> {
        ObservedRun::of(csv, &RealTrace::load(csv, warm_up)?, given)
    }

    /// Like [`ObservedRun::load`], from the trace at `csv` already read as `real`.
    pub fn of(csv: &Path, real: &RealTrace, given: &KnobValues) -> Result<ObservedRun, ExperimentError> {
        let c = &real.counts;
        let failed = c.error + c.timeout;
        if failed as f64 > MAX_FAILURE_FRACTION * c.total as f64 {
            return Err(unreproducible(
                csv,
                format!(
                    "{failed} of its {} requests failed (more than {:.0} %): the server was overloaded; fit from a run it kept up with",
                    c.total,
                    MAX_FAILURE_FRACTION * 100.0
                ),
            ));
        }
        let header = HeaderKnobs::of(&real.header, &header_path(csv)).map_err(|e| unreproducible(csv, e))?;
        let given = KnobValues { trace: Some(csv.to_path_buf()), ..given.clone() };
        let header_origin = format!("trace header {}", header_path(csv).display());
        let scenario = Scenario::from_values(&given, vec![(header.values.clone(), header_origin.clone())]);
        let server = scenario.resolve().map_err(|e| unreproducible(csv, e))?.primary().server.clone();
        let timed: Vec<_> = real.requests.iter().filter_map(|r| r.ttft_us.map(|t| (r.request_id, t, r.e2e_us))).collect();
        if timed.is_empty() {
            return Err(unreproducible(
                csv,
                "no successful request has a time to first token (was it recorded with --no-stream?): nothing to fit",
            ));
        }
        let windows: Vec<Vec<u64>> = timed.chunks(REQUEST_BLOCK).map(|w| w.iter().map(|r| r.0).collect()).collect();
        let requests = timed
            .chunks(REQUEST_BLOCK)
            .enumerate()
            .flat_map(|(stage, w)| w.iter().map(move |&(id, ttft_us, e2e_us)| (id, RealLatency { stage: stage as u32, ttft_us, e2e_us })))
            .collect();
        let name = csv.file_stem().map_or_else(|| csv.display().to_string(), |s| s.to_string_lossy().into_owned());
        Ok(ObservedRun { name, csv: csv.to_path_buf(), given, header, header_origin, server, requests, windows })
    }

    /// The knobs its header records, as the replay applies them.
    pub fn header(&self) -> &HeaderKnobs {
        &self.header
    }

    /// The trace's replay with `set`, seeded with `seed`: what `blis replay`
    /// simulates, with these coefficients.
    pub fn scenario(&self, set: &CoefficientSet, seed: u64) -> Scenario {
        let join = |v: &[f64]| v.iter().map(f64::to_string).collect::<Vec<_>>().join(",");
        let given = KnobValues {
            latency_model: Some(set.latency_model.name().to_string()),
            alpha_coeffs: Some(join(&set.alpha)),
            beta_coeffs: Some(join(&set.beta)),
            coefficients: None,
            seed: Some(seed),
            ..self.given.clone()
        };
        Scenario::from_values(&given, vec![(self.header.values.clone(), self.header_origin.clone())])
    }

    /// Simulates the trace with `set`; the client-side latencies (µs) of
    /// every request the simulation completed, by id.
    fn simulate(&self, set: &CoefficientSet, seed: u64, observer: &mut dyn Observer) -> Result<BTreeMap<u64, (f64, f64)>, ExperimentError> {
        let resolved = self.scenario(set, seed).resolve().map_err(|e| unreproducible(&self.csv, e))?;
        let mut done = Completed::default();
        blis_scenario::simulate(resolved, Outputs { observers: vec![&mut Fanout::new(vec![&mut done, observer])], decisions: None })
            .map_err(|e| unreproducible(&self.csv, e))?;
        Ok(done.0)
    }

    /// Mean (TTFT, E2E) in ms of each window, measured and simulated, and
    /// the simulated failure fraction.
    fn scores(&self, sim: &BTreeMap<u64, (f64, f64)>) -> Vec<StageScore> {
        self.windows
            .iter()
            .map(|ids| {
                let real: Vec<&RealLatency> = ids.iter().filter_map(|id| self.requests.get(id)).collect();
                let simulated: Vec<&(f64, f64)> = ids.iter().filter_map(|id| sim.get(id)).collect();
                let ms = |v: Vec<f64>| (!v.is_empty()).then(|| mean(&v) / 1e3);
                StageScore {
                    real_ttft_ms: ms(real.iter().map(|r| r.ttft_us).collect()),
                    real_e2e_ms: ms(real.iter().map(|r| r.e2e_us).collect()),
                    sim_ttft_ms: ms(simulated.iter().map(|s| s.0).collect()),
                    sim_e2e_ms: ms(simulated.iter().map(|s| s.1).collect()),
                    real_failure: 0.0,
                    sim_failure: 1.0 - simulated.len() as f64 / ids.len() as f64,
                }
            })
            .collect()
    }
}

/// The client-side (TTFT, E2E) of every completed request, µs, by id.
#[derive(Default)]
struct Completed(BTreeMap<u64, (f64, f64)>);

impl Observer for Completed {
    fn observes_tokens(&self) -> bool {
        false
    }

    fn on_finish(&mut self, r: &RequestRecord) {
        if let (Outcome::Completed, Some(ttft), Some(e2e)) = (r.outcome, r.ttft(), r.e2e()) {
            self.0.insert(r.id.0, (ttft.as_us() as f64, e2e.as_us() as f64));
        }
    }
}

/// The `p`-th percentile of `v` (sorted in place), as every BLIS report computes it.
fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    blis_engine::metrics::percentile_sorted(v, p)
}

impl Measured for ObservedRun {
    fn name(&self) -> &str {
        &self.name
    }

    fn origin(&self) -> &Path {
        &self.csv
    }

    fn server(&self) -> &Server {
        &self.server
    }

    fn active(&self) -> bool {
        true
    }

    fn replay(&self, set: &CoefficientSet, seed: u64, observer: &mut dyn Observer) -> Result<Replayed<'_>, ExperimentError> {
        let sim = self.simulate(set, seed, observer)?;
        Ok(Replayed { stages: self.scores(&sim), requests: Some(Cow::Borrowed(&self.requests)) })
    }

    /// Per window: the APE of the mean E2E and mean TTFT; over the whole
    /// trace: the APE of the E2E p90 and p99 of the requests
    /// completed in both.
    fn headline_apes(&self, set: &CoefficientSet, seed: u64) -> Result<Vec<(Metric, f64)>, ExperimentError> {
        let sim = self.simulate(set, seed, &mut crate::validate::reproduce::NoObserver)?;
        let mut apes = Vec::new();
        for s in self.scores(&sim) {
            apes.extend(s.sim_e2e_ms.zip(s.real_e2e_ms).and_then(|(p, a)| ape(p, a)).map(|a| (Metric::E2eMean, a)));
            apes.extend(s.sim_ttft_ms.zip(s.real_ttft_ms).and_then(|(p, a)| ape(p, a)).map(|a| (Metric::TtftMean, a)));
        }
        let (mut real, mut simulated): (Vec<f64>, Vec<f64>) =
            self.requests.iter().filter_map(|(id, r)| sim.get(id).map(|s| (r.e2e_us, s.1))).unzip();
        if !real.is_empty() {
            for (metric, p) in [(Metric::E2eP90, 90.0), (Metric::E2eP99, 99.0)] {
                apes.extend(ape(percentile(&mut simulated, p), percentile(&mut real, p)).map(|a| (metric, a)));
            }
        }
        Ok(apes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_server_sections_map_onto_knobs() {
        let header: TraceHeader = blis_data::yaml::from_str(
            "trace_version: 2\nserver:\n  type: vllm\n  model: meta-llama/Llama-3.1-8B-Instruct\n  tensor_parallel: 2\n  max_num_seqs: 64\n  quantization: null\n  enforce_eager: false\nhardware:\n  gpu: H100\n  gpu_count: 2\n",
        )
        .unwrap();
        let HeaderKnobs { values: file, matched, ignored } = HeaderKnobs::of(&header, Path::new("t.header.yaml")).unwrap();
        assert_eq!(file.tp, Some(2));
        assert_eq!(file.max_num_seqs, Some(64));
        assert_eq!(file.hardware.as_deref(), Some("H100"));
        assert_eq!(file.model.as_deref(), Some("meta-llama/Llama-3.1-8B-Instruct"));
        assert!(matched.contains(&"tp=2".to_string()), "{matched:?}");
        assert_eq!(ignored, ["server.type", "server.enforce-eager"]);
        assert_eq!(file.max_concurrency, None, "no load generator, no cap");
        let recorded: TraceHeader =
            blis_data::yaml::from_str("trace_version: 2\nmode: real\nload_generator:\n  start_unix_us: 5\n  max_concurrency: 8\n").unwrap();
        let HeaderKnobs { values: file, matched, .. } = HeaderKnobs::of(&recorded, Path::new("t.header.yaml")).unwrap();
        assert_eq!(file.max_concurrency, Some(8));
        assert!(matched.contains(&"max-concurrency=8".to_string()), "{matched:?}");
    }

    /// Fuzzing found `hardware: 5` (and `hardware: A100`) silently ignored,
    /// the replay then simulating the default GPU. A name is the GPU, as
    /// `hardware.gpu` is; anything else is refused naming the header.
    #[test]
    fn a_scalar_hardware_section_is_the_gpu_name_or_refused() {
        let of = |hardware: &str| {
            HeaderKnobs::of(
                &blis_data::yaml::from_str(&format!("trace_version: 2\nhardware: {hardware}\n")).unwrap(),
                Path::new("t.header.yaml"),
            )
        };
        let named = of("A100-80GB").unwrap();
        assert_eq!((named.values.hardware.as_deref(), named.matched), (Some("A100-80GB"), vec!["hardware=A100-80GB".to_string()]));
        for (bad, field) in [
            ("5", "hardware"),
            ("[H100]", "hardware"),
            ("true", "hardware"),
            ("{gpu: 5}", "hardware.gpu"),
            ("{gpu: [H100]}", "hardware.gpu"),
        ] {
            let e = of(bad).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("trace header t.header.yaml: field `{field}` = ")) && e.contains("H100, A100-80GB"),
                "{bad}: {e}"
            );
        }
        assert_eq!(of("{gpu_count: 2}").unwrap().values.hardware, None, "no GPU named: the default");
    }
}
