//! # blis-scenario: one scenario, resolved once, simulated by every front end
//!
//! A [`Scenario`] is everything that defines a run, as given: every knob
//! (model, GPU, TP, vLLM server flags, latency model and coefficients;
//! instances and policies; the workload; horizon; seed) with where its
//! value came from (flag, file, default). [`Scenario::resolve`] applies
//! vLLM's rules once ([`deployment`]), opens the workload through
//! `blis_workload::open` ([`workload`]), resolves the fleet's pools
//! ([`shape`], [`fleet`]) and builds the cluster's policies ([`cluster`]),
//! recording every value it derives; [`simulate`] runs the
//! result on the engine's event driver and returns the one report schema
//! ([`report`]). `blis run`, `replay`, `serve` and `observe` map their
//! flags and files to a scenario; `validate` and `fit` map experiment
//! directories to its knobs (and reproduce them through [`simulate`]); the
//! Python binding maps a dict.
//!
//! ```text
//!  flags, --config, trace header, experiment records ─► KnobValues layers ─► Knobs (value + source)
//!                                                                               │ Scenario::resolve
//!            Deployment (Server + latency model) ◄──────────────────────────────┤
//!            Fleet (pools, scaling groups, P/D) ◄───────────────────────────────┤
//!            OpenedWorkload (blis_workload::open) ◄─────────────────────────────┤
//!            ClusterSetup (policies, control plane) ◄───────────────────────────┘
//!                                     │ simulate(resolved, outputs)
//!                                     ▼
//!            Cluster on the engine driver ──► RunReport (schema v1) + observers + decision sink
//! ```
//!
//! Reading order: [`knobs`] (the one table of knobs), [`deployment`],
//! [`shape`] and [`fleet`] (with [`pd`] and [`autoscale`]), [`workload`],
//! [`cluster`], [`report`], then this page's [`simulate`].
//!
//! ## Example
//!
//! ```
//! use blis_scenario::{Outputs, Scenario, knobs::KnobValues};
//!
//! let given = KnobValues { model: Some("meta-llama/llama-3.1-8b-instruct".into()), num_requests: Some(50), ..KnobValues::default() };
//! let resolved = Scenario::from_values(&given, Vec::new()).resolve().unwrap();
//! let report = blis_scenario::simulate(resolved, Outputs::default()).unwrap();
//! assert_eq!(report.summary.requests.completed, 50);
//! assert_eq!(report.config["max-num-seqs"]["source"], "default");
//! ```

#![warn(missing_docs)]

pub mod autoscale;
pub mod cluster;
pub mod count;
pub mod deployment;
pub mod error;
pub mod evaluate;
pub mod fleet;
#[cfg(feature = "clap")]
mod help;
pub mod knob_file;
pub mod knobs;
pub mod pd;
pub mod report;
pub mod shape;
pub mod sweep;
pub mod tier_list;
pub mod tiers;
pub mod workload;

use blis_cluster::fleet::{Replicas, Role};
use blis_cluster::trace::DecisionSink;
use blis_engine::instance::{Fanout, Observer};
use blis_engine::time::Micros;
use blis_workload::OpenedWorkload;

pub use error::ScenarioError;

use crate::cluster::ClusterSetup;
use crate::deployment::{Deployment, LongContext, seconds};
use crate::error::invalid;
use crate::fleet::{Fleet, FleetPool};
use crate::knob_file::FileOrigins;
use crate::knobs::{ConfigReport, KnobId, KnobValues, Knobs, Source, report_entry};
use crate::report::{ClientLatencyReport, DeploymentInfo, GroupObservers, RunReport, SCHEMA_VERSION, SimulatorInfo};

/// Everything that defines a run, as given.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Every knob, with its value and where it came from.
    pub knobs: Knobs,
    /// The files some values came from (knob names, how to name the file),
    /// so that an error about such a value names the file.
    pub files: FileOrigins,
    /// What to do with a `--max-model-len` above the model's.
    pub long_context: LongContext,
    /// Whether the caller will trace decisions (gives [`Outputs::decisions`]).
    pub trace_decisions: bool,
}

