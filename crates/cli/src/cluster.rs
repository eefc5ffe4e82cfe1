//! `blis run`'s cluster wiring: request labels, the policy bundle (the
//! `--policy-config` YAML, then the flags over it), control-plane knobs, the
//! decision-trace writer and the human summary of the cluster.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use blis_cluster::fitness::FitnessWeights;
use blis_cluster::metrics::ClusterSummary;
use blis_cluster::policy::routing::parse_scorer_list;
use blis_cluster::policy::scheduler::Preemption;
use blis_cluster::policy::{AdmissionSpec, PolicyBundle, PrioritySpec, RoutingSpec, SchedulerSpec};
use blis_cluster::slo::SloTargets;
use blis_cluster::trace::{AdmissionTrace, CounterfactualReport, DecisionSink, RoutingTrace};
use blis_cluster::{Cluster, ClusterConfig, ClusterError, ConfigError};
use blis_engine::request::Labels;
use blis_engine::time::Micros;
use blis_workload::labels::{LabelMix, Mix};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{BadInput, bad_input};
use crate::knobs::{ConfigReport, Knob, Knobs, Source, report_entry};
use crate::output::AtomicFile;
use crate::setup::Deployment;

/// Control-plane latencies above this are surely a unit mistake.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Where each bundle section came from, to name it in errors.
#[derive(Default)]
struct Origins {
    admission: String,
    priority: String,
    routing: String,
    scheduler: String,
    slo_targets: String,
    snapshots: String,
}

impl Origins {
    fn of(&self, path: &str) -> &str {
        match path.split('.').next().unwrap_or("") {
            "admission" => &self.admission,
            "priority" => &self.priority,
            "routing" => &self.routing,
            "scheduler" => &self.scheduler,
            "slo_targets" => &self.slo_targets,
            "snapshots" => &self.snapshots,
            _ => "",
        }
    }

    fn describe(&self, e: &ConfigError) -> BadInput {
        match self.of(&e.path) {
            "" => bad_input!("{e}"),
            origin => bad_input!("{origin}: {e}"),
        }
    }
}

/// A cluster run, resolved from knobs and files.
pub struct ClusterSetup {
    /// Everything the cluster is built from.
    pub config: ClusterConfig,
    /// Tenant and SLO-class assignment for the request stream.
    pub mix: LabelMix,
    /// Fitness weights, if given.
    pub fitness: Option<FitnessWeights>,
    /// Whether decisions are traced.
    pub trace: bool,
    origins: Origins,
}

/// Converts a YAML document to the neutral tree the policy bundle reads,
/// rejecting what JSON cannot hold (non-finite numbers, non-string keys).
fn yaml_to_json(v: serde_yaml_ng::Value, path: &str) -> Result<Value, String> {
    use serde_yaml_ng::Value as Y;
    let at = |p: &str| if p.is_empty() { "(top level)".to_string() } else { p.to_string() };
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                json!(i)
            } else if let Some(u) = n.as_u64() {
                json!(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f).map(Value::Number).ok_or_else(|| format!("{}: {f} is not a finite number", at(path)))?
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => {
            Value::Array(items.into_iter().enumerate().map(|(i, x)| yaml_to_json(x, &format!("{path}[{i}]"))).collect::<Result<_, _>>()?)
        }
        Y::Mapping(map) => {
            let mut out = serde_json::Map::new();
            for (k, x) in map {
                let Y::String(key) = k else { return Err(format!("{}: key {k:?} is not a string", at(path))) };
                let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                out.insert(key, yaml_to_json(x, &child)?);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => return Err(format!("{}: YAML tags ({}) are not supported", at(path), t.tag)),
    })
}

/// Reads a `--policy-config` file.
fn load_bundle(path: &Path) -> Result<(PolicyBundle, blis_cluster::policy::bundle::SectionsSet), BadInput> {
    let name = path.display();
    let text = blis_data::textfile::read(path).map_err(|e| bad_input!("cannot read --policy-config {name}: {e}"))?;
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).map_err(|e| bad_input!("--policy-config {name}: not valid YAML: {e}"))?;
    let doc = yaml_to_json(yaml, "").map_err(|e| bad_input!("--policy-config {name}: {e}"))?;
    PolicyBundle::from_value(&doc).map_err(|e| bad_input!("--policy-config {name}: {e}"))
}

