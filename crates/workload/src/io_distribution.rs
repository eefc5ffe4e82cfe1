//! inference-perf's `IODistribution`: the prompt and output length
//! distributions of its `random` and `synthetic` data generators
//! (`inference_perf/utils/distribution.py`, `generate_distribution`).
//!
//! inference-perf draws `total_count` lengths once (normal by default,
//! optionally lognormal, uniform or fixed), clips them to `[min, max]`,
//! rounds, clips again, and request n uses entry `n mod total_count`. Its
//! draws come from an unseeded numpy generator, so BLIS reproduces the
//! distribution, not the exact numbers: same shape, seeded.

use rand_distr::{Distribution as _, LogNormal, Normal, Uniform};
use serde::Deserialize;

use blis_engine::rng::SimRng;

/// Largest `total_count` BLIS draws, to bound memory on absurd input.
pub const MAX_TOTAL_COUNT: u32 = 10_000_000;

/// The shape lengths are drawn from (`type` in newer inference-perf; normal before).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LengthShape {
    /// Normal(mean, std_dev), clipped to [min, max].
    #[default]
    Normal,
    /// A lognormal with the requested mean and std_dev above `min`, clipped.
    Lognormal,
    /// Uniform on [min, max].
    Uniform,
    /// Always ⌊mean⌋.
    Fixed,
}

/// One length distribution (`data.input_distribution` or
/// `data.output_distribution`), with inference-perf's defaults.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default)]
pub struct LengthDistribution {
    /// Smallest length.
    pub min: u32,
    /// Largest length.
    pub max: u32,
    /// Target mean.
    pub mean: f64,
    /// Target standard deviation.
    pub std_dev: f64,
    /// How many lengths are drawn (then cycled).
    pub total_count: u32,
    /// Shape.
    #[serde(rename = "type")]
    pub shape: LengthShape,
}

impl Default for LengthDistribution {
    fn default() -> Self {
        LengthDistribution { min: 10, max: 1024, mean: 512.0, std_dev: 200.0, total_count: 1000, shape: LengthShape::Normal }
    }
}

impl LengthDistribution {
    /// The problem with this distribution, as inference-perf would refuse it
    /// (plus a bound on `total_count`); `None` when it can be drawn from.
    pub fn problem(&self) -> Option<(&'static str, String, &'static str)> {
        if self.min > self.max {
            return Some(("min", self.min.to_string(), "must not exceed max"));
        }
        if !(1..=MAX_TOTAL_COUNT).contains(&self.total_count) {
            return Some(("total_count", self.total_count.to_string(), "must be between 1 and 10^7"));
        }
        if !(self.std_dev.is_finite() && self.std_dev >= 0.0) {
            return Some(("std_dev", self.std_dev.to_string(), "must be a finite number ≥ 0"));
        }
        if !self.mean.is_finite() {
            return Some(("mean", self.mean.to_string(), "must be a finite number"));
        }
        if self.shape == LengthShape::Normal && !(f64::from(self.min) <= self.mean && self.mean <= f64::from(self.max)) {
            return Some(("mean", self.mean.to_string(), "must lie within [min, max] for a normal distribution"));
        }
        None
    }

