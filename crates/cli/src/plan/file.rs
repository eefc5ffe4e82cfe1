//! A plan file: the SLO, the GPU offers, and the shapes a candidate may
//! take (aggregated: TP × replicas of one GPU; disaggregated: a prefill
//! and a decode pool, each its own GPU, TP and replicas), checked, and the
//! candidates they enumerate.

use blis_cluster::autoscale::MAX_GPU_HOUR_COST;
use blis_scenario::knobs::KnobId;
use blis_scenario::report::RunReport;
use blis_scenario::sweep::Grid;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::{BadInput, bad_input};

/// A GPU type on offer and its price.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    /// The bundled GPU's name, as the plan gives it.
    pub hardware: String,
    /// Dollars per GPU-hour.
    pub gpu_hour_cost: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    /// In the file's order: the first limit is the frontier's axis.
    slo: Map<String, Value>,
    gpus: Vec<Offer>,
    #[serde(default = "one")]
    tp: Vec<u32>,
    #[serde(default)]
    replicas: Vec<u32>,
    #[serde(default)]
    disaggregated: Option<DisaggregatedFile>,
    #[serde(default)]
    knobs: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DisaggregatedFile {
    prefill: PoolFile,
    decode: PoolFile,
}

/// One pool's shapes: replica counts, and TP degrees and GPUs (by name,
/// among the offers) unless the plan's own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFile {
    replicas: Vec<u32>,
    #[serde(default)]
    tp: Option<Vec<u32>>,
    #[serde(default)]
    gpus: Option<Vec<String>>,
}

fn one() -> Vec<u32> {
    vec![1]
}

/// A latency statistic an SLO limits.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Limit {
    /// `{metric}_{stat}_ms` ≤ value.
    Latency { metric: &'static str, stat: &'static str },
    /// The report's SLO attainment (per-request targets: `--slo-targets`) ≥ value.
    AttainmentMin,
    /// completed ÷ injected ≥ value.
    CompletedMin,
}

/// Most candidates a plan may enumerate (its shapes × knob points): each
/// is kept in memory and checked, and most are simulated, so a larger plan
/// is a typo or a job for `blis sweep --shard`.
const MAX_CANDIDATES: u128 = 100_000;

const METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2e"];
const STATS: [&str; 5] = ["mean", "p50", "p90", "p95", "p99"];

/// The knobs a disaggregated candidate's shape sets.
const SHAPE_OF_PD: [KnobId; 6] = [
    KnobId::prefill_instances,
    KnobId::decode_instances,
    KnobId::prefill_hardware,
    KnobId::decode_hardware,
    KnobId::prefill_tp,
    KnobId::decode_tp,
];

/// The knobs that size a fleet: a plan's candidates set them, so neither the flags nor the base file may.
pub const SIZED_BY_THE_PLAN: [KnobId; 8] = [
    KnobId::num_instances,
    KnobId::data_parallel_size,
    KnobId::prefill_instances,
    KnobId::decode_instances,
    KnobId::prefill_hardware,
    KnobId::decode_hardware,
    KnobId::prefill_tp,
    KnobId::decode_tp,
];

impl Limit {
    fn parse(key: &str) -> Option<Limit> {
        match key {
            "attainment_min" => return Some(Limit::AttainmentMin),
            "completed_min" => return Some(Limit::CompletedMin),
            _ => {}
        }
        let rest = key.strip_suffix("_ms")?;
        let (metric, stat) = rest.split_once('_')?;
        Some(Limit::Latency { metric: METRICS.into_iter().find(|m| *m == metric)?, stat: STATS.into_iter().find(|s| *s == stat)? })
    }

