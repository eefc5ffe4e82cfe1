//! The blackbox model: step time linear in uncached prefill and decode tokens,
//! queueing delay linear in prompt length (BLIS's original trained model;
//! its fitting basis is `blis_physics::latency::BlackboxBasis`).

use super::{LatencyModel, QueueingInput, StepBatch, overhead_micros, step_micros};
use crate::time::Micros;

/// `step = β0 + β1·prefill tokens + β2·decode tokens` (µs);
/// `queueing = α0 + α1·prompt tokens`; `α2` µs per output token.
///
/// Prefill tokens are the uncached ones actually computed in the step
/// (prefix-cache hits cost nothing).
#[derive(Clone, Debug, PartialEq)]
pub struct Blackbox {
    /// α0, α1, α2.
    pub alpha: [f64; 3],
    /// β0, β1, β2.
    pub beta: [f64; 3],
}

impl LatencyModel for Blackbox {
    fn name(&self) -> &'static str {
        "blackbox"
    }

    fn step_time(&self, batch: &StepBatch<'_>) -> Micros {
        let t = batch.totals();
        step_micros(self.beta[0] + self.beta[1] * t.prefill_tokens as f64 + self.beta[2] * f64::from(t.num_decode))
    }

    fn queueing_delay(&self, input: &QueueingInput) -> Micros {
        overhead_micros(self.alpha[0] + self.alpha[1] * f64::from(input.prompt_tokens))
    }

    fn output_token_overhead(&self) -> Micros {
        overhead_micros(self.alpha[2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::{BatchEntry, InstanceLoad};

    #[test]
    fn linear_in_prefill_and_decode_tokens() {
        let m = Blackbox { alpha: [100.0, 0.5, 3.0], beta: [1000.0, 2.0, 10.0] };
        let entries = [
            BatchEntry { computed_tokens: 0, new_tokens: 300, prompt_tokens: 500 },
            BatchEntry { computed_tokens: 700, new_tokens: 1, prompt_tokens: 600 },
            BatchEntry { computed_tokens: 90, new_tokens: 1, prompt_tokens: 80 },
        ];
        let b = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
        assert_eq!(m.step_time(&b), Micros(1000 + 600 + 20));
        let q = QueueingInput { prompt_tokens: 200, prefix_hit_tokens: 0, load: InstanceLoad::default() };
        assert_eq!(m.queueing_delay(&q), Micros(200));
        assert_eq!(m.output_token_overhead(), Micros(3));
        let empty = StepBatch { entries: &[], load: InstanceLoad::default(), preempted: 0 };
        assert_eq!(Blackbox { alpha: [0.0; 3], beta: [0.0; 3] }.step_time(&empty), Micros(1));
    }
}
