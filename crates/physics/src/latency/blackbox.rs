//! The blackbox model's features, for fitting: step time linear in
//! uncached prefill and decode tokens, queueing delay linear in prompt
//! length. The model itself is the kernel's [`Blackbox`].

use std::sync::Arc;

use blis_engine::latency::{Blackbox, LatencyModel, QueueingInput, StepBatch};

use super::{FeatureBasis, coefficient_array};

/// The blackbox features: β over `[1, uncached prefill tokens, decode
/// requests]`, α over `[1, prompt tokens, output tokens so far]`.
#[derive(Copy, Clone, Debug, Default)]
pub struct BlackboxBasis;

/// Names of the α coefficients, in order.
pub const ALPHA_NAMES: [&str; 3] = ["queueing_us", "queueing_us_per_prompt_token", "per_output_token_us"];

/// Names of the β coefficients, in order.
pub const BETA_NAMES: [&str; 3] = ["per_step_us", "per_prefill_token_us", "per_decode_token_us"];

impl FeatureBasis for BlackboxBasis {
    fn name(&self) -> &'static str {
        "blackbox"
    }

    fn alpha_names(&self) -> &'static [&'static str] {
        &ALPHA_NAMES
    }

    fn beta_names(&self) -> &'static [&'static str] {
        &BETA_NAMES
    }

    fn step_features(&self, batch: &StepBatch<'_>, out: &mut [f64]) {
        let t = batch.totals();
        out.copy_from_slice(&[1.0, t.prefill_tokens as f64, f64::from(t.num_decode)]);
    }

    fn alpha_features(&self, arrival: &QueueingInput, output_tokens: u32, ttft: &mut [f64], e2e: &mut [f64]) {
        let prompt = f64::from(arrival.prompt_tokens);
        ttft.copy_from_slice(&[1.0, prompt, 1.0]);
        e2e.copy_from_slice(&[1.0, prompt, f64::from(output_tokens)]);
    }

    fn with_coefficients_unchecked(&self, alpha: &[f64], beta: &[f64]) -> Arc<dyn LatencyModel> {
        Arc::new(Blackbox { alpha: coefficient_array(alpha), beta: coefficient_array(beta) })
    }
}
