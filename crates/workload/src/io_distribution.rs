//! inference-perf's length distributions: the prompt and output lengths of
//! its `random` and `synthetic` data generators (`data.input_distribution`,
//! `data.output_distribution`, drawn by `generate_distribution`), and the
//! shared-prefix lengths newer versions accept as a distribution
//! (`system_prompt_len`, `question_len`, `output_len`, drawn by
//! `sample_from_distribution`); both live in
//! `inference_perf/utils/numeric/distribution/utils.py`.
//!
//! Both draw a number of values (normal by default; lognormal, uniform,
//! fixed, and for shared-prefix lengths also skew-normal and Poisson), clip
//! them to `[min, max]`, round, and clip again. Their draws come from numpy
//! generators, so BLIS reproduces the distribution, not the exact numbers:
//! same shape, seeded.

use rand_distr::{Distribution as _, LogNormal, Normal, Poisson, StandardNormal, Uniform};
use serde::Deserialize;

use blis_engine::rng::SimRng;

/// Largest `total_count` BLIS draws, to bound memory on absurd input.
pub const MAX_TOTAL_COUNT: u32 = 10_000_000;

/// The shape lengths are drawn from (`type` in newer inference-perf; normal before).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthShape {
    /// Normal(mean, std_dev).
    #[default]
    Normal,
    /// Azzalini's skew normal: `mean + std_dev·(δ·|N₁| + √(1−δ²)·N₂)` with
    /// `δ = skew / √(1 + skew²)` (`mean` is the location, not the mean).
    /// Shared-prefix lengths only.
    SkewNormal,
    /// A lognormal with the requested mean and std_dev (see [`Sampler`]).
    Lognormal,
    /// Uniform between `min` and `max` (see [`Sampler`]).
    Uniform,
    /// Poisson(mean), or Poisson(1) for a mean ≤ 0. Shared-prefix lengths only.
    Poisson,
    /// Always ⌊mean⌋, not clipped to `[min, max]`.
    Fixed,
}

/// Which of inference-perf's two samplers draws a distribution; they
/// differ in the shapes they know and in how they parameterise two of them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Sampler {
    /// `generate_distribution`, for `random` and `synthetic` data: normal,
    /// lognormal, uniform or fixed; a normal's mean must lie within
    /// `[min, max]`; the lognormal has the requested moments above `min`;
    /// the uniform draws from `[min, max]`.
    IoDistribution,
    /// `sample_from_distribution`, for shared-prefix lengths: every shape;
    /// the lognormal has the requested moments itself (its mean must be
    /// positive); the uniform draws from `[min, max + 1)`, so `max` is as
    /// likely as any other length.
    SharedPrefix,
}

/// One length distribution, with inference-perf's defaults. An unknown key
/// is refused rather than ignored, so a misspelt one cannot silently leave
/// a default in place.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LengthDistribution {
    /// Smallest length.
    pub min: u32,
    /// Largest length.
    pub max: u32,
    /// Target mean (the location of a skew normal).
    pub mean: f64,
    /// Target standard deviation (the scale of a skew normal).
    pub std_dev: f64,
    /// Target variance, instead of `std_dev` (which must then be 0).
    pub variance: Option<f64>,
    /// Skewness parameter of a skew normal.
    pub skew: f64,
    /// How many lengths `random` and `synthetic` data draw (then cycle);
    /// not read for shared-prefix lengths. Unset (null, inference-perf's
    /// default since late 2025), a run's largest stage's requests plus one.
    pub total_count: Option<u32>,
    /// Shape.
    #[serde(rename = "type")]
    pub shape: LengthShape,
}

impl Default for LengthDistribution {
    fn default() -> Self {
        LengthDistribution {
            min: 10,
            max: 1024,
            mean: 512.0,
            std_dev: 200.0,
            variance: None,
            skew: 0.0,
            total_count: None,
            shape: LengthShape::Normal,
        }
    }
}

impl LengthDistribution {
    /// A distribution that always gives `n`.
    pub fn fixed(n: u32) -> LengthDistribution {
        LengthDistribution { min: n, max: n, mean: f64::from(n), std_dev: 0.0, shape: LengthShape::Fixed, ..LengthDistribution::default() }
    }

    /// The standard deviation in effect: √variance when a variance is given.
    fn spread(&self) -> f64 {
        self.variance.map_or(self.std_dev, f64::sqrt)
    }

