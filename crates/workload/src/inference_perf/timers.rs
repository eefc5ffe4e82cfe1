//! When inference-perf's load timers send the requests of a stage.

use blis_engine::rng::SimRng;
use rand_distr::{Distribution, Exp, Poisson};

use super::config::{LoadKind, Stage};

/// The send offsets (seconds from the stage's first possible send) of one
/// stage, drawn lazily from the stage's random stream exactly as
/// inference-perf's load timers draw them: the same numbers in the same
/// order, and the stream left where drawing them all at once leaves it.
/// Holds O(1) memory whatever the stage's length (5 req/s for 10⁶ s is
/// 5 M sends).
pub struct StageTimer {
    /// Sends left in the stage, the one in `next` included.
    remaining: u64,
    /// The next offset, drawn ahead; `None` once the stage sent everything.
    next: Option<f64>,
    draw: Draw,
}

/// How a stage's offsets are drawn.
enum Draw {
    /// `ConstantLoadTimer` (also concurrent stages): one spread over the stage.
    Constant(Spread),
    /// `PoissonLoadTimer`: a Poisson count each second, spread over that second.
    Poisson { poisson: Option<Poisson<f64>>, second: f64, spread: Spread },
}

impl StageTimer {
    /// The timer of `stage`, drawing from `rng` (the first offset at once).
    pub fn new(kind: LoadKind, stage: &Stage, rng: &mut SimRng) -> StageTimer {
        let remaining = stage.num_requests();
        let draw = match kind {
            LoadKind::Constant | LoadKind::Concurrent => Draw::Constant(Spread::new(remaining, stage.rate, stage.duration, 0.0, rng)),
            LoadKind::Poisson => Draw::Poisson { poisson: Poisson::new(stage.rate).ok(), second: 0.0, spread: Spread::empty() },
        };
        let mut timer = StageTimer { remaining, next: None, draw };
        timer.next = timer.draw_next(rng);
        timer
    }

    /// A timer with nothing to send (before the first stage begins). Draws nothing.
    pub fn done() -> StageTimer {
        StageTimer { remaining: 0, next: None, draw: Draw::Constant(Spread::empty()) }
    }

    /// The next send offset, or `None` when the stage sent everything.
    pub fn peek(&self) -> Option<f64> {
        self.next
    }

    /// Consumes the next offset and draws the one after it.
    pub fn advance(&mut self, rng: &mut SimRng) {
        if self.next.is_none() {
            return;
        }
        self.remaining -= 1;
        self.next = self.draw_next(rng);
    }

    fn draw_next(&mut self, rng: &mut SimRng) -> Option<f64> {
        if self.remaining == 0 {
            // inference-perf spreads a Poisson second whole and keeps what
            // the stage needs: draw the rest, so the next stage starts where
            // it would.
            if let Draw::Poisson { spread, .. } = &mut self.draw {
                spread.finish(rng);
            }
            return None;
        }
        match &mut self.draw {
            Draw::Constant(spread) => spread.next(rng),
            Draw::Poisson { poisson, second, spread } => loop {
                if let Some(t) = spread.next(rng) {
                    return Some(t);
                }
                // A rate Poisson cannot take sends nothing (inference-perf
                // would draw counts of 0 forever).
                let count = poisson.as_ref()?.sample(rng) as u64;
                if count > 0 {
                    *spread = Spread::new(count, count as f64, 1.0, *second, rng);
                }
                *second += 1.0;
            },
        }
    }
}

/// `ConstantLoadTimer`'s draw: `n` exponential gaps of mean 1/rate rescaled
/// to sum to `duration`, as cumulative offsets after `start`. The scale
/// needs every gap: a copy of the stream draws them once to sum them, then
/// the stream draws them again as they are sent.
struct Spread {
    left: u64,
    exp: Option<Exp<f64>>,
    scale: f64,
    t: f64,
}

impl Spread {
    fn new(n: u64, rate: f64, duration: f64, start: f64, rng: &SimRng) -> Spread {
        let exp = Exp::new(rate).ok();
        let scale = exp.as_ref().map_or(0.0, |exp| {
            let mut first_pass = rng.clone();
            let total: f64 = (0..n).map(|_| exp.sample(&mut first_pass)).sum();
            if total > 0.0 { duration / total } else { 0.0 }
        });
        Spread { left: n, exp, scale, t: start }
    }

    fn empty() -> Spread {
        Spread { left: 0, exp: None, scale: 0.0, t: 0.0 }
    }

    fn next(&mut self, rng: &mut SimRng) -> Option<f64> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if let Some(exp) = &self.exp {
            self.t += exp.sample(rng) * self.scale;
        }
        Some(self.t)
    }

    /// Draws the gaps not sent.
    fn finish(&mut self, rng: &mut SimRng) {
        while self.next(rng).is_some() {}
    }
}
