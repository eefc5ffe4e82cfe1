//! Shared builders: instance configurations, latency models, workloads,
//! policy bundles, and a run that keeps every record.

use std::sync::Arc;

use blis_cluster::fitness::FitnessWeights;
use blis_cluster::fleet::{Pool, Role};
use blis_cluster::metrics::ClusterSummary;
use blis_cluster::pd::{PdDecider, PdPolicy};
use blis_cluster::policy::PolicyBundle;
use blis_cluster::snapshot::InstanceSnapshot;
use blis_cluster::trace::{AdmissionTrace, DecisionSink, RoutingTrace};
use blis_cluster::{Cluster, ClusterConfig};
use blis_engine::driver::IterWorkload;
use blis_engine::driver::RunEnd;
use blis_engine::instance::{Observer, TokenEvent};
use blis_engine::latency::{Blackbox, LatencyModel};
use blis_engine::metrics::RunSummary;
use blis_engine::request::{Labels, Request, RequestRecord};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;
use blis_physics::catalog;
use blis_physics::hardware::{KvSizing, kv_blocks};
use blis_physics::latency::Roofline;
use blis_physics::model::ModelConfig;
use blis_workload::labels::{LabelMix, Mix};
use blis_workload::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};

/// vLLM-like knobs with `blocks` KV blocks of 16 tokens.
pub fn instance(blocks: u64, max_num_seqs: u32, budget: u32) -> InstanceConfig {
    InstanceConfig::basic(max_num_seqs, budget, 32_768, blocks)
}

/// The blackbox model of the predictive-admission study: β0 = 6910.42 µs,
/// β1 = 17.67 µs per uncached prefill token, β2 = 2.84 µs per decode; α = 0.
pub fn spec_blackbox() -> Arc<dyn LatencyModel> {
    Arc::new(Blackbox { alpha: [0.0; 3], beta: [6910.42, 17.67, 2.84] })
}

/// Llama-3.1-8B on one H100 (roofline), with its derived KV block count.
pub fn llama_h100() -> (Arc<dyn LatencyModel>, u64) {
    let model = ModelConfig::from_hf_json(catalog::find_model("meta-llama/Llama-3.1-8B-Instruct").unwrap().config_json).unwrap();
    let gpu = catalog::find_gpu("H100").unwrap().spec();
    (Arc::new(Roofline::new(&model, &gpu, 1)), kv_blocks(&model, &gpu, &KvSizing::defaults(1, &gpu)).unwrap())
}

/// A synthetic Poisson workload.
pub struct Load {
    pub rate: f64,
    pub requests: u64,
    pub prompt: u32,
    pub output: u32,
    pub prefix: u32,
    pub groups: u32,
    pub seed: u64,
}

impl Load {
    pub fn spec(&self) -> SyntheticSpec {
        SyntheticSpec {
            rate_per_s: self.rate,
            arrival: ArrivalProcess::Poisson,
            num_requests: self.requests,
            prompt: LengthSpec::fixed(self.prompt),
            output: LengthSpec::fixed(self.output),
            prefix_tokens: self.prefix,
            prefix_groups: self.groups,
            seed: self.seed,
        }
    }

    /// The requests with SLO classes drawn from `classes` (e.g. `a:1,b:1`), if given.
    pub fn requests(&self, classes: Option<&str>) -> (Vec<Request>, Labels) {
        let mix = LabelMix { slo_classes: classes.map(|c| Mix::parse("slo-class-mix", c).unwrap()), tenants: None };
        let mut labels = Labels::default();
        mix.name_into(&mut labels);
        (mix.apply(self.spec().generate(), self.seed).collect(), labels)
    }
}

/// A policy bundle from a JSON document (the YAML's shape).
pub fn bundle(doc: serde_json::Value) -> PolicyBundle {
    PolicyBundle::from_value(&doc).unwrap_or_else(|e| panic!("{e}")).0
}

