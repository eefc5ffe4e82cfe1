//! A physics-informed TTFT estimate: queue wait plus cache-aware prefill
//! (predictive-slo-admission.md). Shared by the `predictive-slo` admission
//! policy and the counterfactual regret of routing decisions.

use blis_engine::latency::{BatchEntry, InstanceLoad, LatencyModel, StepBatch};
use serde::Serialize;

/// `estimate = queued_ahead · step_us + beta0_us + beta1_us_per_token · uncached_tokens`, µs.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct TtftEstimator {
    /// Wait per request queued ahead (the spec's `AvgStepTime`).
    pub step_us: f64,
    /// Fixed cost of the prefill step.
    pub beta0_us: f64,
    /// Cost per prompt token not in the cache.
    pub beta1_us_per_token: f64,
}

impl TtftEstimator {
    /// Calibrates the estimate on the simulated latency model: the prefill
    /// line through a 16-token and a 1024-token prefill step (`beta0` its
    /// intercept, `beta1` its slope), and `step_us` the time of a step
    /// holding one decode at a 1024-token context. For the blackbox model
    /// this recovers β0 and β1 exactly and gives β0 + β2 per queued request;
    /// for the roofline it is exact at both ends of the line (a short
    /// prefill is memory-bound, a long one compute-bound).
    pub fn from_latency_model(model: &dyn LatencyModel) -> TtftEstimator {
        let step = |entry: BatchEntry| {
            model.step_time(&StepBatch { entries: &[entry], load: InstanceLoad::default(), preempted: 0 }).as_us() as f64
        };
        let prefill = |n: u32| step(BatchEntry { computed_tokens: 0, new_tokens: n, prompt_tokens: n });
        let (short, long) = (prefill(16), prefill(1024));
        let beta1 = ((long - short) / 1008.0).max(0.0);
        TtftEstimator {
            step_us: step(BatchEntry { computed_tokens: 1024, new_tokens: 1, prompt_tokens: 1024 }),
            beta0_us: (short - 16.0 * beta1).max(0.0),
            beta1_us_per_token: beta1,
        }
    }

    /// Estimated TTFT (µs) behind `queued_ahead` requests with `uncached_tokens` to prefill.
    pub fn estimate_us(&self, queued_ahead: u32, uncached_tokens: u32) -> f64 {
        f64::from(queued_ahead) * self.step_us + self.beta0_us + self.beta1_us_per_token * f64::from(uncached_tokens)
    }
}

/// The estimate for the request in `view` at instance `i`: requests of the
/// same or higher `priority` queued there (the reviewers' fix: lower-priority
/// requests would be overtaken) and its prompt tokens the router's prefix
/// index does not place there.
pub(crate) fn estimate_at(est: &TtftEstimator, view: &crate::view::ClusterView<'_>, i: usize, priority: f64) -> f64 {
    est.estimate_us(view.queued_at_or_above(i, priority), view.prompt_tokens() - view.prefix_match_tokens(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::latency::Blackbox;

    #[test]
    fn calibration_recovers_blackbox_coefficients() {
        let e = TtftEstimator::from_latency_model(&Blackbox { alpha: [0.0; 3], beta: [6910.0, 17.0, 3.0] });
        assert_eq!(e, TtftEstimator { step_us: 6913.0, beta0_us: 6910.0, beta1_us_per_token: 17.0 });
        assert_eq!(e.estimate_us(2, 100), 2.0 * 6913.0 + 6910.0 + 1700.0);
    }
}