    /// The report's value of this statistic; NaN for a latency nothing
    /// measured (no request completed), which meets no limit.
    pub fn value(self, r: &RunReport) -> f64 {
        let s = &r.summary;
        match self {
            Limit::AttainmentMin => r.cluster.goodput.slo_attainment,
            Limit::CompletedMin => {
                if s.requests.injected == 0 {
                    0.0
                } else {
                    s.requests.completed as f64 / s.requests.injected as f64
                }
            }
            Limit::Latency { metric, stat } => {
                let l = &s.latency_ms;
                let d = match metric {
                    "ttft" => &l.ttft,
                    "tpot" => &l.tpot,
                    "itl" => &l.itl,
                    _ => &l.e2e,
                };
                match stat {
                    _ if d.count == 0 => f64::NAN,
                    "mean" => d.mean,
                    "p50" => d.p50,
                    "p90" => d.p90,
                    "p95" => d.p95,
                    _ => d.p99,
                }
            }
        }
    }

    /// Whether `value` is within `bound`.
    pub fn holds(self, value: f64, bound: f64) -> bool {
        match self {
            Limit::Latency { .. } => value <= bound,
            Limit::AttainmentMin | Limit::CompletedMin => value >= bound,
        }
    }
}

/// One pool of a candidate: a GPU offer (index into the plan's `gpus`),
/// its TP degree and replica count.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct PoolShape {
    /// The offer.
    pub offer: usize,
    /// GPUs per replica.
    pub tp: u32,
    /// Replicas.
    pub replicas: u32,
}

/// A candidate's fleet.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Shape {
    /// Replicas that each prefill and decode.
    Aggregated(PoolShape),
    /// A prefill pool and a decode pool.
    Disaggregated { prefill: PoolShape, decode: PoolShape },
}

impl Shape {
    /// Dollars per hour: every GPU of every pool at its offer's price.
    fn cost_per_hour(self, gpus: &[Offer]) -> f64 {
        let cost = |p: PoolShape| gpus[p.offer].gpu_hour_cost * f64::from(p.tp * p.replicas);
        match self {
            Shape::Aggregated(p) => cost(p),
            Shape::Disaggregated { prefill, decode } => cost(prefill) + cost(decode),
        }
    }
}

/// The shapes one pool of a disaggregated candidate may take.
struct PoolAxes {
    offers: Vec<usize>,
    tp: Vec<u32>,
    replicas: Vec<u32>,
}

impl PoolAxes {
    fn shapes(&self) -> impl Iterator<Item = PoolShape> + '_ {
        self.offers.iter().flat_map(move |&offer| {
            self.tp.iter().flat_map(move |&tp| self.replicas.iter().map(move |&replicas| PoolShape { offer, tp, replicas }))
        })
    }

    fn len(&self) -> u128 {
        (self.offers.len() * self.tp.len() * self.replicas.len()) as u128
    }
}

/// One candidate deployment.
pub struct Candidate {
    /// Its fleet.
    pub shape: Shape,
    /// Its knob-grid point's values.
    pub knobs: Map<String, Value>,
    /// What its GPUs cost.
    pub cost_per_hour: f64,
}

/// A plan file, checked.
pub struct Plan {
    /// The limits, in the file's order; every plan also requires all requests to complete unless it sets `completed_min`.
    pub slo: Vec<(String, Limit, f64)>,
    /// The GPU offers.
    pub gpus: Vec<Offer>,
    /// The aggregated candidates' TP degrees and replica counts (none without replicas).
    tp: Vec<u32>,
    replicas: Vec<u32>,
    /// The disaggregated candidates' prefill and decode pools.
    disaggregated: Option<[PoolAxes; 2]>,
    /// The knob grid every candidate is tried at.
    pub knobs: Option<Grid>,
}

/// Checks that a list of counts (`key`, for errors) has entries, each at least 1 and each once.
fn counts(origin: &str, key: &str, list: &[u32]) -> Result<(), BadInput> {
    if let Some(bad) = list.iter().find(|&&n| n == 0) {
        return Err(bad_input!("{origin}: {key} must be at least 1, got {bad}"));
    }
    if let Some(i) = (1..list.len()).find(|&i| list[..i].contains(&list[i])) {
        return Err(bad_input!("{origin}: {key}[{i}] {}: listed twice; each value once", list[i]));
    }
    Ok(())
}

