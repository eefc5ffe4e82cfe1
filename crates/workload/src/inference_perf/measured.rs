//! What a recorded run's reports measured of its requests' lengths: the
//! mean prompt length the server saw (to which generated prompts are
//! scaled), and the length distributions of its successful requests as the
//! reports' percentiles give them (what a dataset run's requests are drawn
//! from when they were not recorded one by one).

use blis_engine::rng::mix64;

/// A distribution known by some of its quantiles (a report's `min`, `p1`,
/// …, `median`, …, `max`): its quantile function is the piecewise-linear
/// interpolation between them. Holds at least two points, spanning
/// probabilities 0 and 1, with values non-decreasing in probability.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantileTable {
    /// (probability, value), probabilities strictly increasing from 0 to 1.
    points: Vec<(f64, f64)>,
}

impl QuantileTable {
    /// The table of `(probability, value)` pairs in any order. Errors name
    /// what is missing: a point at probability 0 (the minimum) and at 1 (the
    /// maximum), probabilities in [0, 1], finite non-negative values that do
    /// not decrease as the probability grows. Two points at one probability
    /// must agree.
    pub fn new(mut points: Vec<(f64, f64)>) -> Result<QuantileTable, String> {
        if let Some(&(p, v)) = points.iter().find(|(p, v)| !((0.0..=1.0).contains(p) && v.is_finite() && *v >= 0.0)) {
            return Err(format!("quantile {p} = {v}: probabilities must be in [0, 1] and values finite and non-negative"));
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points.dedup_by(|later, kept| later.0 == kept.0 && later.1 == kept.1);
        if let Some(w) = points.windows(2).find(|w| w[0].0 == w[1].0 || w[1].1 < w[0].1) {
            return Err(format!(
                "quantiles {} = {} and {} = {}: values must not decrease as the probability grows",
                w[0].0, w[0].1, w[1].0, w[1].1
            ));
        }
        match (points.first(), points.last()) {
            (Some(&(0.0, _)), Some(&(1.0, _))) if points.len() >= 2 => Ok(QuantileTable { points }),
            _ => Err("needs the minimum and the maximum (quantiles 0 and 1)".into()),
        }
    }

    /// The value at probability `p` (clamped to [0, 1]).
    pub fn value_at(&self, p: f64) -> f64 {
        let p = p.clamp(0.0, 1.0);
        let i = self.points.partition_point(|&(q, _)| q <= p).clamp(1, self.points.len() - 1);
        let ((p0, v0), (p1, v1)) = (self.points[i - 1], self.points[i]);
        v0 + (v1 - v0) * (p - p0) / (p1 - p0)
    }

    /// The distribution's mean: the integral of the quantile function, exact
    /// for the piecewise-linear interpolation.
    pub fn mean(&self) -> f64 {
        self.points.windows(2).map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0).sum()
    }

    /// A token count drawn by `key` (a deterministic hash input): the value
    /// at a probability uniform in [0, 1) given by `key`, rounded, at least 1.
    pub fn tokens_for(&self, key: u64) -> u32 {
        let unit = (mix64(key) >> 11) as f64 / (1u64 << 53) as f64;
        (self.value_at(unit).round() as u32).max(1)
    }
}

/// What a recorded run's reports measured of its requests' lengths.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeasuredLengths {
    /// Mean prompt length the server saw, tokens.
    pub prompt_mean_tokens: Option<f64>,
    /// Prompt lengths of the successful requests, tokens.
    pub prompt: Option<QuantileTable>,
    /// Output lengths of the successful requests, tokens.
    pub output: Option<QuantileTable>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(points: &[(f64, f64)]) -> QuantileTable {
        QuantileTable::new(points.to_vec()).unwrap()
    }

    #[test]
    fn interpolates_between_the_reported_quantiles() {
        let t = table(&[(1.0, 300.0), (0.0, 100.0), (0.5, 150.0)]);
        assert_eq!(t.value_at(0.0), 100.0);
        assert_eq!(t.value_at(0.25), 125.0);
        assert_eq!(t.value_at(0.5), 150.0);
        assert_eq!(t.value_at(0.75), 225.0);
        assert_eq!(t.value_at(1.0), 300.0);
        assert_eq!(t.value_at(7.0), 300.0);
        // ∫ = 0.5·(100+150)/2 + 0.5·(150+300)/2
        assert!((t.mean() - 175.0).abs() < 1e-12);
    }

    #[test]
    fn refuses_tables_that_are_not_quantile_functions() {
        for (points, needle) in [
            (vec![(0.0, 1.0)], "minimum and the maximum"),
            (vec![(0.1, 1.0), (1.0, 2.0)], "minimum and the maximum"),
            (vec![(0.0, 5.0), (0.5, 4.0), (1.0, 6.0)], "must not decrease"),
            (vec![(0.0, 5.0), (0.5, 5.0), (0.5, 6.0), (1.0, 6.0)], "must not decrease"),
            (vec![(0.0, f64::NAN), (1.0, 6.0)], "finite"),
            (vec![(0.0, -1.0), (1.0, 6.0)], "non-negative"),
            (vec![(-0.5, 1.0), (1.0, 6.0)], "[0, 1]"),
        ] {
            let e = QuantileTable::new(points.clone()).unwrap_err();
            assert!(e.contains(needle), "{points:?}: {e}");
        }
        // A repeated point (p50 written as `median` and `p50`) is one point.
        assert_eq!(table(&[(0.0, 1.0), (0.5, 3.0), (0.5, 3.0), (1.0, 6.0)]), table(&[(0.0, 1.0), (0.5, 3.0), (1.0, 6.0)]));
    }

    proptest! {
        /// Draws stay within [min, max] (and ≥ 1), and their mean converges
        /// to the table's integral: a brute-force check of `mean`.
        #[test]
        fn draws_follow_the_table(lo in 1.0f64..500.0, steps in proptest::collection::vec(0.0f64..400.0, 1..6), seed in any::<u64>()) {
            let n = steps.len();
            let mut v = lo;
            let mut points = vec![(0.0, lo)];
            for (i, s) in steps.iter().enumerate() {
                v += s;
                points.push(((i + 1) as f64 / n as f64, v));
            }
            let t = table(&points);
            let draws: Vec<u32> = (0..20_000u64).map(|k| t.tokens_for(seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15))).collect();
            prop_assert!(draws.iter().all(|&d| f64::from(d) >= lo.round() && f64::from(d) <= v.round()));
            let mean = draws.iter().map(|&d| f64::from(d)).sum::<f64>() / draws.len() as f64;
            let spread = v - lo;
            prop_assert!((mean - t.mean()).abs() <= 0.5 + 0.03 * spread, "mean {mean} vs {}", t.mean());
        }
    }
}