/// Parses `class.metric=ms,...` into per-class targets over `base`.
fn apply_slo_targets(text: &str, base: &mut std::collections::BTreeMap<String, SloTargets>) -> Result<(), BadInput> {
    let flag = |m: String| bad_input!("--slo-targets {text:?}: {m}");
    for part in text.split(',') {
        let (key, value) = part.split_once('=').ok_or_else(|| flag(format!("`{part}` is not CLASS.METRIC=MS (e.g. realtime.ttft_ms=200)")))?;
        let (class, metric) = key.trim().rsplit_once('.').ok_or_else(|| flag(format!("`{key}` is not CLASS.METRIC")))?;
        let ms: f64 = value.trim().parse().map_err(|_| flag(format!("`{}` is not a number of milliseconds", value.trim())))?;
        let t = base.entry(class.to_string()).or_default();
        match metric {
            "ttft_ms" => t.ttft_ms = Some(ms),
            "itl_ms" => t.itl_ms = Some(ms),
            "e2e_ms" => t.e2e_ms = Some(ms),
            other => return Err(flag(format!("unknown metric `{other}`; allowed: ttft_ms, itl_ms, e2e_ms"))),
        }
    }
    Ok(())
}

/// Replaces a section's template when a flag names one; keeps the file's
/// parameters when the flag names the same template.
fn override_section<S: Clone>(
    current: &mut S,
    name_of: impl Fn(&S) -> &'static str,
    parse: impl Fn(&str) -> Result<S, ConfigError>,
    knob: &Knob<Option<String>>,
    flag: &str,
    origin: &mut String,
) -> Result<(), BadInput> {
    if let Some(name) = &knob.value {
        if name_of(current) != name {
            *current = parse(name).map_err(|e| bad_input!("--{flag} {name}: {}", e.message))?;
        }
        *origin = format!("--{flag}");
    }
    Ok(())
}