impl Plan {
    /// Parses and checks a plan (`origin` names it in errors): one line naming the field at fault.
    pub fn parse(raw: Value, origin: &str) -> Result<Plan, BadInput> {
        let file: PlanFile =
            serde_path_to_error::deserialize(raw).map_err(|e| bad_input!("{origin}: {}", blis_data::locate::located_message(&e)))?;
        let slo = Plan::limits(&file.slo, origin)?;
        if file.gpus.is_empty() || file.tp.is_empty() || (file.replicas.is_empty() && file.disaggregated.is_none()) {
            return Err(bad_input!("{origin}: gpus, tp and replicas (or disaggregated) each need at least one entry"));
        }
        for (i, g) in file.gpus.iter().enumerate() {
            if !(g.gpu_hour_cost.is_finite() && (0.0..=MAX_GPU_HOUR_COST).contains(&g.gpu_hour_cost)) {
                return Err(bad_input!(
                    "{origin}: gpus[{i}].gpu_hour_cost {}: must be a price in [0, {MAX_GPU_HOUR_COST:e}] dollars",
                    g.gpu_hour_cost
                ));
            }
            if blis_physics::catalog::find_gpu(&g.hardware).is_none() {
                return Err(bad_input!("{origin}: gpus[{i}].hardware {}: {}", g.hardware, blis_physics::catalog::unknown_gpu(&g.hardware)));
            }
            if let Some(first) = file.gpus[..i].iter().position(|f| blis_physics::catalog::same_gpu(&f.hardware, &g.hardware)) {
                return Err(bad_input!(
                    "{origin}: gpus[{i}].hardware {}: the same GPU as gpus[{first}]; offer each GPU once, at the price you pay",
                    g.hardware
                ));
            }
        }
        counts(origin, "tp", &file.tp)?;
        counts(origin, "replicas", &file.replicas)?;
        let disaggregated = match &file.disaggregated {
            None => None,
            Some(d) => Some([
                Plan::pool_axes(&d.prefill, "disaggregated.prefill", &file, origin)?,
                Plan::pool_axes(&d.decode, "disaggregated.decode", &file, origin)?,
            ]),
        };
        let knobs = match file.knobs {
            None => None,
            Some(axes) => Some(Plan::knob_grid(axes, origin, !file.replicas.is_empty())?),
        };
        let plan = Plan { slo, gpus: file.gpus, tp: file.tp, replicas: file.replicas, disaggregated, knobs };
        plan.check_size(origin)?;
        if let Some(grid) = &plan.knobs {
            grid.check_knobs(origin)?;
        }
        Ok(plan)
    }

    /// The `slo` section's limits, in order, with `completed_min: 1` unless given.
    fn limits(section: &Map<String, Value>, origin: &str) -> Result<Vec<(String, Limit, f64)>, BadInput> {
        let mut slo = Vec::new();
        for (key, bound) in section {
            let bound = &bound.as_f64().ok_or_else(|| bad_input!("{origin}: slo.{key}: expected a number, got {bound}"))?;
            let limit = Limit::parse(key).ok_or_else(|| {
                bad_input!("{origin}: slo.{key}: unknown; allowed: {{ttft,tpot,itl,e2e}}_{{mean,p50,p90,p95,p99}}_ms, attainment_min, completed_min")
            })?;
            let ok = match limit {
                Limit::Latency { .. } => bound.is_finite() && *bound > 0.0,
                _ => (0.0..=1.0).contains(bound),
            };
            if !ok {
                return Err(bad_input!(
                    "{origin}: slo.{key} {bound}: must be a positive number of ms (a fraction in [0, 1] for attainment_min, completed_min)"
                ));
            }
            slo.push((key.clone(), limit, *bound));
        }
        if !slo.iter().any(|(_, l, _)| *l == Limit::CompletedMin) {
            slo.push(("completed_min".into(), Limit::CompletedMin, 1.0));
        }
        if !slo.iter().any(|(_, l, _)| matches!(l, Limit::Latency { .. })) {
            return Err(bad_input!("{origin}: slo: needs at least one latency limit, e.g. ttft_p99_ms: 500"));
        }
        Ok(slo)
    }

