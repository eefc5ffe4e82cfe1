//! Routing: which instance an admitted request goes to, decided online at
//! the routing event from the instance snapshots (never pre-dispatched).
//!
//! Templates: `round-robin`; `least-loaded` (smallest queued + running +
//! pending); `weighted` (scorers): the weighted mean of scorers in [0, 1];
//! `prefix-affinity` (min_match_blocks): the instance with the longest
//! router-index prefix match (least loaded among equals), least-loaded when
//! no instance matches enough; `always-busiest` (pathological: the most
//! loaded instance); `vllm-dp` (vLLM's internal data-parallel load
//! balancer, `DPLBAsyncMPClient`: the smallest 4·waiting + running, waiting
//! counting the requests sent since the counts were read; run it with
//! queue-depth and batch-size refreshed `periodic:100ms`, the interval at
//! which vLLM's coordinator publishes them, as `--data-parallel-size`
//! does). Equal scores go to the lowest instance id.
//!
//! Scorers of `weighted` (all in [0, 1], higher = preferred):
//!
//! | scorer | score of instance i |
//! | --- | --- |
//! | `prefix-affinity` | router-index matched prompt blocks / prompt blocks |
//! | `precise-prefix` | prompt tokens in i's real prefix cache, plus its offload tiers' run after it weighted 0.8 (CPU), 0.5 (disk), 0.4 (remote) / prompt tokens |
//! | `queue-depth` | (max − l_i) / (max − min) over the effective load l = queue_depth + batch_size + pending; 1 if all equal |
//! | `kv-utilization` | 1 − kv_utilization |
//! | `load-balance` | 1 / (1 + queue_depth + batch_size + pending) |
//! | `active-requests` | (max − a_i) / max over a = in_flight; 1 if all 0 |
//!
//! Cost per decision: O(instances × scorers), plus O(matched prefix blocks)
//! per instance for the prefix scorers.

use std::collections::BTreeMap;

use blis_engine::request::Request;
use serde::{Deserialize, Serialize};

use super::{NoParams, check, policy_kind};
use crate::error::ConfigError;
use crate::view::ClusterView;

/// Per-candidate scores of one routing decision, for traces and
/// counterfactuals: a total (the policy's preference, higher = preferred;
/// NaN when the policy does not score) and named components.
#[derive(Clone, Debug)]
pub struct ScoreSheet {
    components: Vec<&'static str>,
    values: Vec<f64>,
    totals: Vec<f64>,
}

impl ScoreSheet {
    /// A sheet for `instances` candidates with the given component names.
    pub fn new(instances: usize, components: Vec<&'static str>) -> ScoreSheet {
        ScoreSheet { values: vec![f64::NAN; instances * components.len()], totals: vec![f64::NAN; instances], components }
    }

    /// Makes room for `candidates` candidates.
    pub(crate) fn ensure(&mut self, candidates: usize) {
        if candidates > self.totals.len() {
            self.totals.resize(candidates, f64::NAN);
            self.values.resize(candidates * self.components.len(), f64::NAN);
        }
    }

    /// Forgets the previous decision's scores.
    pub(crate) fn clear(&mut self) {
        self.values.fill(f64::NAN);
        self.totals.fill(f64::NAN);
    }

    /// Component names.
    pub fn components(&self) -> &[&'static str] {
        &self.components
    }

    /// Component `c` of candidate `i`.
    pub fn component(&self, i: usize, c: usize) -> f64 {
        self.values[i * self.components.len() + c]
    }

    /// Total score of candidate `i`, if the policy scored it.
    pub fn total(&self, i: usize) -> Option<f64> {
        let t = self.totals[i];
        (!t.is_nan()).then_some(t)
    }

    fn set(&mut self, i: usize, c: usize, v: f64) {
        let n = self.components.len();
        self.values[i * n + c] = v;
    }
}

/// Chooses the instance for an admitted request.
pub trait RoutingPolicy {
    /// The chosen candidate: a position in `view.snapshots()` (the
    /// routable instances; every instance without autoscaling). Policies
    /// that score candidates fill `sheet` (cleared by the caller).
    fn route(&mut self, req: &Request, view: &ClusterView<'_>, sheet: &mut ScoreSheet) -> u32;
}

/// A scorer of the `weighted` routing policy.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scorer {
    /// Router-side prefix index match.
    PrefixAffinity,
    /// The instance's true prefix cache.
    PrecisePrefix,
    /// Min-max normalised effective load (queued + running + pending).
    QueueDepth,
    /// Free KV fraction.
    KvUtilization,
    /// 1 / (1 + effective load).
    LoadBalance,
    /// Router-tracked in-flight requests.
    ActiveRequests,
}