impl ClusterSetup {
    /// Resolves labels, policies and control-plane knobs; adds the chosen
    /// policies to `report` with their sources.
    pub fn resolve(k: &Knobs, d: &Deployment, report: &mut ConfigReport, trace_output: bool, workload_labels: &Labels) -> Result<ClusterSetup, BadInput> {
        let mix = LabelMix {
            tenants: k.tenant_mix.value.as_deref().map(|t| Mix::parse("tenant-mix", t)).transpose().map_err(|e| bad_input!("{e}"))?,
            slo_classes: k.slo_class_mix.value.as_deref().map(|t| Mix::parse("slo-class-mix", t)).transpose().map_err(|e| bad_input!("{e}"))?,
        };
        let mut labels = workload_labels.clone();
        mix.name_into(&mut labels);
        for names in [&mut labels.tenants, &mut labels.slo_classes] {
            if names.is_empty() {
                names.push("default".to_string());
            }
        }

        let mut origins = Origins::default();
        let (mut bundle, set) = match &k.policy_config.value {
            Some(path) => load_bundle(path)?,
            None => (PolicyBundle::default(), Default::default()),
        };
        let file_origin = k.policy_config.value.as_ref().map(|p| format!("--policy-config {}", p.display())).unwrap_or_default();
        for (is_set, origin) in [
            (set.admission, &mut origins.admission),
            (set.priority, &mut origins.priority),
            (set.routing, &mut origins.routing),
            (set.scheduler, &mut origins.scheduler),
            (set.slo_targets, &mut origins.slo_targets),
            (set.snapshots, &mut origins.snapshots),
        ] {
            *origin = if is_set { file_origin.clone() } else { String::new() };
        }

        override_section(&mut bundle.admission, AdmissionSpec::name, |n| AdmissionSpec::parse(n, None, "admission"), &k.admission_policy, "admission-policy", &mut origins.admission)?;
        override_section(&mut bundle.priority, PrioritySpec::name, |n| PrioritySpec::parse(n, None, "priority"), &k.priority_policy, "priority-policy", &mut origins.priority)?;
        override_section(&mut bundle.routing, RoutingSpec::name, |n| RoutingSpec::parse(n, None, "routing"), &k.routing_policy, "routing-policy", &mut origins.routing)?;
        override_section(&mut bundle.scheduler, SchedulerSpec::name, |n| SchedulerSpec::parse(n, None, "scheduler"), &k.scheduler, "scheduler", &mut origins.scheduler)?;
        if let Some(text) = &k.routing_scorers.value {
            let explicit_other = k.routing_policy.value.as_deref().is_some_and(|p| p != "weighted");
            if explicit_other {
                return Err(bad_input!("--routing-scorers needs --routing-policy weighted, got --routing-policy {}", k.routing_policy.value.as_deref().unwrap_or("")));
            }
            let scorers = parse_scorer_list(text).map_err(|m| bad_input!("--routing-scorers {text:?}: {m}"))?;
            bundle.routing = RoutingSpec::parse("weighted", Some(&json!({ "scorers": scorers })), "routing").map_err(|e| bad_input!("--routing-scorers {text:?}: {e}"))?;
            origins.routing = "--routing-scorers".to_string();
        }
        if let Some(victim) = &k.preemption.value {
            let v: Preemption = serde_json::from_value(json!(victim)).map_err(|_| bad_input!("--preemption {victim}: unknown; allowed: tail, lowest-priority"))?;
            bundle.scheduler = bundle.scheduler.clone().with_preemption(v);
            origins.scheduler = "--preemption".to_string();
        }
        if let Some(text) = &k.slo_targets.value {
            apply_slo_targets(text, &mut bundle.slo_targets)?;
            origins.slo_targets = "--slo-targets".to_string();
        }
        if let Some(text) = &k.snapshot_refresh.value {
            bundle.snapshots.apply_overrides(text, "--snapshot-refresh").map_err(|e| bad_input!("--snapshot-refresh {text:?}: {}", e.message))?;
            origins.snapshots = "--snapshot-refresh".to_string();
        }
        // Policies not chosen by a knob are reported with where they came from.
        for (key, name, knob, origin) in [
            ("admission-policy", bundle.admission.name(), &k.admission_policy, &origins.admission),
            ("priority-policy", bundle.priority.name(), &k.priority_policy, &origins.priority),
            ("routing-policy", bundle.routing.name(), &k.routing_policy, &origins.routing),
            ("scheduler", bundle.scheduler.name(), &k.scheduler, &origins.scheduler),
        ] {
            if knob.value.is_none() {
                let source = match origin.as_str() {
                    "" => Source::Default,
                    o if o.starts_with("--policy-config") => Source::File,
                    _ => Source::Derived,
                };
                report_entry(report, key, &name, source);
            }
        }

        let latency = |knob: &Knob<Option<u64>>, flag: &str| -> Result<Micros, BadInput> {
            let us = knob.value.unwrap_or(0);
            if us > MAX_LATENCY_US {
                return Err(bad_input!("--{flag} {us}: at most {MAX_LATENCY_US} µs (one hour)"));
            }
            Ok(Micros(us))
        };
        let trace = match (k.trace_level.value.as_deref(), trace_output) {
            (None, out) => out,
            (Some("none"), false) => false,
            (Some("none"), true) => return Err(bad_input!("--trace-output needs --trace-level decisions (got --trace-level none)")),
            (Some("decisions"), true) => true,
            (Some("decisions"), false) => return Err(bad_input!("--trace-level decisions needs --trace-output PATH")),
            (Some(other), _) => return Err(bad_input!("--trace-level {other}: unknown; allowed: none, decisions")),
        };
        let fitness = k
            .fitness_weights
            .value
            .as_deref()
            .map(|t| FitnessWeights::parse(t).map_err(|m| bad_input!("--fitness-weights {t:?}: {m}")))
            .transpose()?;

        let config = ClusterConfig {
            num_instances: k.num_instances.value.unwrap_or(1),
            instance: d.instance.clone(),
            latency: d.latency.clone(),
            policies: bundle,
            admission_latency: latency(&k.admission_latency, "admission-latency")?,
            routing_latency: latency(&k.routing_latency, "routing-latency")?,
            labels,
            counterfactual_k: k.counterfactual_k.value.unwrap_or(0),
        };
        Ok(ClusterSetup { config, mix, fitness, trace, origins })
    }

