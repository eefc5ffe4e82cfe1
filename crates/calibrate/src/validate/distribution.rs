//! Distribution-level comparison statistics for `blis calibrate`: the
//! two-sample Kolmogorov–Smirnov test, quantile–quantile data, percentile
//! errors, and seeded bootstrap confidence intervals.

use blis_engine::metrics::percentile_sorted;
use blis_engine::rng::{SimRng, subsystem_rng};
use rand::RngExt;

use crate::validate::stats::{ape, mean, pearson};

/// Sorted copy of finite values.
pub fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    s
}

/// Result of a two-sample Kolmogorov–Smirnov test.
#[derive(Copy, Clone, Debug, PartialEq, serde::Serialize)]
pub struct KsTest {
    /// D: the largest distance between the two empirical CDFs.
    pub statistic: f64,
    /// Asymptotic p-value of D under "same distribution".
    pub p_value: f64,
}

/// The Kolmogorov distribution's survival function,
/// `Q(λ) = 2 Σ_{j≥1} (−1)^{j−1} exp(−2 j² λ²)` (1 for λ near 0).
pub fn kolmogorov_q(lambda: f64) -> f64 {
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    for j in 1..=100 {
        let j = f64::from(j);
        let term = (-2.0 * j * j * lambda * lambda).exp();
        sum += if j as u32 % 2 == 1 { term } else { -term };
        if term < 1e-16 {
            break;
        }
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

/// Two-sample KS test of `a` and `b` (any order). The p-value uses the
/// asymptotic distribution with Stephens' small-sample correction
/// `λ = (√n + 0.12 + 0.11/√n)·D`, `n = n_a·n_b/(n_a + n_b)` (Numerical
/// Recipes §14.3). `None` when either sample is empty.
pub fn ks_two_sample(a: &[f64], b: &[f64]) -> Option<KsTest> {
    let (a, b) = (sorted(a), sorted(b));
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (mut i, mut j, mut d) = (0usize, 0usize, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / na - j as f64 / nb).abs());
    }
    let n = (na * nb / (na + nb)).sqrt();
    Some(KsTest { statistic: d, p_value: kolmogorov_q((n + 0.12 + 0.11 / n) * d) })
}

/// Quantile pairs (real, simulated) at `points` evenly spaced probabilities
/// `(i + 0.5) / points`: points on the diagonal mean matching distributions.
pub fn qq(real: &[f64], sim: &[f64], points: usize) -> Vec<(f64, f64)> {
    let (r, s) = (sorted(real), sorted(sim));
    if r.is_empty() || s.is_empty() {
        return Vec::new();
    }
    (0..points)
        .map(|i| {
            let p = (i as f64 + 0.5) / points as f64 * 100.0;
            (percentile_sorted(&r, p), percentile_sorted(&s, p))
        })
        .collect()
}

/// A 95 % confidence interval.
#[derive(Copy, Clone, Debug, PartialEq, serde::Serialize)]
pub struct Interval {
    /// 2.5th percentile of the bootstrap distribution.
    pub low: f64,
    /// 97.5th percentile.
    pub high: f64,
}