impl Scorer {
    /// Every scorer with its name.
    pub const ALL: [(&'static str, Scorer); 6] = [
        ("prefix-affinity", Scorer::PrefixAffinity),
        ("precise-prefix", Scorer::PrecisePrefix),
        ("queue-depth", Scorer::QueueDepth),
        ("kv-utilization", Scorer::KvUtilization),
        ("load-balance", Scorer::LoadBalance),
        ("active-requests", Scorer::ActiveRequests),
    ];

    /// The scorer called `name`.
    pub fn parse(name: &str) -> Option<Scorer> {
        Scorer::ALL.iter().find(|(n, _)| *n == name).map(|&(_, s)| s)
    }

    fn name(self) -> &'static str {
        Scorer::ALL.iter().find(|(_, s)| *s == self).map_or("", |(n, _)| n)
    }

    /// Scores every instance into column `c` of `sheet`.
    fn score_all(self, view: &ClusterView<'_>, sheet: &mut ScoreSheet, c: usize) {
        let snaps = view.snapshots();
        let min_max = |f: &dyn Fn(usize) -> u32| (0..snaps.len()).map(f).fold((u32::MAX, 0), |(lo, hi), x| (lo.min(x), hi.max(x)));
        match self {
            Scorer::PrefixAffinity => {
                let blocks = f64::from(view.prompt_blocks());
                for i in 0..snaps.len() {
                    sheet.set(i, c, if blocks > 0.0 { f64::from(view.prefix_match_blocks(i)) / blocks } else { 0.0 });
                }
            }
            Scorer::PrecisePrefix => {
                let tokens = f64::from(view.prompt_tokens());
                for i in 0..snaps.len() {
                    sheet.set(i, c, if tokens > 0.0 { view.weighted_cached_prefix_tokens(i) / tokens } else { 0.0 });
                }
            }
            Scorer::QueueDepth => {
                let q = |i: usize| snaps[i].effective_load();
                let (lo, hi) = min_max(&q);
                for i in 0..snaps.len() {
                    sheet.set(i, c, if hi == lo { 1.0 } else { f64::from(hi - q(i)) / f64::from(hi - lo) });
                }
            }
            Scorer::KvUtilization => {
                for (i, s) in snaps.iter().enumerate() {
                    sheet.set(i, c, (1.0 - s.kv_utilization).clamp(0.0, 1.0));
                }
            }
            Scorer::LoadBalance => {
                for (i, s) in snaps.iter().enumerate() {
                    sheet.set(i, c, 1.0 / (1.0 + f64::from(s.effective_load())));
                }
            }
            Scorer::ActiveRequests => {
                let (_, hi) = min_max(&|i| snaps[i].in_flight);
                for (i, s) in snaps.iter().enumerate() {
                    sheet.set(i, c, if hi == 0 { 1.0 } else { f64::from(hi - s.in_flight) / f64::from(hi) });
                }
            }
        }
    }
}

/// Parses `name:weight,name:weight` (the `--routing-scorers` syntax).
pub fn parse_scorer_list(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    for part in text.split(',') {
        let (name, w) =
            part.split_once(':').ok_or_else(|| format!("`{part}` is not SCORER:WEIGHT (e.g. prefix-affinity:4,queue-depth:3)"))?;
        let w: f64 = w
            .trim()
            .parse()
            .ok()
            .filter(|w: &f64| w.is_finite())
            .ok_or_else(|| format!("weight of `{}` must be a finite number, got `{}`", name.trim(), w.trim()))?;
        if out.insert(name.trim().to_string(), w).is_some() {
            return Err(format!("`{}` appears twice", name.trim()));
        }
    }
    Ok(out)
}

/// `weighted` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WeightedParams {
    /// Scorer name → weight (in [0, 1e9], at least one > 0; only ratios matter).
    pub scorers: BTreeMap<String, f64>,
}

impl Default for WeightedParams {
    /// `prefix-affinity:4, queue-depth:3`, the best ratio of the predictive-admission study.
    fn default() -> Self {
        WeightedParams { scorers: [("prefix-affinity".to_string(), 4.0), ("queue-depth".to_string(), 3.0)].into() }
    }
}

/// `prefix-affinity` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrefixAffinityParams {
    /// Fewer matched blocks than this on every instance falls back to least-loaded (≥ 1).
    pub min_match_blocks: u32,
}

impl Default for PrefixAffinityParams {
    fn default() -> Self {
        PrefixAffinityParams { min_match_blocks: 1 }
    }
}