    /// Builds the cluster, tracing decisions into `sink` if given; invalid
    /// parameters name the flag or file they came from.
    pub fn build<'s>(&self, sink: Option<&'s mut dyn DecisionSink>) -> Result<Cluster<'s>, BadInput> {
        let built = match sink {
            Some(sink) => Cluster::traced(self.config.clone(), sink),
            None => Cluster::new(self.config.clone()),
        };
        built.map_err(|e| match e {
            ClusterError::Config(c) => self.origins.describe(&c),
            other => bad_input!("{other}"),
        })
    }
}

/// Writes one JSON line per decision (`--trace-output`), and a summary line at the end.
pub struct TraceWriter {
    file: AtomicFile,
    labels: Labels,
    admissions: u64,
    routings: u64,
    error: Option<std::io::Error>,
}

impl TraceWriter {
    /// Opens the trace file (moved into place only by [`TraceWriter::finish`]).
    pub fn create(path: &Path, labels: Labels) -> Result<TraceWriter, BadInput> {
        Ok(TraceWriter { file: AtomicFile::create("trace-output", path)?, labels, admissions: 0, routings: 0, error: None })
    }

    fn line(&mut self, v: &impl Serialize) {
        if self.error.is_none() {
            let w = self.file.writer();
            self.error = serde_json::to_writer(&mut *w, v).map_err(std::io::Error::from).and_then(|()| w.write_all(b"\n")).err();
        }
    }

    /// Writes the summary line and moves the file into place.
    pub fn finish(mut self, counterfactual: Option<&CounterfactualReport>) -> anyhow::Result<()> {
        #[derive(Serialize)]
        struct Summary<'a> {
            kind: &'static str,
            admission_decisions: u64,
            routing_decisions: u64,
            counterfactual: Option<&'a CounterfactualReport>,
        }
        let summary = Summary { kind: "summary", admission_decisions: self.admissions, routing_decisions: self.routings, counterfactual };
        self.line(&summary);
        if let Some(e) = self.error {
            return Err(e).context("writing --trace-output");
        }
        self.file.commit()
    }
}

#[derive(Serialize)]
struct AdmissionLine<'a> {
    t_us: u64,
    kind: &'static str,
    request: u64,
    tenant: String,
    slo_class: String,
    priority: f64,
    policy: &'a str,
    admitted: bool,
    reason: Option<&'static str>,
    /// Hold before routing (shaping admission); 0 when routed at once.
    delay_us: u64,
}

#[derive(Serialize)]
struct Candidate {
    instance: u32,
    /// The policy's total score; null when it does not score.
    score: Option<f64>,
    components: BTreeMap<&'static str, f64>,
    queue_depth: u32,
    batch_size: u32,
    kv_utilization: f64,
    in_flight: u32,
    pending: u32,
    snapshot_age_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_ttft_ms: Option<f64>,
}

#[derive(Serialize)]
struct Counterfactual<'a> {
    top_k: &'a [u32],
    regret_ms: f64,
}

#[derive(Serialize)]
struct RoutingLine<'a> {
    t_us: u64,
    kind: &'static str,
    request: u64,
    policy: &'a str,
    chosen: u32,
    candidates: Vec<Candidate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counterfactual: Option<Counterfactual<'a>>,
}

impl DecisionSink for TraceWriter {
    fn admission(&mut self, d: &AdmissionTrace<'_>) {
        self.admissions += 1;
        let m = &d.request.meta;
        let line = AdmissionLine {
            t_us: d.time.as_us(),
            kind: "admission",
            request: d.request.id.0,
            tenant: self.labels.tenant(m.tenant),
            slo_class: self.labels.slo_class(m.slo_class),
            priority: m.priority,
            policy: d.policy,
            admitted: d.rejected.is_none(),
            reason: d.rejected.map(|r| r.as_str()),
            delay_us: d.delay.as_us(),
        };
        self.line(&line);
    }