    /// One disaggregated pool's shapes (`key`: where it is in the file).
    fn pool_axes(pool: &PoolFile, key: &str, file: &PlanFile, origin: &str) -> Result<PoolAxes, BadInput> {
        let tp = pool.tp.clone().unwrap_or_else(|| file.tp.clone());
        let offers = match &pool.gpus {
            None => (0..file.gpus.len()).collect(),
            Some(names) => names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    file.gpus.iter().position(|g| blis_physics::catalog::same_gpu(&g.hardware, name)).ok_or_else(|| {
                        let offered: Vec<&str> = file.gpus.iter().map(|g| g.hardware.as_str()).collect();
                        bad_input!("{origin}: {key}.gpus[{i}] {name}: not among the plan's gpus; allowed: {}", offered.join(", "))
                    })
                })
                .collect::<Result<Vec<usize>, BadInput>>()?,
        };
        if pool.replicas.is_empty() || tp.is_empty() || offers.is_empty() {
            return Err(bad_input!("{origin}: {key}: replicas, tp and gpus each need at least one entry"));
        }
        if let Some(i) = (1..offers.len()).find(|&i| offers[..i].contains(&offers[i])) {
            return Err(bad_input!("{origin}: {key}.gpus[{i}]: the same GPU as an earlier entry; each GPU once"));
        }
        counts(origin, &format!("{key}.replicas"), &pool.replicas)?;
        counts(origin, &format!("{key}.tp"), &tp)?;
        Ok(PoolAxes { offers, tp, replicas: pool.replicas.clone() })
    }

    /// The `knobs` section as a grid; `aggregated`: the plan has aggregated
    /// candidates, which take no P/D knob.
    fn knob_grid(axes: Value, origin: &str, aggregated: bool) -> Result<Grid, BadInput> {
        let grid = Grid::parse(json!({ "axes": axes }), &format!("{origin}: knobs"))?;
        for column in grid.columns() {
            let name = column.replace('_', "-");
            if ["hardware", "tp", "num-instances", "tensor-parallel-size", "data-parallel-size"].contains(&name.as_str()) {
                return Err(bad_input!("{origin}: knobs.{column}: set by gpus, tp and replicas"));
            }
            let Some(knob) = KnobId::from_flag(&name) else { continue };
            if SHAPE_OF_PD.contains(&knob) {
                return Err(bad_input!("{origin}: knobs.{column}: set by the disaggregated section (its pools' replicas, tp and gpus)"));
            }
            if aggregated && blis_scenario::pd::OTHER_KNOBS.contains(&knob) {
                return Err(bad_input!(
                    "{origin}: knobs.{column}: only a disaggregated deployment takes it, and this plan has aggregated candidates (replicas); search it in a plan of disaggregated candidates only"
                ));
            }
        }
        Ok(grid)
    }

    /// Refuses a plan of more than [`MAX_CANDIDATES`] candidates, with the product that makes it.
    fn check_size(&self, origin: &str) -> Result<(), BadInput> {
        let points = self.knobs.as_ref().map_or(1, |g| u128::from(g.points));
        let aggregated = (self.gpus.len() * self.tp.len() * self.replicas.len()) as u128;
        let candidates = self.shapes().count() as u128 * points;
        if candidates <= MAX_CANDIDATES {
            return Ok(());
        }
        let product = match &self.disaggregated {
            None => format!("{} gpus × {} tp × {} replicas × {points} knob points", self.gpus.len(), self.tp.len(), self.replicas.len()),
            Some([p, d]) => {
                format!("({aggregated} aggregated + {} prefill × {} decode pool shapes) × {points} knob points", p.len(), d.len())
            }
        };
        Err(bad_input!(
            "{origin}: {product} = {candidates} candidates, more than the {MAX_CANDIDATES} a plan may have; narrow the lists (or sweep them with `blis sweep --shard`)"
        ))
    }

    /// Every fleet shape: the aggregated ones (offer × TP × replicas), then
    /// the disaggregated ones (prefill shape × decode shape).
    fn shapes(&self) -> impl Iterator<Item = Shape> + '_ {
        let aggregated = (0..self.gpus.len()).flat_map(move |offer| {
            self.tp
                .iter()
                .flat_map(move |&tp| self.replicas.iter().map(move |&replicas| Shape::Aggregated(PoolShape { offer, tp, replicas })))
        });
        let disaggregated = self
            .disaggregated
            .iter()
            .flat_map(|[p, d]| p.shapes().flat_map(move |prefill| d.shapes().map(move |decode| Shape::Disaggregated { prefill, decode })));
        aggregated.chain(disaggregated)
    }

    /// Whether the plan has disaggregated candidates.
    pub fn has_disaggregated(&self) -> bool {
        self.disaggregated.is_some()
    }

    /// Every candidate: each shape at each knob point, in that order.
    pub fn candidates(&self) -> Vec<Candidate> {
        let points = self.knobs.as_ref().map_or(1, |g| g.points);
        self.shapes()
            .flat_map(|shape| {
                (0..points).map(move |i| Candidate {
                    shape,
                    knobs: self.knobs.as_ref().map(|g| g.point(i)).unwrap_or_default(),
                    cost_per_hour: shape.cost_per_hour(&self.gpus),
                })
            })
            .collect()
    }

    /// The knob values that make `c` (its point, its shape's fleet knobs).
    pub fn point_of(&self, c: &Candidate) -> Map<String, Value> {
        let mut p = c.knobs.clone();
        let hardware = |s: PoolShape| json!(self.gpus[s.offer].hardware);
        match c.shape {
            Shape::Aggregated(s) => {
                p.insert("hardware".into(), hardware(s));
                p.insert("tp".into(), json!(s.tp));
                p.insert("num-instances".into(), json!(s.replicas));
            }
            Shape::Disaggregated { prefill, decode } => {
                for (role, s) in [("prefill", prefill), ("decode", decode)] {
                    p.insert(format!("{role}-instances"), json!(s.replicas));
                    p.insert(format!("{role}-hardware"), hardware(s));
                    p.insert(format!("{role}-tp"), json!(s.tp));
                }
            }
        }
        p
    }

    /// `c` in words: `2 × H100 TP 1`, or `1 × H100 TP 2 prefill + 3 × H100 TP 1 decode`, then its knob values.
    pub fn describe(&self, c: &Candidate) -> String {
        let pool = |s: PoolShape| format!("{} × {} TP {}", s.replicas, self.gpus[s.offer].hardware, s.tp);
        let knobs: Vec<String> =
            c.knobs.iter().map(|(k, v)| format!("{k} {}", v.as_str().map_or_else(|| v.to_string(), str::to_string))).collect();
        let extra = if knobs.is_empty() { String::new() } else { format!(" ({})", knobs.join(", ")) };
        match c.shape {
            Shape::Aggregated(s) => format!("{}{extra}", pool(s)),
            Shape::Disaggregated { prefill, decode } => format!("{} prefill + {} decode{extra}", pool(prefill), pool(decode)),
        }
    }

    /// The CSV's columns that say a candidate's shape.
    pub fn shape_columns(&self) -> Vec<String> {
        let mut columns: Vec<String> = ["hardware", "tp", "replicas"].map(String::from).into();
        if self.has_disaggregated() {
            columns.insert(0, "shape".into());
            for role in ["prefill", "decode"] {
                columns.extend(["hardware", "tp", "replicas"].map(|c| format!("{role}_{c}")));
            }
        }
        columns
    }

    /// `c`'s cells under [`Plan::shape_columns`].
    pub fn shape_cells(&self, c: &Candidate) -> Vec<String> {
        let cells = |s: PoolShape| vec![self.gpus[s.offer].hardware.clone(), s.tp.to_string(), s.replicas.to_string()];
        let blank = || vec![String::new(); 3];
        match (c.shape, self.has_disaggregated()) {
            (Shape::Aggregated(s), false) => cells(s),
            (Shape::Aggregated(s), true) => [vec!["aggregated".into()], cells(s), blank(), blank()].concat(),
            (Shape::Disaggregated { prefill, decode }, _) => {
                [vec!["disaggregated".into()], blank(), cells(prefill), cells(decode)].concat()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_a_metric_and_a_statistic() {
        assert_eq!(Limit::parse("ttft_p99_ms"), Some(Limit::Latency { metric: "ttft", stat: "p99" }));
        assert_eq!(Limit::parse("e2e_mean_ms"), Some(Limit::Latency { metric: "e2e", stat: "mean" }));
        assert_eq!(Limit::parse("attainment_min"), Some(Limit::AttainmentMin));
        for bad in ["ttft_p99", "ttft_p98_ms", "latency_p99_ms", "ttft_ms"] {
            assert_eq!(Limit::parse(bad), None, "{bad}");
        }
        assert!(Limit::Latency { metric: "ttft", stat: "p99" }.holds(500.0, 500.0));
        assert!(!Limit::CompletedMin.holds(0.99, 1.0));
    }

    fn with(base: &Value, patch: Value) -> Value {
        let mut p = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    }

    #[test]
    fn bad_plans_are_refused_by_field() {
        let ok = json!({"slo": {"ttft_p99_ms": 500}, "gpus": [{"hardware": "H100", "gpu_hour_cost": 4}], "replicas": [1, 2]});
        assert!(Plan::parse(ok.clone(), "p").is_ok());
        let pd = |prefill: Value| json!({"prefill": prefill, "decode": {"replicas": [1]}});
        for (patch, needle) in [
            (json!({"slo": {"ttft_p98_ms": 5}}), "slo.ttft_p98_ms: unknown"),
            (json!({"slo": {"ttft_p99_ms": -5}}), "must be a positive number"),
            (json!({"slo": {"attainment_min": 0.9}}), "at least one latency limit"),
            (json!({"gpus": []}), "at least one entry"),
            (json!({"replicas": []}), "replicas (or disaggregated) each need at least one entry"),
            (json!({"gpus": [{"hardware": "H100", "gpu_hour_cost": -1}]}), "gpu_hour_cost -1"),
            (json!({"gpus": [{"hardware": "H100", "price": 1}]}), "unknown field `price`"),
            (json!({"gpus": [{"hardware": "NOPE", "gpu_hour_cost": 1}]}), "gpus[0].hardware NOPE: unknown GPU; allowed: H100"),
            (json!({"replicas": [0]}), "replicas must be at least 1, got 0"),
            (json!({"knobs": {"tp": [1, 2]}}), "knobs.tp: set by gpus"),
            (json!({"knobs": {"tensor_parallel_size": [1, 2]}}), "knobs.tensor_parallel_size: set by gpus"),
            (json!({"knobs": {"num-instances": [1, 2]}}), "knobs.num-instances: set by gpus"),
            (json!({"knobs": {"prefill-instances": [1, 2]}}), "knobs.prefill-instances: set by the disaggregated section"),
            (json!({"knobs": {"decode_tp": [1, 2]}}), "knobs.decode_tp: set by the disaggregated section"),
            (
                json!({"knobs": {"pd-transfer-bandwidth": [10, 50]}}),
                "knobs.pd-transfer-bandwidth: only a disaggregated deployment takes it",
            ),
            (json!({"knobs": {"max-num-seqz": [1]}}), "max-num-seqz"),
            (json!({"disaggregated": {"prefill": {"replicas": [1]}}}), "field `disaggregated`: missing field `decode`"),
            (
                json!({"disaggregated": pd(json!({"replicas": []}))}),
                "disaggregated.prefill: replicas, tp and gpus each need at least one entry",
            ),
            (json!({"disaggregated": pd(json!({"replicas": [1, 1]}))}), "disaggregated.prefill.replicas[1] 1: listed twice"),
            (json!({"disaggregated": pd(json!({"replicas": [1], "tp": [0]}))}), "disaggregated.prefill.tp must be at least 1, got 0"),
            (
                json!({"disaggregated": pd(json!({"replicas": [1], "gpus": ["A100-80GB"]}))}),
                "disaggregated.prefill.gpus[0] A100-80GB: not among the plan's gpus; allowed: H100",
            ),
            (
                json!({"disaggregated": pd(json!({"replicas": [1], "gpus": ["H100", "h100"]}))}),
                "disaggregated.prefill.gpus[1]: the same GPU",
            ),
            (json!({"disaggregated": pd(json!({"replicas": [1], "price": 3}))}), "unknown field `price`"),
        ] {
            let e = Plan::parse(with(&ok, patch.clone()), "p").err().unwrap_or_else(|| panic!("{patch} accepted")).0;
            assert!(e.contains(needle), "{patch}: {e}");
        }
    }

    #[test]
    fn a_plan_enumerates_aggregated_then_every_prefill_and_decode_pair() {
        let gpus = json!([{"hardware": "H100", "gpu_hour_cost": 4}, {"hardware": "A100-80GB", "gpu_hour_cost": 2}]);
        let raw = json!({
            "slo": {"ttft_p99_ms": 500},
            "gpus": gpus,
            "tp": [1, 2],
            "replicas": [2],
            "disaggregated": {"prefill": {"replicas": [1, 2], "gpus": ["H100"]}, "decode": {"replicas": [3], "tp": [1]}},
            "knobs": {"max-num-seqs": [64, 128]},
        });
        let plan = Plan::parse(raw, "p").unwrap();
        let c = plan.candidates();
        // (2 gpus × 2 tp × 1 replicas + (1 × 2 × 2) prefill × (2 × 1 × 1) decode) × 2 knob points.
        assert_eq!(c.len(), (4 + 4 * 2) * 2);
        assert!(c[..8].iter().all(|c| matches!(c.shape, Shape::Aggregated(_))));
        assert!(c[8..].iter().all(|c| matches!(c.shape, Shape::Disaggregated { .. })));
        // The cost of a disaggregated candidate is every GPU of both pools at its price.
        let pd = c.iter().find(|c| plan.describe(c) == "2 × H100 TP 2 prefill + 3 × A100-80GB TP 1 decode (max-num-seqs 64)").unwrap();
        assert_eq!(pd.cost_per_hour, 4.0 * 4.0 + 2.0 * 3.0);
        let point = plan.point_of(pd);
        assert_eq!(point["prefill-tp"], json!(2));
        assert_eq!(point["decode-hardware"], json!("A100-80GB"));
        assert!(!point.contains_key("num-instances"), "a disaggregated candidate is not sized by --num-instances");
        assert_eq!(plan.shape_columns().len(), plan.shape_cells(pd).len());
        assert_eq!(plan.shape_cells(&c[0])[..4], ["aggregated", "H100", "1", "2"]);
    }

    #[test]
    fn too_many_candidates_are_refused_with_the_product() {
        let many: Vec<u32> = (1..=400).collect();
        let raw = json!({
            "slo": {"ttft_p99_ms": 500},
            "gpus": [{"hardware": "H100", "gpu_hour_cost": 4}],
            "replicas": [1],
            "disaggregated": {"prefill": {"replicas": many}, "decode": {"replicas": many}},
        });
        let e = Plan::parse(raw, "p").err().unwrap().0;
        assert!(e.contains("(1 aggregated + 400 prefill × 400 decode pool shapes) × 1 knob points = 160001 candidates"), "{e}");
    }
}
