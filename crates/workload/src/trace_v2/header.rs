//! The header of a trace (`NAME.header.yaml` beside `NAME.csv`): the
//! spec's keys, and a `blis:` section that replay needs to rebuild shared
//! prefixes and sessions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::WorkloadError;
use crate::plan::Plan;
use crate::spec::ContextGrowth;

/// Label lists of a trace, in index order.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LabelLists {
    /// Client ids.
    #[serde(default)]
    pub clients: Vec<String>,
    /// Tenant ids.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// SLO classes.
    #[serde(default)]
    pub slo_classes: Vec<String>,
}

/// BLIS's additions to the header: what replay needs to rebuild shared
/// prefixes and multi-turn context.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BlisHeader {
    /// Seed of the spec that generated the trace (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Prefix length of each prefix group, tokens.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prefix_lengths: BTreeMap<String, u32>,
    /// Context growth of each multi-turn client.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context_growth: BTreeMap<String, ContextGrowth>,
    /// Label order, so replayed requests get the generator's label ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<LabelLists>,
}

/// The trace header (`*.header.yaml`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    /// Always 2.
    pub trace_version: u32,
    /// Always `microseconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_unit: Option<String>,
    /// When the trace was recorded (RFC 3339); generated traces omit it so
    /// they are byte-identical run to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// `real` or `generated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Requests to exclude from calibration statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up_requests: Option<u64>,
    /// The spec that generated the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_spec: Option<String>,
    /// Server configuration (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<serde_json::Value>,
    /// Hardware (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<serde_json::Value>,
    /// Measured network (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<serde_json::Value>,
    /// Load-generator health (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_generator: Option<serde_json::Value>,
    /// Scraped server metrics (real mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<serde_json::Value>,
    /// BLIS replay metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blis: Option<BlisHeader>,
}

/// The header file of trace CSV `csv`: `x.csv` → `x.header.yaml`.
pub fn header_path(csv: &Path) -> PathBuf {
    csv.with_extension("header.yaml")
}

/// The trace CSV of a trace prefix or path: `traces/run1` → `traces/run1.csv`.
pub fn trace_csv(path: &Path) -> PathBuf {
    if path.extension().is_some_and(|e| e == "csv") {
        path.to_path_buf()
    } else {
        let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".csv");
        path.with_file_name(name)
    }
}

impl TraceHeader {
    /// The header of a trace generated from `plan` (spec `spec_name`).
    pub fn generated(plan: &Plan, spec_name: &str) -> TraceHeader {
        let blis = BlisHeader {
            seed: Some(plan.seed),
            prefix_lengths: plan.clients.iter().flat_map(|c| c.prefixes.iter().map(|(g, run)| (g.clone(), run.len()))).collect(),
            context_growth: plan.clients.iter().filter_map(|c| c.multi_turn.map(|m| (c.id.clone(), m.growth))).collect(),
            labels: Some(LabelLists {
                clients: plan.labels.clients.clone(),
                tenants: plan.labels.tenants.clone(),
                slo_classes: plan.labels.slo_classes.clone(),
            }),
        };
        TraceHeader {
            trace_version: 2,
            time_unit: Some("microseconds".into()),
            created_at: None,
            mode: Some("generated".into()),
            warm_up_requests: Some(0),
            workload_spec: Some(spec_name.to_string()),
            server: None,
            hardware: None,
            network: None,
            load_generator: None,
            server_metrics: None,
            blis: Some(blis),
        }
    }

    /// The header as YAML.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }

    /// Reads and checks a header file.
    pub fn load(path: &Path) -> Result<TraceHeader, WorkloadError> {
        let text = blis_data::textfile::read(path).map_err(|e| WorkloadError::read(path, e))?;
        let name = path.display().to_string();
        let h: TraceHeader = blis_data::yaml::from_str(&text).map_err(|e| crate::error::from_yaml(&name, e))?;
        if h.trace_version != 2 {
            return Err(WorkloadError::spec(name, "trace_version", format!("{} is not supported; allowed: 2", h.trace_version)));
        }
        if let Some(u) = &h.time_unit
            && u != "microseconds"
        {
            return Err(WorkloadError::spec(name, "time_unit", format!("{u:?} is not supported; allowed: microseconds")));
        }
        if let Some(m) = h.mode.as_deref().filter(|m| !["real", "generated"].contains(m)) {
            return Err(WorkloadError::spec(name, "mode", format!("{m:?} is not a mode; allowed: real, generated")));
        }
        if let Some(server) = h.server.as_ref().filter(|s| !s.is_object()) {
            return Err(WorkloadError::spec(name, "server", format!("{server} is not a map of server knobs (max-num-seqs: 256, ...)")));
        }
        if let Some((key, v)) = recorded_time_scale(&h)
            && !v.as_f64().is_some_and(|x| x > 0.0 && x <= 1e6)
        {
            let written = serde_yaml_ng::to_string(v).unwrap_or_default();
            return Err(WorkloadError::spec(
                name,
                format!("server.{key}"),
                format!("{}: must be a number in (0, 1e6] (server seconds per wall-clock second)", written.trim_end()),
            ));
        }
        Ok(h)
    }
}

/// The `server.time-scale` (or `time_scale`) entry of a header, with its key.
fn recorded_time_scale(header: &TraceHeader) -> Option<(&'static str, &serde_json::Value)> {
    let server = header.server.as_ref()?;
    ["time-scale", "time_scale"].into_iter().find_map(|key| server.get(key).map(|v| (key, v)))
}

/// The server's seconds per wall-clock second recorded in a trace header
/// (`server.time-scale`, written by `blis observe` against `blis serve`,
/// checked by [`TraceHeader::load`]); 1 when absent.
pub fn header_time_scale(header: Option<&TraceHeader>) -> f64 {
    header.and_then(recorded_time_scale).and_then(|(_, v)| v.as_f64()).unwrap_or(1.0)
}
