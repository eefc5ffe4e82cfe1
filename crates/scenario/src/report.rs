//! The report of a simulation: one versioned JSON schema, the same for
//! every front end (`blis run`, `blis replay`, the Python binding), with run
//! metadata, every knob with its source, the measurements, per-group
//! breakdowns and the cluster section.

use std::collections::BTreeMap;

use blis_cluster::metrics::ClusterSummary;
use blis_engine::instance::Observer;
use blis_engine::metrics::{Breakdown, Distribution, GroupBy, GroupSummary, RunSummary};
use blis_engine::request::Labels;
use blis_engine::time::US_PER_MS;
use blis_physics::hardware::KvBudget;
use blis_workload::network::{ClientLatency, ClientSamples};
use serde::Serialize;

use crate::knobs::ConfigReport;

/// Version of the JSON report schema. Bumped on any incompatible change;
/// fields are only ever added within a version.
pub const SCHEMA_VERSION: u32 = 1;

/// Name and version of the program that wrote a report.
#[derive(Clone, Debug, Serialize)]
pub struct SimulatorInfo {
    /// Always "blis".
    pub name: &'static str,
    /// Crate version.
    pub version: &'static str,
}

impl SimulatorInfo {
    /// This build.
    pub fn current() -> SimulatorInfo {
        SimulatorInfo { name: "blis", version: env!("CARGO_PKG_VERSION") }
    }
}

/// What was simulated, resolved.
#[derive(Clone, Debug, Serialize)]
pub struct DeploymentInfo {
    /// Model id.
    pub model: String,
    /// GPU name.
    pub hardware: String,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Latency model name.
    pub latency_model: String,
    /// Where the latency model's coefficients came from.
    pub coefficients: String,
    /// KV blocks per instance (of the decode pool under P/D; the prefill
    /// pool's are in `config`'s `prefill-pool`).
    pub num_gpu_blocks: u64,
    /// How one GPU's memory was split, GiB, when the block count was derived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_memory_per_gpu: Option<KvBudget>,
}

/// The JSON document a simulation reports.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Program and version.
    pub simulator: SimulatorInfo,
    /// Master seed.
    pub seed: u64,
    /// Model, hardware, parallelism.
    pub deployment: DeploymentInfo,
    /// Every knob with its value and source.
    pub config: ConfigReport,
    /// The measurements.
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Per-client and per-stage metrics, for the dimensions in which the
    /// workload has more than one value (per tenant and per SLO class are
    /// in the cluster section).
    pub breakdowns: BTreeMap<&'static str, BTreeMap<String, GroupSummary>>,
    /// Client-perspective TTFT and E2E, ms (server-side plus the network
    /// model), when a workload client has a network model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_latency_ms: Option<ClientLatencyReport>,
    /// Control plane, policies, per-class/tenant/instance results, anomalies.
    pub cluster: ClusterSummary,
}

/// The breakdowns a run collects. A dimension is measured only when the
/// workload has more than one value of it (one group would repeat the
/// overall numbers, at the memory cost of another copy of the samples).
pub struct GroupObservers {
    groups: Vec<(&'static str, Breakdown)>,
}

impl GroupObservers {
    /// Breakdowns for the dimensions of `labels` with more than one value,
    /// plus stages when the workload has `stages` > 1.
    pub fn new(labels: &Labels, stages: u32) -> GroupObservers {
        let mut groups = Vec::new();
        for (name, by, n) in [("client", GroupBy::Client, labels.clients.len()), ("stage", GroupBy::Stage, stages as usize)] {
            if n > 1 {
                groups.push((name, Breakdown::new(by)));
            }
        }
        GroupObservers { groups }
    }

    /// The observers to fan callbacks out to.
    pub fn observers(&mut self) -> impl Iterator<Item = &mut dyn Observer> {
        self.groups.iter_mut().map(|(_, b)| b as &mut dyn Observer)
    }

    /// The report section: dimension → group name → summary.
    pub fn report(&self, labels: &Labels) -> BTreeMap<&'static str, BTreeMap<String, GroupSummary>> {
        self.groups.iter().map(|(name, b)| (*name, b.summaries(labels))).collect()
    }
}

/// Client-perspective latencies of one group, ms.
#[derive(Clone, Debug, Serialize)]
pub struct ClientLatencyMs {
    /// TTFT as the client sees it (streaming clients).
    pub ttft: Distribution,
    /// End-to-end latency as the client sees it.
    pub e2e: Distribution,
}

impl ClientLatencyMs {
    fn of(s: &ClientSamples) -> ClientLatencyMs {
        ClientLatencyMs { ttft: s.ttft_us.summary(US_PER_MS), e2e: s.e2e_us.summary(US_PER_MS) }
    }
}

/// Client-perspective latencies (server-side latency plus the clients'
/// network model), overall and per client.
#[derive(Clone, Debug, Serialize)]
pub struct ClientLatencyReport {
    /// All requests from clients with a network model.
    #[serde(flatten)]
    pub overall: ClientLatencyMs,
    /// Per client.
    pub by_client: BTreeMap<String, ClientLatencyMs>,
}

impl ClientLatencyReport {
    /// The report of a collector.
    pub fn of(c: &ClientLatency, labels: &Labels) -> ClientLatencyReport {
        ClientLatencyReport {
            overall: ClientLatencyMs::of(&c.overall),
            by_client: c.by_client.iter().map(|(&i, s)| (labels.client(i), ClientLatencyMs::of(s))).collect(),
        }
    }
}