    fn routing(&mut self, d: &RoutingTrace<'_>) {
        self.routings += 1;
        let names = d.scores.components();
        let candidates = d
            .snapshots
            .iter()
            .enumerate()
            .map(|(i, s)| Candidate {
                instance: s.instance,
                score: d.scores.total(i),
                components: names.iter().enumerate().map(|(c, &n)| (n, d.scores.component(i, c))).collect(),
                queue_depth: s.queue_depth,
                batch_size: s.batch_size,
                kv_utilization: s.kv_utilization,
                in_flight: s.in_flight,
                pending: s.pending,
                snapshot_age_us: (d.time - s.timestamp).as_us(),
                estimated_ttft_ms: d.counterfactual.map(|cf| cf.estimated_ttft_ms[i]),
            })
            .collect();
        let line = RoutingLine {
            t_us: d.time.as_us(),
            kind: "routing",
            request: d.request.id.0,
            policy: d.policy,
            chosen: d.chosen,
            candidates,
            counterfactual: d.counterfactual.map(|cf| Counterfactual { top_k: cf.top_k, regret_ms: cf.regret_ms }),
        };
        self.line(&line);
    }
}

/// Whether the cluster section of the human summary has anything to say.
pub fn worth_showing(s: &ClusterSummary) -> bool {
    let p = &s.policies;
    s.num_instances > 1
        || (p.admission.name, p.priority.name, p.routing.name, p.scheduler.name) != ("always-admit", "constant", "round-robin", "fcfs")
        || s.slo_classes.len() > 1
        || s.tenants.len() > 1
}

/// The cluster part of the human summary.
pub fn table(s: &ClusterSummary) -> String {
    let mut out = String::new();
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<44}{v}");
    };
    let _ = writeln!(out, "{:-^84}", " Cluster ");
    let p = &s.policies;
    line(&mut out, "Instances:", s.num_instances.to_string());
    line(&mut out, "Admission / priority:", format!("{} / {}", p.admission.name, p.priority.name));
    line(&mut out, "Routing / scheduler:", format!("{} / {}", p.routing.name, p.scheduler.name));
    let r = &s.requests;
    line(&mut out, "Arrived / admitted / rejected:", format!("{} / {} / {}", r.arrived, r.admitted, r.rejected));
    if let Some(d) = &r.admission_delay_ms {
        line(&mut out, "Delayed by admission; wait (ms) mean / p99:", format!("{}; {:.2} / {:.2}", r.delayed, d.mean, d.p99));
    }
    line(&mut out, "Goodput (req/s) / SLO attainment:", format!("{:.2} / {:.1}%", s.goodput.requests_per_s, s.goodput.slo_attainment * 100.0));
    line(&mut out, "Load imbalance (max/mean requests):", format!("{:.2}", s.load_balance.imbalance_max_over_mean));
    line(&mut out, "Priority inversions / HOL blocking:", format!("{} / {}", s.anomalies.priority_inversions, s.anomalies.hol_blocking_events));
    line(&mut out, "Jain fairness over tenants:", format!("{:.3}", s.fairness.jain_index_over_tenants));
    if let Some(c) = &s.counterfactual {
        line(&mut out, "Routing regret (ms) mean / p99; suboptimal:", format!("{:.2} / {:.2}; {} of {}", c.regret_ms.mean, c.regret_ms.p99, c.suboptimal_decisions, c.decisions));
    }
    if let Some(f) = &s.fitness {
        line(&mut out, "Fitness:", format!("{:.4}", f.score));
    }
    if s.slo_classes.len() > 1 {
        let _ = writeln!(out, "{:<16}{:>9}{:>9}{:>10}{:>11}{:>12}{:>12}{:>12}", "SLO class", "arrived", "rejected", "completed", "attained", "TTFT p50", "TTFT p99", "E2E p99");
        for (name, g) in &s.slo_classes {
            let _ = writeln!(
                out,
                "{name:<16}{:>9}{:>9}{:>10}{:>10.1}%{:>12.2}{:>12.2}{:>12.2}",
                g.arrived,
                g.rejected,
                g.completed,
                g.slo_attainment * 100.0,
                g.latency_ms.ttft.p50,
                g.latency_ms.ttft.p99,
                g.latency_ms.e2e.p99
            );
        }
    }
    out
}