pub fn config(n: u32, instance: InstanceConfig, latency: Arc<dyn LatencyModel>, policies: PolicyBundle, labels: Labels) -> ClusterConfig {
    ClusterConfig { labels, ..ClusterConfig::fixed(n, instance, latency, policies) }
}

/// A disaggregated fleet: `prefill` fixed prefill instances (the pool first,
/// slots `0..prefill`) and `decode` fixed decode instances of `decode_cfg`
/// (which must receive KV), both timed by `latency`, under `policy`.
pub fn pd_fleet(
    (prefill, prefill_cfg): (u32, InstanceConfig),
    (decode, decode_cfg): (u32, InstanceConfig),
    latency: Arc<dyn LatencyModel>,
    policy: PdPolicy,
    (policies, labels): (PolicyBundle, Labels),
) -> ClusterConfig {
    let pools = vec![
        Pool { role: Role::Prefill, ..Pool::serving("prefill", prefill, prefill_cfg, latency.clone()) },
        Pool { role: Role::Decode, ..Pool::serving("decode", decode, decode_cfg, latency) },
    ];
    ClusterConfig { pd: Some(policy), labels, ..ClusterConfig::of(pools, policies) }
}

/// Every request through the prefill pool, whose least-loaded instance
/// computes it and keeps the blocks cached (`keep`).
pub fn always(keep: bool) -> PdPolicy {
    PdPolicy {
        prefill_routing: blis_cluster::policy::RoutingSpec::parse("least-loaded", None, "routing").unwrap(),
        decider: PdDecider::Always,
        prefill_keeps_cache: keep,
    }
}

/// Every record and token, in the order they happened.
#[derive(Default)]
pub struct Recorder {
    pub records: Vec<RequestRecord>,
    pub tokens: Vec<TokenEvent>,
}

impl Observer for Recorder {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.records.push(r.clone());
    }
    fn on_token(&mut self, t: &TokenEvent) {
        self.tokens.push(*t);
    }
}

/// The chosen instance and (request id, time) of every routing decision,
/// and the number of admission decisions.
#[derive(Default)]
pub struct Decisions {
    pub routed_to: Vec<u32>,
    pub routed_at: Vec<(u64, Micros)>,
    /// What each routing decision saw of its candidates.
    pub snapshots: Vec<Vec<InstanceSnapshot>>,
    pub admissions: u64,
}

impl DecisionSink for Decisions {
    fn admission(&mut self, _d: &AdmissionTrace<'_>) {
        self.admissions += 1;
    }
    fn routing(&mut self, d: &RoutingTrace<'_>) {
        self.routed_to.push(d.chosen);
        self.routed_at.push((d.request.id.0, d.time));
        self.snapshots.push(d.snapshots.to_vec());
    }
}

pub struct Outcome {
    pub end: RunEnd,
    pub run: RunSummary,
    pub cluster: ClusterSummary,
    pub rec: Recorder,
    pub decisions: Decisions,
}

/// Runs `requests` through a cluster built from `cfg`.
pub fn run(cfg: ClusterConfig, requests: Vec<Request>, horizon: Option<Micros>) -> Outcome {
    run_weighted(cfg, requests, horizon, None)
}

pub fn run_weighted(cfg: ClusterConfig, requests: Vec<Request>, horizon: Option<Micros>, fitness: Option<&FitnessWeights>) -> Outcome {
    let mut rec = Recorder::default();
    let mut decisions = Decisions::default();
    let mut cluster = Cluster::traced(cfg, &mut decisions).unwrap_or_else(|e| panic!("{e}"));
    let end = cluster.run(&mut IterWorkload::new(requests.into_iter()), horizon, &mut rec);
    let run = cluster.summary(&end);
    let summary = cluster.cluster_summary(&end, &run, fitness);
    drop(cluster);
    Outcome { end, run, cluster: summary, rec, decisions }
}
