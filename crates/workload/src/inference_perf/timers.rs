//! When inference-perf's load timers send the requests of a stage.

use blis_engine::rng::SimRng;
use rand_distr::{Distribution, Exp, Poisson};

use super::config::{LoadKind, Stage};

/// Send offsets (seconds from the stage's first possible send) of one stage,
/// as inference-perf's load timers draw them.
pub fn stage_send_offsets(kind: LoadKind, stage: &Stage, rng: &mut SimRng) -> Vec<f64> {
    let n = stage.num_requests() as usize;
    match kind {
        LoadKind::Constant | LoadKind::Concurrent => spread(n, stage.rate, stage.duration, 0.0, rng),
        LoadKind::Poisson => {
            let mut out = Vec::with_capacity(n);
            let poisson = Poisson::new(stage.rate).ok();
            let mut second = 0.0;
            while out.len() < n {
                let count = poisson.as_ref().map_or(0.0, |p| p.sample(rng)) as usize;
                if count > 0 {
                    out.extend(spread(count, count as f64, 1.0, second, rng));
                }
                second += 1.0;
            }
            out.truncate(n);
            out
        }
    }
}

/// `ConstantLoadTimer`: `n` exponential gaps of mean 1/rate rescaled to sum
/// to `duration`, as cumulative offsets after `start`.
fn spread(n: usize, rate: f64, duration: f64, start: f64, rng: &mut SimRng) -> Vec<f64> {
    let Ok(exp) = Exp::new(rate) else { return vec![start; n] };
    let gaps: Vec<f64> = (0..n).map(|_| exp.sample(rng)).collect();
    let total: f64 = gaps.iter().sum();
    let scale = if total > 0.0 { duration / total } else { 0.0 };
    let mut t = start;
    gaps.iter()
        .map(|g| {
            t += g * scale;
            t
        })
        .collect()
}

