//! The control plane of a scenario: the policy bundle (the `--policy-config`
//! YAML, then the knobs over it), the control-plane knobs, fitness weights
//! and whether decisions are traced; built with the scenario's fleet
//! ([`crate::fleet`]) into a cluster.

use std::path::Path;

use blis_cluster::fitness::FitnessWeights;
use blis_cluster::policy::bundle::SectionsSet;
use blis_cluster::policy::routing::parse_scorer_list;
use blis_cluster::policy::scheduler::Preemption;
use blis_cluster::policy::{AdmissionSpec, PolicyBundle, PrioritySpec, RoutingSpec, SchedulerSpec};
use blis_cluster::slo::SloTargets;
use blis_cluster::trace::DecisionSink;
use blis_cluster::{Cluster, ClusterConfig, ClusterError, ConfigError};
use blis_engine::request::Labels;
use blis_engine::time::Micros;
use serde_json::{Value, json};

use crate::error::{ScenarioError, invalid};
use crate::fleet::Fleet;
use crate::knobs::{ConfigReport, Knob, KnobId, Knobs, Source, report_entry};

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
    autoscale: String,
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
            p if p.starts_with("autoscale") || p.starts_with("node_pools") || p.starts_with("pools") => &self.autoscale,
            _ => "",
        }
    }

    fn describe(&self, e: &ConfigError) -> ScenarioError {
        match self.of(&e.path) {
            "" => invalid!("{e}"),
            origin => invalid!("{origin}: {e}"),
        }
    }
}

/// A cluster's control plane, resolved from knobs and files.
pub struct ClusterSetup {
    /// Everything the cluster is built from but its fleet (`pools`,
    /// `scaling` and `pd` are the fleet's, [`ClusterSetup::config`]).
    pub control: ClusterConfig,
    /// Fitness weights, if given.
    pub fitness: Option<FitnessWeights>,
    /// Whether decisions are traced.
    pub trace: bool,
    origins: Origins,
}

/// The `--policy-config` file's sections and which of them it sets; the
/// defaults (nothing set) without one.
pub fn policy_config(k: &Knobs) -> Result<(PolicyBundle, SectionsSet), ScenarioError> {
    match &k.policy_config.value {
        Some(path) => load_bundle(path),
        None => Ok((PolicyBundle::default(), SectionsSet::default())),
    }
}

/// Reads a `--policy-config` file.
fn load_bundle(path: &Path) -> Result<(PolicyBundle, SectionsSet), ScenarioError> {
    let name = path.display();
    let text = blis_data::textfile::read(path).map_err(|e| invalid!("cannot read --policy-config {name}: {e}"))?;
    let doc: Value = blis_data::yaml::from_str(&text).map_err(|e| invalid!(knob: policy_config, "{name}: not valid YAML: {e}"))?;
    PolicyBundle::from_value(&doc).map_err(|e| invalid!(knob: policy_config, "{name}: {e}"))
}