/// A scenario with every rule applied: ready to simulate.
pub struct ResolvedScenario {
    /// The pools (each with its server and latency model), their scaling
    /// groups and P/D policy: the one copy of each pool's configuration.
    pub fleet: Fleet,
    /// The control plane.
    pub cluster: ClusterSetup,
    /// The workload, ready to stream.
    pub workload: OpenedWorkload,
    /// Where the simulation stops, if it is cut.
    pub horizon: Option<Micros>,
    /// The workload's seed (the report's `seed`).
    pub seed: u64,
    /// Every knob with its value and source, derived values included.
    pub config: ConfigReport,
    /// Things worth telling the user, one line each, in the order found.
    pub warnings: Vec<String>,
}

impl ResolvedScenario {
    /// The server and latency model the report's `deployment` describes
    /// ([`Fleet::primary`]): of a single pool, its own.
    pub fn primary(&self) -> &Deployment {
        &self.fleet.primary().deployment
    }

    /// A run of `replicas` engine replicas of one server (`deployment`, as
    /// vLLM's `--data-parallel-size` runs them) on `workload`, the report
    /// seeded `seed`: what `blis validate` and `blis fit` reproduce a real
    /// run with, simulated by [`simulate`] like any scenario.
    pub fn one_server(deployment: Deployment, replicas: u32, workload: OpenedWorkload, seed: u64) -> ResolvedScenario {
        let name = deployment.server.gpu_name.clone();
        let pool = FleetPool { name, role: Role::Serve, deployment, replicas: Replicas::Fixed(replicas) };
        let fleet = Fleet { pools: vec![pool], scaling: Vec::new(), pd: None };
        let cluster = ClusterSetup::one_server(replicas, &workload.labels);
        ResolvedScenario { fleet, cluster, workload, horizon: None, seed, config: ConfigReport::new(), warnings: Vec::new() }
    }

    /// Makes every instance (of every pool) record vLLM's KV events and
    /// hand them to observers ([`blis_engine::instance::Observer::on_kv_events`]).
    /// vLLM turns its hybrid KV cache manager off to publish KV events, and
    /// so does this.
    pub fn record_kv_events(&mut self) {
        let primary = &self.fleet.primary().deployment.server;
        if primary.instance.hybrid_kv.is_some() {
            self.config.remove("kv-cache-groups");
            if primary.kv_budget.is_some() {
                let unified = primary.instance.hybrid_kv.map_or(primary.instance.num_gpu_blocks, |h| h.unified_blocks);
                knobs::report_entry(&mut self.config, "num-gpu-blocks", &unified, knobs::Source::Derived);
            }
        }
        for instance in self.fleet.instances_mut() {
            instance.disable_hybrid_kv();
            instance.kv_events = true;
        }
    }
}

impl Scenario {
    /// The scenario of `given` values (flags: [`Source::Flag`]) over
    /// `files` (each a layer of values and how to name its file), over the defaults.
    pub fn from_values(given: &KnobValues, files: Vec<(KnobValues, String)>) -> Scenario {
        let mut layers = vec![(given, Source::Flag)];
        layers.extend(files.iter().map(|(values, _)| (values, Source::File)));
        let origins = files.iter().map(|(values, origin)| (values.keys(), origin.clone())).collect();
        Scenario { knobs: Knobs::layered(&layers), files: origins, long_context: LongContext::from_env(), trace_decisions: false }
    }

    /// Applies every rule: the deployment (vLLM's), the workload, the
    /// cluster. Errors are one line naming the knob, or the file a value came from.
    pub fn resolve(&self) -> Result<ResolvedScenario, ScenarioError> {
        self.resolve_knobs().map_err(|e| self.knobs.blame(e, &self.files))
    }

    /// Resolves and builds the cluster without simulating: the errors
    /// `blis run` would give before its first event, at a fraction of its cost.
    pub fn check(&self) -> Result<(), ScenarioError> {
        let resolved = self.resolve()?;
        resolved.cluster.build(&resolved.fleet, None).map(drop)
    }

    /// Resolves the fleet alone (its pools, each with its server as vLLM
    /// would run it, and their sizes), not the workload or the control
    /// plane: what `blis plan` checks a candidate with before simulating it.
    /// Errors as [`Scenario::resolve`]'s.
    pub fn fleet(&self) -> Result<Fleet, ScenarioError> {
        let k = &self.knobs;
        let fleet = cluster::policy_config(k).and_then(|(bundle, set)| {
            let mut config = k.report();
            shape::resolve(k, &bundle, set.autoscale || set.node_pools, self.long_context, &mut config, &mut Vec::new())
        });
        fleet.map_err(|e| self.knobs.blame(e, &self.files))
    }

