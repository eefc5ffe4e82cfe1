//! Decision traces and counterfactuals (cluster-policy-plan PR 17–18).
//!
//! With a [`DecisionSink`], every admission and routing decision is handed
//! over as it happens, with every candidate's snapshot and scores. With
//! counterfactuals on (`k > 0`), each routing decision is also re-judged by
//! an estimate independent of the policy ([`crate::estimate`]): every
//! candidate's estimated TTFT, the `k` best, and the **regret**: the chosen
//! instance's estimate minus the best one (≥ 0; 0 when the router picked a
//! best instance by the estimate). It is an estimate, not a replay.

use blis_engine::metrics::{Distribution, Samples};
use blis_engine::request::Request;
use blis_engine::time::Micros;
use serde::Serialize;

use crate::autoscale::ScaleTrace;
use crate::estimate::{TtftEstimator, estimate_at};
use crate::policy::{RejectReason, ScoreSheet};
use crate::snapshot::InstanceSnapshot;
use crate::view::ClusterView;

/// One admission decision.
#[derive(Copy, Clone, Debug)]
pub struct AdmissionTrace<'a> {
    /// Decision time.
    pub time: Micros,
    /// The request (its priority already set).
    pub request: &'a Request,
    /// Admission policy name.
    pub policy: &'static str,
    /// `None` when admitted.
    pub rejected: Option<RejectReason>,
    /// How long an admitted request is held before routing (zero unless a
    /// shaping limit delayed it).
    pub delay: Micros,
}

/// Counterfactual view of one routing decision.
#[derive(Copy, Clone, Debug)]
pub struct CounterfactualTrace<'a> {
    /// Estimated TTFT at every candidate (in the order of the decision's snapshots), ms.
    pub estimated_ttft_ms: &'a [f64],
    /// The instance ids of the `k` candidates with the lowest estimate, best first (ties: lowest id).
    pub top_k: &'a [u32],
    /// Estimate of the chosen instance minus the best estimate, ms.
    pub regret_ms: f64,
}

/// One routing decision.
#[derive(Copy, Clone, Debug)]
pub struct RoutingTrace<'a> {
    /// Decision time.
    pub time: Micros,
    /// The request.
    pub request: &'a Request,
    /// Routing policy name.
    pub policy: &'static str,
    /// The chosen instance's id.
    pub chosen: u32,
    /// What the policy saw of each candidate (each names its instance).
    pub snapshots: &'a [InstanceSnapshot],
    /// The policy's scores of each candidate.
    pub scores: &'a ScoreSheet,
    /// Present when counterfactuals are on.
    pub counterfactual: Option<CounterfactualTrace<'a>>,
}

/// Receives decisions as they are made (e.g. a JSON-lines writer).
pub trait DecisionSink {
    /// An admission decision.
    fn admission(&mut self, d: &AdmissionTrace<'_>);
    /// A routing decision.
    fn routing(&mut self, d: &RoutingTrace<'_>);
    /// Under prefill/decode disaggregation, the choice of a disaggregated
    /// request's prefill instance among the prefill pool (made right after
    /// [`DecisionSink::routing`] chose its decode instance; never with a
    /// counterfactual).
    fn prefill_routing(&mut self, _d: &RoutingTrace<'_>) {}
    /// An autoscaling decision or a replica's transition (only with autoscaling).
    fn scale(&mut self, _e: &ScaleTrace<'_>) {}
}

/// Counterfactual state: per-decision buffers and the regret distribution.
pub(crate) struct Counterfactuals {
    k: usize,
    estimator: TtftEstimator,
    estimated_ms: Vec<f64>,
    // Candidate positions sorted by estimate, and the ids of the best k.
    order: Vec<u32>,
    top_ids: Vec<u32>,
    regrets_ms: Samples,
    suboptimal: u64,
}

/// Summary of the counterfactual analysis of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CounterfactualReport {
    /// Alternatives kept per decision.
    pub k: u32,
    /// The estimate used (calibrated on the simulated latency model).
    pub estimator: TtftEstimator,
    /// Routing decisions analysed.
    pub decisions: u64,
    /// Decisions whose choice was not a best one by the estimate.
    pub suboptimal_decisions: u64,
    /// Regret per decision, ms.
    pub regret_ms: Distribution,
}

impl Counterfactuals {
    /// Keeps `k` alternatives, at most `max_candidates` (the most instances a decision may see).
    pub fn new(k: u32, estimator: TtftEstimator, max_candidates: usize) -> Counterfactuals {
        Counterfactuals {
            k: (k as usize).min(max_candidates),
            estimator,
            estimated_ms: Vec::new(),
            order: Vec::new(),
            top_ids: Vec::new(),
            regrets_ms: Samples::default(),
            suboptimal: 0,
        }
    }

    /// Judges a decision for the candidate at position `chosen`; the result
    /// borrows the buffers until the next one.
    pub fn judge(&mut self, req: &Request, view: &ClusterView<'_>, chosen: usize) -> CounterfactualTrace<'_> {
        let n = view.snapshots().len();
        self.estimated_ms.clear();
        self.estimated_ms.extend((0..n).map(|i| estimate_at(&self.estimator, view, i, req.meta.priority) / 1e3));
        self.order.clear();
        self.order.extend(0..n as u32);
        let est = &self.estimated_ms;
        self.order.sort_unstable_by(|&a, &b| est[a as usize].total_cmp(&est[b as usize]).then(a.cmp(&b)));
        let regret = est[chosen] - est[self.order[0] as usize];
        if regret > 0.0 {
            self.suboptimal += 1;
        }
        self.regrets_ms.push(regret);
        self.top_ids.clear();
        self.top_ids.extend(self.order.iter().take(self.k).map(|&c| view.snapshots()[c as usize].instance));
        CounterfactualTrace { estimated_ttft_ms: &self.estimated_ms, top_k: &self.top_ids, regret_ms: regret }
    }

    pub fn report(&self) -> CounterfactualReport {
        CounterfactualReport {
            k: self.k as u32,
            estimator: self.estimator,
            decisions: self.regrets_ms.len() as u64,
            suboptimal_decisions: self.suboptimal,
            regret_ms: self.regrets_ms.summary(1.0),
        }
    }
}