    /// Draws the `total_count` lengths. Assumes [`LengthDistribution::problem`] is `None`.
    pub fn draw(&self, rng: &mut SimRng) -> Vec<u32> {
        let (lo, hi) = (f64::from(self.min), f64::from(self.max));
        let n = self.total_count as usize;
        let raw: Vec<f64> = match self.shape {
            LengthShape::Fixed => vec![self.mean.floor(); n],
            LengthShape::Uniform => match Uniform::new_inclusive(lo, hi) {
                Ok(u) => (0..n).map(|_| u.sample(rng)).collect(),
                Err(_) => vec![lo; n],
            },
            LengthShape::Normal => match Normal::new(self.mean, self.std_dev) {
                Ok(d) => (0..n).map(|_| d.sample(rng)).collect(),
                Err(_) => vec![self.mean; n],
            },
            LengthShape::Lognormal => {
                // Parameterise the underlying normal so the lognormal above `min` has the requested moments.
                let shifted_mean = if self.mean - lo > 0.0 { self.mean - lo } else { 1.0 };
                let sigma2 = (1.0 + (self.std_dev / shifted_mean).powi(2)).ln();
                let mu = shifted_mean.ln() - sigma2 / 2.0;
                match LogNormal::new(mu, sigma2.sqrt()) {
                    Ok(d) => (0..n).map(|_| d.sample(rng) + lo).collect(),
                    Err(_) => vec![self.mean; n],
                }
            }
        };
        raw.into_iter().map(|x| x.clamp(lo, hi).round().clamp(lo, hi) as u32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::rng::subsystem_rng;
    use proptest::prelude::*;

    fn dist(shape: LengthShape, min: u32, max: u32, mean: f64, std_dev: f64) -> LengthDistribution {
        LengthDistribution { min, max, mean, std_dev, total_count: 20_000, shape }
    }

    fn moments(v: &[u32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    #[test]
    fn wide_bounds_keep_the_requested_moments() {
        let mut rng = subsystem_rng(3, "t");
        for shape in [LengthShape::Normal, LengthShape::Lognormal] {
            let (m, s) = moments(&dist(shape, 0, 100_000, 1000.0, 200.0).draw(&mut rng));
            assert!((m / 1000.0 - 1.0).abs() < 0.01 && (s / 200.0 - 1.0).abs() < 0.03, "{shape:?}: {m} ± {s}");
        }
        // Uniform on [100, 300]: mean 200, sd 200/√12.
        let (m, s) = moments(&dist(LengthShape::Uniform, 100, 300, 0.0, 0.0).draw(&mut rng));
        assert!((m - 200.0).abs() < 1.5 && (s - 200.0 / 12f64.sqrt()).abs() < 1.5, "{m} ± {s}");
        assert_eq!(dist(LengthShape::Fixed, 1, 10, 7.9, 3.0).draw(&mut rng), vec![7; 20_000]);
    }

    #[test]
    fn inference_perfs_defaults_and_refusals() {
        let d: LengthDistribution = serde_yaml_ng::from_str("mean: 100\nstd_dev: 0\n").unwrap();
        assert_eq!((d.min, d.max, d.total_count, d.shape), (10, 1024, 1000, LengthShape::Normal));
        assert_eq!(d.problem(), None);
        assert_eq!(dist(LengthShape::Normal, 10, 20, 30.0, 1.0).problem().unwrap().0, "mean");
        assert_eq!(dist(LengthShape::Lognormal, 10, 20, 30.0, 1.0).problem(), None, "only a normal needs its mean in range");
        assert_eq!(dist(LengthShape::Normal, 30, 20, 25.0, 1.0).problem().unwrap().0, "min");
        assert_eq!(dist(LengthShape::Normal, 10, 20, 15.0, f64::NAN).problem().unwrap().0, "std_dev");
        assert_eq!(LengthDistribution { total_count: 0, ..LengthDistribution::default() }.problem().unwrap().0, "total_count");
    }

    proptest! {
        #[test]
        fn every_length_lies_within_its_bounds(
            min in 0u32..2000, span in 0u32..2000, mean in -5000.0f64..5000.0, std_dev in 0.0f64..3000.0, shape_i in 0usize..4, seed: u64,
        ) {
            let shape = [LengthShape::Normal, LengthShape::Lognormal, LengthShape::Uniform, LengthShape::Fixed][shape_i];
            let d = LengthDistribution { min, max: min + span, mean, std_dev, total_count: 200, shape };
            prop_assume!(d.problem().is_none());
            let v = d.draw(&mut subsystem_rng(seed, "t"));
            prop_assert_eq!(v.len(), 200);
            prop_assert!(v.iter().all(|&x| (min..=min + span).contains(&x)));
        }
    }
}