    /// The problem with this distribution, as inference-perf would refuse it
    /// when `sampler` draws it (plus a bound on `total_count`), as
    /// (sub-field, value, reason); `None` when it can be drawn from.
    pub fn problem(&self, sampler: Sampler) -> Option<(&'static str, String, &'static str)> {
        if !(self.std_dev.is_finite() && self.std_dev >= 0.0) {
            return Some(("std_dev", self.std_dev.to_string(), "must be a finite number ≥ 0"));
        }
        if self.min > self.max {
            return Some(("min", self.min.to_string(), "must not exceed max"));
        }
        if let Some(v) = self.variance {
            if !(v.is_finite() && v >= 0.0) {
                return Some(("variance", v.to_string(), "must be a finite number ≥ 0"));
            }
            if self.std_dev > 0.0 {
                return Some((
                    "variance",
                    v.to_string(),
                    "give either std_dev or variance, not both (std_dev defaults to 200: set it to 0)",
                ));
            }
        }
        if !self.mean.is_finite() {
            return Some(("mean", self.mean.to_string(), "must be a finite number"));
        }
        if !self.skew.is_finite() {
            return Some(("skew", self.skew.to_string(), "must be a finite number"));
        }
        match sampler {
            Sampler::IoDistribution => {
                if !(1..=MAX_TOTAL_COUNT).contains(&self.total_count.unwrap_or(0)) {
                    let value = self.total_count.map_or("null".into(), |n| n.to_string());
                    return Some(("total_count", value, "must be between 1 and 10^7"));
                }
                if matches!(self.shape, LengthShape::SkewNormal | LengthShape::Poisson) {
                    return Some((
                        "type",
                        format!("{:?}", self.shape),
                        "random and synthetic data draw normal, lognormal, uniform or fixed lengths",
                    ));
                }
                if self.shape == LengthShape::Normal && !(f64::from(self.min) <= self.mean && self.mean <= f64::from(self.max)) {
                    return Some(("mean", self.mean.to_string(), "must lie within [min, max] for a normal distribution"));
                }
            }
            Sampler::SharedPrefix => {
                if self.shape == LengthShape::Lognormal && self.mean <= 0.0 {
                    return Some(("mean", self.mean.to_string(), "must be positive for a lognormal distribution"));
                }
            }
        }
        None
    }

    /// The largest length a draw can give.
    pub fn upper_bound(&self) -> u64 {
        match self.shape {
            LengthShape::Fixed => self.mean.floor().clamp(0.0, f64::from(u32::MAX)) as u64,
            _ => u64::from(self.max),
        }
    }