policy_kind! {
    /// A routing template and its parameters.
    RoutingSpec {
        /// Instances in turn.
        "round-robin" => RoundRobin(NoParams),
        /// Smallest effective load.
        "least-loaded" => LeastLoaded(NoParams),
        /// Weighted scorers.
        "weighted" => Weighted(WeightedParams),
        /// Longest prefix match, least-loaded fallback.
        "prefix-affinity" => PrefixAffinity(PrefixAffinityParams),
        /// Pathological: largest effective load.
        "always-busiest" => AlwaysBusiest(NoParams),
        /// vLLM's data-parallel load balancer: smallest 4·waiting + running.
        "vllm-dp" => VllmDp(NoParams),
    }
}

impl Default for RoutingSpec {
    fn default() -> Self {
        RoutingSpec::RoundRobin(NoParams {})
    }
}

const LOAD: &str = "effective_load";

impl RoutingSpec {
    fn weighs(&self, scorer: &str) -> bool {
        matches!(self, RoutingSpec::Weighted(q) if q.scorers.get(scorer).is_some_and(|&w| w > 0.0))
    }

    /// Whether the policy reads the router's prefix index.
    pub fn uses_prefix_index(&self) -> bool {
        matches!(self, RoutingSpec::PrefixAffinity(_)) || self.weighs("prefix-affinity")
    }

    /// Whether the policy reads the instances' true prefix caches.
    pub fn uses_true_cache(&self) -> bool {
        self.weighs("precise-prefix")
    }

    /// Validates the parameters and builds the policy with its score sheet.
    pub fn build(&self, instances: usize, path: &str) -> Result<(Box<dyn RoutingPolicy>, ScoreSheet), ConfigError> {
        let p = format!("{path}.params");
        let (policy, components): (Box<dyn RoutingPolicy>, Vec<&'static str>) = match self {
            RoutingSpec::RoundRobin(_) => (Box::new(RoundRobin { next: 0 }), vec![]),
            RoutingSpec::LeastLoaded(_) => (Box::new(ByLoad { busiest: false }), vec![LOAD]),
            RoutingSpec::AlwaysBusiest(_) => (Box::new(ByLoad { busiest: true }), vec![LOAD]),
            RoutingSpec::VllmDp(_) => (Box::new(VllmDp), vec!["waiting", "running"]),
            RoutingSpec::PrefixAffinity(q) => {
                check(q.min_match_blocks >= 1, &p, "min_match_blocks", q.min_match_blocks, "at least 1")?;
                (Box::new(PrefixAffinity { min_match: q.min_match_blocks }), vec!["prefix_match_blocks", LOAD])
            }
            RoutingSpec::Weighted(q) => {
                let names: Vec<&str> = Scorer::ALL.iter().map(|(n, _)| *n).collect();
                let mut scorers = Vec::new();
                for (name, &w) in &q.scorers {
                    let s =
                        Scorer::parse(name).ok_or_else(|| ConfigError::unknown(format!("{p}.scorers.{name}"), "scorer", name, &names))?;
                    check(w.is_finite() && (0.0..=1e9).contains(&w), &format!("{p}.scorers"), name, w, "a weight in [0, 1e9]")?;
                    scorers.push((s, w));
                }
                let total: f64 = scorers.iter().map(|s| s.1).sum();
                if total <= 0.0 {
                    return Err(ConfigError::new(format!("{p}.scorers"), "needs at least one scorer with a positive weight"));
                }
                let components = scorers.iter().map(|s| s.0.name()).collect();
                (Box::new(Weighted { scorers: scorers.into_iter().map(|(s, w)| (s, w / total)).collect() }), components)
            }
        };
        Ok((policy, ScoreSheet::new(instances, components)))
    }
}

/// Index of the largest `key`, the lowest index among equals.
fn argmax(n: usize, key: impl Fn(usize) -> f64) -> usize {
    let mut best = 0;
    for i in 1..n {
        if key(i) > key(best) {
            best = i;
        }
    }
    best
}

struct RoundRobin {
    next: u64,
}

impl RoutingPolicy for RoundRobin {
    fn route(&mut self, _req: &Request, view: &ClusterView<'_>, _sheet: &mut ScoreSheet) -> u32 {
        let i = self.next % view.snapshots().len() as u64;
        self.next += 1;
        i as u32
    }
}

struct ByLoad {
    busiest: bool,
}

impl RoutingPolicy for ByLoad {
    fn route(&mut self, _req: &Request, view: &ClusterView<'_>, sheet: &mut ScoreSheet) -> u32 {
        let snaps = view.snapshots();
        for (i, s) in snaps.iter().enumerate() {
            let load = f64::from(s.effective_load());
            sheet.set(i, 0, load);
            // 0 − load, not −load: an idle instance scores 0, not −0, in traces.
            sheet.totals[i] = if self.busiest { load } else { 0.0 - load };
        }
        argmax(snaps.len(), |i| sheet.totals[i]) as u32
    }
}