    fn resolve_knobs(&self) -> Result<ResolvedScenario, ScenarioError> {
        let k = &self.knobs;
        let (bundle, set) = cluster::policy_config(k)?;
        // Node pools run the replicas: the deployment is the first pool's.
        let first_pool = autoscale::deployment_knobs(k, &bundle.node_pools);
        let mut config = first_pool.as_ref().map_or(k, |(pk, _)| pk).report();
        let mut warnings = Vec::new();
        let by_file = set.autoscale || set.node_pools;
        let mut fleet = shape::resolve(k, &bundle, by_file, self.long_context, &mut config, &mut warnings)?;
        let workload = workload::open(k, &mut config)?;
        warnings.extend(workload.warnings.iter().cloned());
        if let Some(t) = workload.client_timeout
            && k.client_timeout.value.is_none()
        {
            fleet.instances_mut().filter(|i| i.client_timeout.is_none()).for_each(|i| i.client_timeout = Some(t));
            report_entry(&mut config, "client-timeout", &t.as_secs_f64(), Source::Derived);
        }
        let horizon = k.horizon.value.map(|s| seconds(KnobId::horizon, s)).transpose()?;
        let cluster = ClusterSetup::resolve(k, (bundle, set), &fleet, &mut config, self.trace_decisions, &workload.labels)?;
        // One line per thing worth saying: pools of one GPU say the same.
        let mut seen = std::collections::BTreeSet::new();
        warnings.retain(|w| seen.insert(w.clone()));
        Ok(ResolvedScenario { fleet, cluster, seed: workload.seed, workload, horizon, config, warnings })
    }
}

/// Where a simulation's outputs go besides its report.
#[derive(Default)]
pub struct Outputs<'a> {
    /// Every engine callback: per-request writers, progress, anything else.
    pub observers: Vec<&'a mut dyn Observer>,
    /// Every admission and routing decision, as it is made.
    pub decisions: Option<&'a mut dyn DecisionSink>,
}

/// The error of a workload that failed while streaming.
pub(crate) fn workload_failed(e: &blis_workload::error::WorkloadError) -> ScenarioError {
    invalid!("reading the workload: {e}")
}

/// Simulates a resolved scenario (always as a cluster: one instance behind
/// the pass-through policies by default) and reports. Deterministic: the
/// same scenario gives the same report, byte for byte.
pub fn simulate(resolved: ResolvedScenario, outputs: Outputs<'_>) -> Result<RunReport, ScenarioError> {
    let ResolvedScenario { fleet, cluster, mut workload, horizon, seed, config, .. } = resolved;
    let labels = workload.labels.clone();
    let mut groups = GroupObservers::new(&labels, workload.stages);
    let mut client_latency = workload.client_latency.take();
    let mut sim = cluster.build(&fleet, outputs.decisions)?;
    let end = {
        let mut observers: Vec<&mut dyn Observer> = outputs.observers.into_iter().map(|o| -> &mut dyn Observer { o }).collect();
        if let Some(c) = client_latency.as_mut() {
            observers.push(c);
        }
        observers.extend(groups.observers());
        sim.run(workload.stream.as_mut(), horizon, &mut Fanout::new(observers))
    };
    if let Some(e) = workload.stream.take_error() {
        return Err(workload_failed(&e));
    }
    let summary = sim.summary(&end);
    let cluster_summary = sim.cluster_summary(&end, &summary, cluster.fitness.as_ref());
    let primary = &fleet.primary().deployment;
    let server = &primary.server;
    Ok(RunReport {
        schema_version: SCHEMA_VERSION,
        simulator: SimulatorInfo::current(),
        seed,
        deployment: DeploymentInfo {
            model: server.model_name.clone(),
            hardware: server.gpu_name.clone(),
            tp: server.tp,
            latency_model: primary.latency.name().to_string(),
            coefficients: primary.coefficients.clone(),
            num_gpu_blocks: server.instance.num_gpu_blocks,
            kv_memory_per_gpu: server.kv_budget,
        },
        config,
        summary,
        breakdowns: groups.report(&labels),
        client_latency_ms: client_latency.as_ref().map(|c| ClientLatencyReport::of(c, &labels)),
        cluster: cluster_summary,
    })
}