/// Percentile-bootstrap 95 % intervals of MAPE (%) and Pearson r over
/// paired samples (`real[i]` with `sim[i]`): `resamples` resamples with
/// replacement drawn from the seeded stream `calibrate/bootstrap/<label>`.
pub fn bootstrap_mape_pearson(real: &[f64], sim: &[f64], resamples: usize, seed: u64, label: &str) -> (Option<Interval>, Option<Interval>) {
    let n = real.len().min(sim.len());
    if n < 2 || resamples == 0 {
        return (None, None);
    }
    let mut rng: SimRng = subsystem_rng(seed, &format!("calibrate/bootstrap/{label}"));
    let (mut mapes, mut rs) = (Vec::with_capacity(resamples), Vec::with_capacity(resamples));
    let (mut rr, mut ss) = (vec![0.0; n], vec![0.0; n]);
    for _ in 0..resamples {
        for k in 0..n {
            let i = rng.random_range(0..n);
            rr[k] = real[i];
            ss[k] = sim[i];
        }
        let errors: Vec<f64> = rr.iter().zip(&ss).filter_map(|(r, s)| ape(*s, *r)).collect();
        if !errors.is_empty() {
            mapes.push(mean(&errors));
        }
        if let Some(r) = pearson(&rr, &ss) {
            rs.push(r);
        }
    }
    let interval = |v: Vec<f64>| {
        let v = sorted(&v);
        (!v.is_empty()).then(|| Interval { low: percentile_sorted(&v, 2.5), high: percentile_sorted(&v, 97.5) })
    };
    (interval(mapes), interval(rs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kolmogorov_distribution_matches_the_classical_table() {
        // Critical values of the Kolmogorov distribution: P(K > λ) = α.
        for (lambda, alpha) in [(1.2238, 0.10), (1.3581, 0.05), (1.4802, 0.025), (1.6276, 0.01), (1.9495, 0.001)] {
            let q = kolmogorov_q(lambda);
            assert!((q - alpha).abs() < 2e-4, "Q({lambda}) = {q}, table {alpha}");
        }
        assert_eq!(kolmogorov_q(0.0), 1.0);
        assert!(kolmogorov_q(5.0) < 1e-20);
    }

    fn brute_d(a: &[f64], b: &[f64]) -> f64 {
        let cdf = |v: &[f64], x: f64| v.iter().filter(|&&y| y <= x).count() as f64 / v.len() as f64;
        a.iter().chain(b).map(|&x| (cdf(a, x) - cdf(b, x)).abs()).fold(0.0, f64::max)
    }

    proptest! {
        #[test]
        fn ks_statistic_equals_brute_force(a in prop::collection::vec(0u16..50, 1..60), b in prop::collection::vec(0u16..50, 1..60)) {
            let a: Vec<f64> = a.into_iter().map(f64::from).collect();
            let b: Vec<f64> = b.into_iter().map(f64::from).collect();
            let t = ks_two_sample(&a, &b).unwrap();
            prop_assert!((t.statistic - brute_d(&a, &b)).abs() < 1e-12);
            prop_assert!((0.0..=1.0).contains(&t.p_value));
        }
    }

    proptest! {
        /// Pearson r equals the textbook one-pass formula
        /// (n·Σxy − Σx·Σy) / √((n·Σx² − (Σx)²)(n·Σy² − (Σy)²)).
        #[test]
        fn pearson_equals_brute_force(pairs in prop::collection::vec((-1000i32..1000, -1000i32..1000), 3..80)) {
            let x: Vec<f64> = pairs.iter().map(|p| f64::from(p.0)).collect();
            let y: Vec<f64> = pairs.iter().map(|p| f64::from(p.1)).collect();
            let n = x.len() as f64;
            let (sx, sy) = (x.iter().sum::<f64>(), y.iter().sum::<f64>());
            let sxy: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            let (sxx, syy) = (x.iter().map(|a| a * a).sum::<f64>(), y.iter().map(|b| b * b).sum::<f64>());
            let den = ((n * sxx - sx * sx) * (n * syy - sy * sy)).sqrt();
            match pearson(&x, &y) {
                Some(r) => prop_assert!((r - (n * sxy - sx * sy) / den).abs() < 1e-9),
                None => prop_assert!(den == 0.0),
            }
        }
    }

    #[test]
    fn identical_samples_do_not_reject_and_shifted_ones_do() {
        let a: Vec<f64> = (0..500).map(f64::from).collect();
        let same = ks_two_sample(&a, &a).unwrap();
        assert_eq!(same.statistic, 0.0);
        assert_eq!(same.p_value, 1.0);
        let shifted: Vec<f64> = a.iter().map(|x| x + 100.0).collect();
        let t = ks_two_sample(&a, &shifted).unwrap();
        assert!((t.statistic - 0.2).abs() < 1e-12);
        assert!(t.p_value < 1e-6);
    }

    #[test]
    fn qq_of_equal_samples_lies_on_the_diagonal() {
        let a: Vec<f64> = (0..101).map(f64::from).collect();
        let q = qq(&a, &a, 100);
        assert_eq!(q.len(), 100);
        assert!(q.iter().all(|(r, s)| r == s));
        assert_eq!(q[0].0, 0.5); // p = 0.5 % of 0..=100
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_point_estimate() {
        let real: Vec<f64> = (1..=200).map(f64::from).collect();
        let sim: Vec<f64> = real.iter().enumerate().map(|(i, r)| r * if i % 2 == 0 { 1.1 } else { 0.95 }).collect();
        let (m1, r1) = bootstrap_mape_pearson(&real, &sim, 1000, 7, "e2e");
        let (m2, r2) = bootstrap_mape_pearson(&real, &sim, 1000, 7, "e2e");
        assert_eq!((m1, r1), (m2, r2));
        let m = m1.unwrap();
        assert!(m.low < 7.5 && 7.5 < m.high, "{m:?}"); // point MAPE = (10 + 5) / 2
        assert!(r1.unwrap().high <= 1.0);
    }
}
