//! What a scaling policy may know of the pools it sizes besides the scraped
//! metrics: their role and how long their replicas' steps take, as the
//! pre-deployment profiling of an SLA planner measures them (Dynamo's
//! `profile_sla` times prefill by prompt length and decode by batch and
//! context on the real engine; here the pool's latency model is asked).

use std::sync::Arc;

use blis_engine::latency::{BatchEntry, InstanceLoad, LatencyModel, StepBatch};
use blis_engine::scheduler::InstanceConfig;

use crate::fleet::Role;

/// A scaling group's pools as a policy sees them (the group's first pool).
#[derive(Clone)]
pub struct PoolProfile {
    /// What the replicas do.
    pub role: Role,
    /// Their step-time model.
    pub latency: Arc<dyn LatencyModel>,
    /// Their server configuration (token budget, seats, KV blocks).
    pub instance: InstanceConfig,
}

impl PoolProfile {
    /// How long one replica alone takes to prefill a prompt of `tokens`, in
    /// chunks of its token budget, µs (at least 1 µs a chunk).
    pub fn prefill_us(&self, tokens: u32) -> f64 {
        let budget = self.instance.scheduler.max_num_batched_tokens.max(1);
        let (mut done, mut total) = (0u32, 0.0);
        while done < tokens {
            let n = (tokens - done).min(budget);
            let entry = [BatchEntry { computed_tokens: done, new_tokens: n, prompt_tokens: tokens }];
            total += self.step_us(&entry);
            done += n;
        }
        total
    }

    /// The step time of `batch` requests decoding at `context` tokens each, µs.
    pub fn decode_step_us(&self, batch: u32, context: u32, scratch: &mut Vec<BatchEntry>) -> f64 {
        scratch.clear();
        scratch.resize(batch as usize, BatchEntry { computed_tokens: context, new_tokens: 1, prompt_tokens: context });
        self.step_us(scratch)
    }

    /// The most requests of `context` tokens one replica runs at once: its
    /// seats, and the KV blocks they hold (vLLM's null block aside).
    pub fn max_decodes(&self, context: u32) -> u32 {
        let blocks_each = u64::from(context.div_ceil(self.instance.block_size.max(1))).max(1);
        let by_kv = self.instance.num_gpu_blocks.saturating_sub(1) / blocks_each;
        self.instance.scheduler.max_num_seqs.min(u32::try_from(by_kv).unwrap_or(u32::MAX)).max(1)
    }

    fn step_us(&self, entries: &[BatchEntry]) -> f64 {
        let load = InstanceLoad { running: entries.len() as u32, ..InstanceLoad::default() };
        self.latency.step_time(&StepBatch { entries, load, preempted: 0 }).as_us() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::latency::Blackbox;

    /// 1 ms a step, 10 µs a prefill token, 100 µs a decode.
    fn profile() -> PoolProfile {
        PoolProfile {
            role: Role::Decode,
            latency: Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 10.0, 100.0] }),
            instance: InstanceConfig::basic(64, 512, 4096, 1001),
        }
    }

    #[test]
    fn a_profile_times_chunked_prefills_and_decode_batches() {
        let p = profile();
        // 1200 tokens in chunks of 512, 512, 176: three steps.
        assert_eq!(p.prefill_us(1200), 3.0 * 1000.0 + 1200.0 * 10.0);
        assert_eq!(p.decode_step_us(8, 300, &mut Vec::new()), 1000.0 + 8.0 * 100.0);
        // 1000 usable blocks of 16 tokens, 19 blocks for 300 tokens: 52 requests; seats allow 64.
        assert_eq!(p.max_decodes(300), 52);
        assert_eq!(p.max_decodes(10), 64);
    }
}