/// Parses `class.metric=ms,...` into per-class targets over `base`.
fn apply_slo_targets(text: &str, base: &mut std::collections::BTreeMap<String, SloTargets>) -> Result<(), ScenarioError> {
    let flag = |m: String| invalid!(knob: slo_targets, "{text:?}: {m}");
    let mut seen = Vec::new();
    for part in text.split(',') {
        let (key, value) =
            part.split_once('=').ok_or_else(|| flag(format!("`{part}` is not CLASS.METRIC=MS (e.g. realtime.ttft_ms=200)")))?;
        let (class, metric) = key.trim().rsplit_once('.').ok_or_else(|| flag(format!("`{key}` is not CLASS.METRIC")))?;
        if seen.contains(&(class, metric)) {
            return Err(flag(format!("`{}` is given twice", key.trim())));
        }
        seen.push((class, metric));
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
    id: KnobId,
    origin: &mut String,
) -> Result<(), ScenarioError> {
    if let Some(name) = &knob.value {
        if name_of(current) != name {
            *current = parse(name).map_err(|e| invalid!(knob = id, "{name}: {}", e.message))?;
        }
        *origin = format!("--{}", id.flag());
    }
    Ok(())
}

impl ClusterSetup {
    /// Resolves policies and control-plane knobs for `fleet` and a workload
    /// whose requests carry `labels`, over the sections of the policy file
    /// ([`policy_config`]); adds the chosen policies to `report` with their
    /// sources.
    pub fn resolve(
        k: &Knobs,
        policy: (PolicyBundle, SectionsSet),
        fleet: &Fleet,
        report: &mut ConfigReport,
        trace_output: bool,
        labels: &Labels,
    ) -> Result<ClusterSetup, ScenarioError> {
        let mut origins = Origins::default();
        let (mut bundle, set) = policy;
        let file_origin = k.policy_origin();
        for (is_set, origin) in [
            (set.admission, &mut origins.admission),
            (set.priority, &mut origins.priority),
            (set.routing, &mut origins.routing),
            (set.scheduler, &mut origins.scheduler),
            (set.slo_targets, &mut origins.slo_targets),
            (set.snapshots, &mut origins.snapshots),
            (set.autoscale || set.node_pools || set.pools, &mut origins.autoscale),
        ] {
            *origin = if is_set { file_origin.clone() } else { String::new() };
        }

        override_section(
            &mut bundle.admission,
            AdmissionSpec::name,
            |n| AdmissionSpec::parse(n, None, "admission"),
            &k.admission_policy,
            KnobId::admission_policy,
            &mut origins.admission,
        )?;
        override_section(
            &mut bundle.priority,
            PrioritySpec::name,
            |n| PrioritySpec::parse(n, None, "priority"),
            &k.priority_policy,
            KnobId::priority_policy,
            &mut origins.priority,
        )?;
        override_section(
            &mut bundle.routing,
            RoutingSpec::name,
            |n| RoutingSpec::parse(n, None, "routing"),
            &k.routing_policy,
            KnobId::routing_policy,
            &mut origins.routing,
        )?;
        override_section(
            &mut bundle.scheduler,
            SchedulerSpec::name,
            |n| SchedulerSpec::parse(n, None, "scheduler"),
            &k.scheduler,
            KnobId::scheduler,
            &mut origins.scheduler,
        )?;
        if let Some(text) = &k.routing_scorers.value {
            let explicit_other = k.routing_policy.value.as_deref().is_some_and(|p| p != "weighted");
            if explicit_other {
                return Err(invalid!(
                    knob: routing_scorers,
                    "needs --routing-policy weighted, got --routing-policy {}",
                    k.routing_policy.value.as_deref().unwrap_or("")
                ));
            }
            let scorers = parse_scorer_list(text).map_err(|m| invalid!(knob: routing_scorers, "{text:?}: {m}"))?;
            bundle.routing = RoutingSpec::parse("weighted", Some(&json!({ "scorers": scorers })), "routing")
                .map_err(|e| invalid!(knob: routing_scorers, "{text:?}: {e}"))?;
            origins.routing = "--routing-scorers".to_string();
        }
        if fleet.pd.is_some() && origins.routing.is_empty() {
            // Disaggregated, the cluster's routing chooses the decode instance: by load and KV headroom.
            let scorers = parse_scorer_list(crate::pd::DEFAULT_DECODE_SCORERS).map_err(|m| invalid!("{m}"))?;
            bundle.routing =
                RoutingSpec::parse("weighted", Some(&json!({ "scorers": scorers })), "routing").map_err(|e| invalid!("{e}"))?;
            report_entry(report, "routing-scorers", &crate::pd::DEFAULT_DECODE_SCORERS, Source::Derived);
        }
        if let Some(victim) = &k.preemption.value {
            let v: Preemption = serde_json::from_value(json!(victim))
                .map_err(|_| invalid!(knob: preemption, "{victim}: unknown; allowed: tail, lowest-priority"))?;
            bundle.scheduler = bundle.scheduler.clone().with_preemption(v);
            origins.scheduler = "--preemption".to_string();
        }
        if let Some(text) = &k.slo_targets.value {
            apply_slo_targets(text, &mut bundle.slo_targets)?;
            origins.slo_targets = "--slo-targets".to_string();
        }
        if k.data_parallel_size.value.is_some() {
            data_parallel(&mut bundle, &mut origins, report);
        }
        if let Some(text) = &k.snapshot_refresh.value {
            bundle
                .snapshots
                .apply_overrides(text, "--snapshot-refresh")
                .map_err(|e| invalid!(knob: snapshot_refresh, "{text:?}: {}", e.message))?;
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

        let latency = |knob: &Knob<u64>, id: KnobId| -> Result<Micros, ScenarioError> {
            let us = knob.value;
            if us > MAX_LATENCY_US {
                return Err(invalid!(knob = id, "{us}: at most {MAX_LATENCY_US} µs (one hour)"));
            }
            Ok(Micros(us))
        };
        let trace = match (k.trace_level.value.as_deref(), trace_output) {
            (None, out) => out,
            (Some("none"), false) => false,
            (Some("none"), true) => return Err(invalid!("--trace-output needs --trace-level decisions (got --trace-level none)")),
            (Some("decisions"), true) => true,
            (Some("decisions"), false) => return Err(invalid!(knob: trace_level, "decisions needs --trace-output PATH")),
            (Some(other), _) => return Err(invalid!(knob: trace_level, "{other}: unknown; allowed: none, decisions")),
        };
        let fitness = k
            .fitness_weights
            .value
            .as_deref()
            .map(|t| FitnessWeights::parse(t).map_err(|m| invalid!(knob: fitness_weights, "{t:?}: {m}")))
            .transpose()?;

        let control = ClusterConfig {
            pools: Vec::new(),
            scaling: Vec::new(),
            pd: None,
            policies: bundle,
            admission_latency: latency(&k.admission_latency, KnobId::admission_latency)?,
            routing_latency: latency(&k.routing_latency, KnobId::routing_latency)?,
            labels: labels.clone(),
            counterfactual_k: k.counterfactual_k.value,
        };
        let setup = ClusterSetup { control, fitness, trace, origins };
        setup.config(fleet).validate().map_err(|e| setup.describe(e))?;
        Ok(setup)
    }

    /// The control plane of one server's engine replicas as vLLM runs them:
    /// with `replicas` > 1, vLLM's data-parallel load balancer
    /// ([`PolicyBundle::vllm_data_parallel`]), else the pass-through
    /// defaults; decisions take no time, nothing is traced.
    pub fn one_server(replicas: u32, labels: &Labels) -> ClusterSetup {
        let policies = if replicas > 1 { PolicyBundle::vllm_data_parallel() } else { PolicyBundle::default() };
        let control = ClusterConfig { labels: labels.clone(), ..ClusterConfig::of(Vec::new(), policies) };
        ClusterSetup { control, fitness: None, trace: false, origins: Origins::default() }
    }

    /// The whole cluster: the control plane and `fleet`.
    pub fn config(&self, fleet: &Fleet) -> ClusterConfig {
        ClusterConfig { pools: fleet.cluster_pools(), scaling: fleet.scaling.clone(), pd: fleet.pd.clone(), ..self.control.clone() }
    }

    /// An error building the cluster, naming the flag or file its value came from.
    fn describe(&self, e: ClusterError) -> ScenarioError {
        match e {
            ClusterError::Config(c) => self.origins.describe(&c),
            other => invalid!("{other}"),
        }
    }

    /// Builds the cluster of `fleet`, tracing decisions into `sink` if
    /// given; invalid parameters name the flag or file they came from.
    pub fn build<'s>(&self, fleet: &Fleet, sink: Option<&'s mut dyn DecisionSink>) -> Result<Cluster<'s>, ScenarioError> {
        let config = self.config(fleet);
        let built = match sink {
            Some(sink) => Cluster::traced(config, sink),
            None => Cluster::new(config),
        };
        built.map_err(|e| self.describe(e))
    }
}

/// vLLM's `--data-parallel-size N` ([`crate::fleet`] counts its engine
/// replicas): vLLM's internal load balancer
/// ([`PolicyBundle::vllm_data_parallel`]'s routing and snapshot refresh)
/// where no flag or policy file chose them.
fn data_parallel(bundle: &mut PolicyBundle, origins: &mut Origins, report: &mut ConfigReport) {
    let vllm = PolicyBundle::vllm_data_parallel();
    if origins.routing.is_empty() {
        bundle.routing = vllm.routing;
        origins.routing = "--data-parallel-size".to_string();
    }
    if origins.snapshots.is_empty() {
        let s = vllm.snapshots;
        bundle.snapshots = s;
        origins.snapshots = "--data-parallel-size".to_string();
        report_entry(report, "snapshot-refresh", &format!("queue-depth={},batch-size={}", s.queue_depth, s.batch_size), Source::Derived);
    }
}