/// vLLM's `DPLBAsyncMPClient.get_core_engine_for_request` with one API
/// server: the engine with the smallest `waiting · 4 + running`, from the
/// counts the coordinator last published plus, for waiting, every request
/// sent since (its local increments); the first in rank order among equals.
struct VllmDp;

/// How much more vLLM's data-parallel load balancer weighs a waiting request than a running one.
const VLLM_DP_WAITING_WEIGHT: f64 = 4.0;

impl RoutingPolicy for VllmDp {
    fn route(&mut self, _req: &Request, view: &ClusterView<'_>, sheet: &mut ScoreSheet) -> u32 {
        let snaps = view.snapshots();
        for (i, s) in snaps.iter().enumerate() {
            let (waiting, running) = (f64::from(s.queue_depth + s.routed_unseen), f64::from(s.batch_size));
            sheet.set(i, 0, waiting);
            sheet.set(i, 1, running);
            // 0 − score, not −score: an idle engine scores 0, not −0, in traces.
            sheet.totals[i] = 0.0 - (VLLM_DP_WAITING_WEIGHT * waiting + running);
        }
        argmax(snaps.len(), |i| sheet.totals[i]) as u32
    }
}

struct PrefixAffinity {
    min_match: u32,
}

impl RoutingPolicy for PrefixAffinity {
    fn route(&mut self, _req: &Request, view: &ClusterView<'_>, sheet: &mut ScoreSheet) -> u32 {
        let snaps = view.snapshots();
        let mut longest = 0;
        for (i, s) in snaps.iter().enumerate() {
            let m = view.prefix_match_blocks(i);
            longest = longest.max(m);
            sheet.set(i, 0, f64::from(m));
            sheet.set(i, 1, f64::from(s.effective_load()));
        }
        // Among the longest matches (or everyone, when no match is long
        // enough), the least loaded: score = −load, −∞ for the excluded.
        let affinity = longest >= self.min_match;
        for i in 0..snaps.len() {
            let eligible = !affinity || sheet.component(i, 0) == f64::from(longest);
            sheet.totals[i] = if eligible { 0.0 - sheet.component(i, 1) } else { f64::NEG_INFINITY };
        }
        argmax(snaps.len(), |i| sheet.totals[i]) as u32
    }
}

struct Weighted {
    // Scorers with weights normalised to sum to 1.
    scorers: Vec<(Scorer, f64)>,
}

impl RoutingPolicy for Weighted {
    fn route(&mut self, _req: &Request, view: &ClusterView<'_>, sheet: &mut ScoreSheet) -> u32 {
        let n = view.snapshots().len();
        for (c, &(s, _)) in self.scorers.iter().enumerate() {
            s.score_all(view, sheet, c);
        }
        for i in 0..n {
            sheet.totals[i] = self.scorers.iter().enumerate().map(|(c, &(_, w))| w * sheet.component(i, c)).sum();
        }
        argmax(n, |i| sheet.totals[i]) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scorer_lists_parse_and_reject_nonsense() {
        let m = parse_scorer_list("prefix-affinity:4, queue-depth:3").unwrap();
        assert_eq!(m.into_iter().collect::<Vec<_>>(), [("prefix-affinity".to_string(), 4.0), ("queue-depth".to_string(), 3.0)]);
        assert!(parse_scorer_list("prefix-affinity").is_err());
        assert!(parse_scorer_list("a:1,a:2").is_err());
        assert!(parse_scorer_list("a:x").is_err());
    }

    #[test]
    fn weighted_parameters_are_validated_with_their_path() {
        let spec = |scorers: serde_json::Value| {
            RoutingSpec::parse("weighted", Some(&serde_json::json!({ "scorers": scorers })), "routing").unwrap()
        };
        let err = |s| spec(s).build(2, "routing").err().unwrap();
        let e = err(serde_json::json!({"queue-dept": 1.0}));
        assert_eq!(e.path, "routing.params.scorers.queue-dept");
        assert!(e.message.contains("prefix-affinity, precise-prefix, queue-depth"), "{e}");
        assert_eq!(err(serde_json::json!({"queue-depth": -1.0})).path, "routing.params.scorers.queue-depth");
        assert!(err(serde_json::json!({"queue-depth": 0.0})).message.contains("positive weight"));
        let e = RoutingSpec::parse("weighted", Some(&serde_json::json!({"scorer": {}})), "routing").unwrap_err();
        assert_eq!(e.path, "routing.params.scorer");
        assert!(e.message.contains("unknown field `scorer`"), "{e}");
        let e = RoutingSpec::parse("fastest", None, "routing").unwrap_err();
        assert_eq!(e.path, "routing.type");
        assert!(e.message.contains("round-robin, least-loaded, weighted, prefix-affinity, always-busiest, vllm-dp"), "{e}");
    }
}
