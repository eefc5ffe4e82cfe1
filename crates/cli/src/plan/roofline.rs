//! The bounds `blis plan` checks a candidate with before simulating it:
//! for each pool, the work it must carry (its share of the offered prompt
//! and output tokens) against what its GPUs could carry at peak (the
//! pruning bound) and at the spec's MFU (the analytical estimator).

use blis_cluster::fleet::{Replicas, Role};
use blis_scenario::fleet::FleetPool;
use blis_scenario::knobs::Knobs;

/// One pool's offered work and capacity.
pub struct PoolRoofline {
    /// The pool's role: a serving pool carries prompts and outputs, a
    /// prefill pool the prompts, a decode pool the outputs.
    role: Role,
    replicas: f64,
    /// Required FLOP/s and decode tokens/s of the pool's share of the workload.
    flops_needed: f64,
    decode_needed: f64,
    prefill_tokens_per_s: f64,
    /// Per replica: peak FLOP/s, decode tokens/s bound, and MFU-derated
    /// prefill and decode tokens/s.
    peak_flops: f64,
    decode_bound: f64,
    prefill_mfu: f64,
    decode_mfu: f64,
}

impl PoolRoofline {
    /// The bounds for `pool` under the knobs `k`, when the workload is
    /// given by rate and lengths and the pool has a fixed size.
    pub fn of(pool: &FleetPool, k: &Knobs) -> Option<PoolRoofline> {
        if k.workload_spec.value.is_some() || k.trace.value.is_some() || k.workload.value.is_some() {
            return None;
        }
        let Replicas::Fixed(replicas) = pool.replicas else { return None };
        let d = &pool.deployment;
        let rate = k.rate.value;
        let uncached = (k.prompt_tokens.value - f64::from(k.prefix_tokens.value)).max(0.0);
        let (prompt, output) = match pool.role {
            Role::Serve => (uncached, k.output_tokens.value),
            Role::Prefill => (uncached, 0.0),
            Role::Decode => (0.0, k.output_tokens.value),
        };
        let (m, g, tp) = (&d.server.model, &d.server.gpu, f64::from(d.server.tp));
        // GEMM FLOPs at half precision's speed (8-bit float ones count less),
        // and the bytes of the weights one token's step reads.
        let gemm = m.stack_gemm_flops_per_token_by_class();
        let flops_per_token = gemm.weighted_sum(&g.gemm_time_scales(&m.weights));
        let peak = g.peak_flops() * tp;
        let active_bytes = gemm.weighted_sum(&m.weights.bytes_per_param_by_class()) / 2.0;
        let seats = f64::from(d.server.instance.scheduler.max_num_seqs);
        let step_min_s = active_bytes / (g.hbm_bytes_per_s() * tp);
        Some(PoolRoofline {
            role: pool.role,
            replicas: f64::from(replicas),
            flops_needed: rate * (prompt + output) * flops_per_token,
            decode_needed: rate * output,
            prefill_tokens_per_s: rate * prompt,
            peak_flops: peak,
            decode_bound: seats / step_min_s,
            prefill_mfu: peak * g.mfu_prefill / flops_per_token,
            decode_mfu: (peak * g.mfu_decode / flops_per_token).min(seats / step_min_s),
        })
    }

    /// Why the pool cannot carry its work even at peak, if it cannot.
    fn prune(&self) -> Option<String> {
        let pool = match self.role {
            Role::Serve => String::new(),
            role => format!("the {} pool ", role.name()),
        };
        if self.flops_needed > self.replicas * self.peak_flops {
            return Some(format!(
                "{pool}needs {:.1} TFLOP/s, the GPUs peak at {:.1}",
                self.flops_needed / 1e12,
                self.replicas * self.peak_flops / 1e12
            ));
        }
        if self.decode_needed > self.replicas * self.decode_bound {
            return Some(format!(
                "{pool}needs {:.0} output tokens/s, HBM bandwidth allows {:.0}",
                self.decode_needed,
                self.replicas * self.decode_bound
            ));
        }
        None
    }

    /// Whether a throughput-only estimate says the pool carries its work:
    /// the busy fraction of prefill at `mfu_prefill` plus decode at
    /// `mfu_decode` (or HBM) is at most 1 per replica.
    fn carries_at_mfu(&self) -> bool {
        let busy = |needed: f64, per_s: f64| if needed > 0.0 { needed / per_s } else { 0.0 };
        busy(self.prefill_tokens_per_s, self.prefill_mfu) + busy(self.decode_needed, self.decode_mfu) <= self.replicas
    }
}

/// Why some pool of a candidate cannot carry its work even at peak, if one cannot.
pub fn prune(pools: &[PoolRoofline]) -> Option<String> {
    pools.iter().find_map(PoolRoofline::prune)
}

/// Whether a throughput-only estimate says every pool of a candidate carries its work.
pub fn carries_at_mfu(pools: &[PoolRoofline]) -> bool {
    pools.iter().all(PoolRoofline::carries_at_mfu)
}