    /// Draws `count` lengths with `sampler`. Assumes [`LengthDistribution::problem`] is `None`.
    pub fn draw(&self, sampler: Sampler, count: usize, rng: &mut SimRng) -> Vec<u32> {
        let (lo, hi) = (f64::from(self.min), f64::from(self.max));
        let (mean, sd) = (self.mean, self.spread());
        let repeat = |x: f64| vec![x; count];
        let raw: Vec<f64> = match self.shape {
            LengthShape::Fixed => return vec![self.upper_bound() as u32; count],
            LengthShape::Uniform => {
                let uniform = match sampler {
                    Sampler::IoDistribution => Uniform::new_inclusive(lo, hi),
                    Sampler::SharedPrefix => Uniform::new(lo, hi + 1.0),
                };
                match uniform {
                    Ok(u) => (0..count).map(|_| u.sample(rng)).collect(),
                    Err(_) => repeat(lo),
                }
            }
            LengthShape::Normal => match Normal::new(mean, sd) {
                Ok(d) if sd > 0.0 => (0..count).map(|_| d.sample(rng)).collect(),
                _ => repeat(mean),
            },
            LengthShape::SkewNormal if sd > 0.0 => {
                let delta = self.skew / (1.0 + self.skew * self.skew).sqrt();
                let tail = (1.0 - delta * delta).sqrt();
                (0..count)
                    .map(|_| {
                        let (n1, n2): (f64, f64) = (StandardNormal.sample(rng), StandardNormal.sample(rng));
                        mean + sd * (delta * n1.abs() + tail * n2)
                    })
                    .collect()
            }
            LengthShape::SkewNormal => repeat(mean),
            LengthShape::Poisson => match Poisson::new(if mean > 0.0 { mean } else { 1.0 }) {
                Ok(d) => (0..count).map(|_| d.sample(rng)).collect(),
                Err(_) => repeat(mean),
            },
            LengthShape::Lognormal => {
                // The underlying normal is parameterised so that the lognormal has the requested moments.
                let (shift, m) = match sampler {
                    Sampler::IoDistribution => (lo, if mean - lo > 0.0 { mean - lo } else { 1.0 }),
                    Sampler::SharedPrefix => (0.0, mean),
                };
                let sigma2 = (1.0 + (sd / m).powi(2)).ln();
                match LogNormal::new(m.ln() - sigma2 / 2.0, sigma2.sqrt()) {
                    Ok(d) if sd > 0.0 => (0..count).map(|_| d.sample(rng) + shift).collect(),
                    _ => repeat(m + shift),
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
        LengthDistribution { min, max, mean, std_dev, shape, total_count: Some(1000), ..LengthDistribution::default() }
    }

    fn moments(v: &[u32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    fn draw(d: &LengthDistribution, sampler: Sampler) -> Vec<u32> {
        d.draw(sampler, 20_000, &mut subsystem_rng(3, "t"))
    }

    #[test]
    fn wide_bounds_keep_the_requested_moments() {
        for sampler in [Sampler::IoDistribution, Sampler::SharedPrefix] {
            for shape in [LengthShape::Normal, LengthShape::Lognormal] {
                let (m, s) = moments(&draw(&dist(shape, 0, 100_000, 1000.0, 200.0), sampler));
                assert!((m / 1000.0 - 1.0).abs() < 0.01 && (s / 200.0 - 1.0).abs() < 0.03, "{shape:?}: {m} ± {s}");
            }
        }
        // Uniform on [100, 300]: mean 200, sd 200/√12; the shared-prefix sampler draws from [100, 301).
        let (m, s) = moments(&draw(&dist(LengthShape::Uniform, 100, 300, 0.0, 0.0), Sampler::IoDistribution));
        assert!((m - 200.0).abs() < 1.5 && (s - 200.0 / 12f64.sqrt()).abs() < 1.5, "{m} ± {s}");
        let (m, _) = moments(&draw(&dist(LengthShape::Uniform, 100, 300, 0.0, 0.0), Sampler::SharedPrefix));
        assert!((m - 200.5).abs() < 1.5, "{m}");
        // Fixed is ⌊mean⌋, outside the bounds too, as inference-perf's int(mean).
        assert_eq!(draw(&dist(LengthShape::Fixed, 1, 10, 7.9, 3.0), Sampler::IoDistribution), vec![7; 20_000]);
        assert_eq!(draw(&dist(LengthShape::Fixed, 10, 1024, 5000.5, 3.0), Sampler::SharedPrefix), vec![5000; 20_000]);
        assert_eq!(LengthDistribution::fixed(42).draw(Sampler::SharedPrefix, 3, &mut subsystem_rng(1, "t")), [42; 3]);
    }

    /// The lognormal of random data has its moments above `min`; that of
    /// shared-prefix lengths has them itself.
    #[test]
    fn the_two_samplers_place_the_lognormal_differently() {
        let d = dist(LengthShape::Lognormal, 500, 100_000, 1000.0, 100.0);
        let (io, _) = moments(&draw(&d, Sampler::IoDistribution));
        let (sp, _) = moments(&draw(&d, Sampler::SharedPrefix));
        assert!((io - 1000.0).abs() < 5.0 && (sp - 1000.0).abs() < 5.0, "{io} {sp}");
        let d = dist(LengthShape::Lognormal, 500, 100_000, 600.0, 100.0);
        let (io, _) = moments(&draw(&d, Sampler::IoDistribution));
        assert!((io - 600.0).abs() < 3.0, "moments above min: {io}");
    }

    /// Skew normal: location ξ, scale ω and shape α have mean
    /// ξ + ω·δ·√(2/π) and variance ω²·(1 − 2δ²/π), δ = α/√(1+α²).
    #[test]
    fn skew_normal_and_poisson_have_their_textbook_moments() {
        let d = LengthDistribution { skew: 2.5, ..dist(LengthShape::SkewNormal, 0, 100_000, 200.0, 80.0) };
        let delta = 2.5 / (1.0f64 + 6.25).sqrt();
        let want_mean = 200.0 + 80.0 * delta * (2.0 / std::f64::consts::PI).sqrt();
        let want_sd = 80.0 * (1.0 - 2.0 * delta * delta / std::f64::consts::PI).sqrt();
        let (m, s) = moments(&draw(&d, Sampler::SharedPrefix));
        assert!((m - want_mean).abs() < 1.5 && (s / want_sd - 1.0).abs() < 0.03, "{m} ± {s}, want {want_mean} ± {want_sd}");
        let (m, s) = moments(&draw(&dist(LengthShape::Poisson, 0, 100_000, 300.0, 0.0), Sampler::SharedPrefix));
        assert!((m - 300.0).abs() < 1.0 && (s - 300f64.sqrt()).abs() < 0.5, "{m} ± {s}");
        // A variance stands in for std_dev.
        let v = LengthDistribution { variance: Some(400.0), ..dist(LengthShape::Normal, 0, 100_000, 1000.0, 0.0) };
        let (_, s) = moments(&draw(&v, Sampler::SharedPrefix));
        assert!((s - 20.0).abs() < 0.5, "{s}");
    }

    #[test]
    fn inference_perfs_defaults_and_refusals() {
        let d: LengthDistribution = blis_data::yaml::from_str("mean: 100\nstd_dev: 0\ntotal_count: 1000\n").unwrap();
        assert_eq!((d.min, d.max, d.total_count, d.shape), (10, 1024, Some(1000), LengthShape::Normal));
        assert_eq!(d.problem(Sampler::IoDistribution), None);
        let unset: LengthDistribution = blis_data::yaml::from_str("mean: 100\n").unwrap();
        assert_eq!(unset.total_count, None, "the run's stages set it (inference_perf::config)");
        let d: LengthDistribution = blis_data::yaml::from_str("type: skew_normal\nskew: 2\ntotal_count: null\n").unwrap();
        assert_eq!((d.shape, d.skew, d.total_count), (LengthShape::SkewNormal, 2.0, None));
        assert_eq!(d.problem(Sampler::SharedPrefix), None);
        assert_eq!(d.problem(Sampler::IoDistribution).unwrap().0, "total_count");
        let io = |d: LengthDistribution| d.problem(Sampler::IoDistribution).map(|p| p.0);
        let sp = |d: LengthDistribution| d.problem(Sampler::SharedPrefix).map(|p| p.0);
        assert_eq!(io(dist(LengthShape::Normal, 10, 20, 30.0, 1.0)), Some("mean"));
        assert_eq!(sp(dist(LengthShape::Normal, 10, 20, 30.0, 1.0)), None, "sample_from_distribution clips a mean outside the bounds");
        assert_eq!(io(dist(LengthShape::Lognormal, 10, 20, 30.0, 1.0)), None, "only a normal needs its mean in range");
        assert_eq!(sp(dist(LengthShape::Lognormal, 10, 20, 0.0, 1.0)), Some("mean"));
        assert_eq!(io(dist(LengthShape::Poisson, 10, 20, 15.0, 1.0)), Some("type"));
        assert_eq!(io(dist(LengthShape::Normal, 30, 20, 25.0, 1.0)), Some("min"));
        assert_eq!(io(dist(LengthShape::Normal, 10, 20, 15.0, f64::NAN)), Some("std_dev"));
        assert_eq!(io(LengthDistribution { total_count: Some(0), ..LengthDistribution::default() }), Some("total_count"));
        // std_dev defaults to 200, so a variance alone is refused, as by inference-perf.
        let v: LengthDistribution = blis_data::yaml::from_str("variance: 100\n").unwrap();
        assert_eq!(sp(v.clone()), Some("variance"));
        assert_eq!(sp(LengthDistribution { std_dev: 0.0, ..v }), None);
        // An impossible variance is named for what it is, even beside the default std_dev.
        let negative: LengthDistribution = blis_data::yaml::from_str("variance: -4\n").unwrap();
        assert_eq!(negative.problem(Sampler::SharedPrefix).map(|p| p.2), Some("must be a finite number ≥ 0"));
        assert_eq!(sp(LengthDistribution { skew: f64::INFINITY, ..LengthDistribution::default() }), Some("skew"));
        let typo = blis_data::yaml::from_str::<LengthDistribution>("std_deviation: 5\n").unwrap_err().to_string();
        assert!(typo.contains("unknown field `std_deviation`") && typo.contains("std_dev"), "{typo}");
    }

    proptest! {
        #[test]
        fn every_drawn_length_lies_within_its_bounds(
            min in 0u32..2000, span in 0u32..2000, mean in -5000.0f64..5000.0, std_dev in 0.0f64..3000.0, skew in -10.0f64..10.0,
            shape_i in 0usize..5, shared_prefix: bool, seed: u64,
        ) {
            let shape = [LengthShape::Normal, LengthShape::SkewNormal, LengthShape::Lognormal, LengthShape::Uniform, LengthShape::Poisson][shape_i];
            let sampler = if shared_prefix { Sampler::SharedPrefix } else { Sampler::IoDistribution };
            let d = LengthDistribution { min, max: min + span, mean, std_dev, skew, shape, total_count: Some(200), ..LengthDistribution::default() };
            prop_assume!(d.problem(sampler).is_none());
            let v = d.draw(sampler, 200, &mut subsystem_rng(seed, "t"));
            prop_assert_eq!(v.len(), 200);
            prop_assert!(v.iter().all(|&x| (min..=min + span).contains(&x)));
            prop_assert!(v.iter().all(|&x| u64::from(x) <= d.upper_bound()));
        }
    }
}
