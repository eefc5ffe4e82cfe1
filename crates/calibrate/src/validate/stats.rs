//! The statistics of a comparison: absolute percentage error, mean, median,
//! Pearson correlation.

/// |predicted − actual| / |actual| × 100, or `None` when actual is 0 (or
/// either value is not finite).
pub fn ape(predicted: f64, actual: f64) -> Option<f64> {
    (actual != 0.0 && actual.is_finite() && predicted.is_finite()).then(|| (predicted - actual).abs() / actual.abs() * 100.0)
}

/// Arithmetic mean; NaN for an empty slice.
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Median (mean of the two middle values for an even count); NaN for an empty slice.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 { s[m] } else { (s[m - 1] + s[m]) / 2.0 }
}

/// Pearson correlation of paired samples; `None` with fewer than two pairs
/// or when either side is constant.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len().min(y.len());
    if n < 2 {
        return None;
    }
    let (mx, my) = (mean(&x[..n]), mean(&y[..n]));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x[..n].iter().zip(&y[..n]) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reference_values() {
        assert_eq!(ape(110.0, 100.0), Some(10.0));
        assert_eq!(ape(90.0, 100.0), Some(10.0));
        assert_eq!(ape(1.0, 0.0), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        // Deviations (−1.5, −0.5, 0.5, 1.5) and (−3, −1, 0, 4): Sxy = 11, Sxx = 5, Syy = 26, r = 11/√130.
        assert!((pearson(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 5.0, 9.0]).unwrap() - 11.0 / 130f64.sqrt()).abs() < 1e-12);
        assert_eq!(pearson(&[1.0, 1.0], &[2.0, 3.0]), None);
    }

    proptest! {
        #[test]
        fn pearson_is_bounded_and_invariant_to_affine_maps(
            xs in prop::collection::vec(-1e3f64..1e3, 3..50), a in 0.1f64..10.0, b in -100f64..100.0
        ) {
            let ys: Vec<f64> = xs.iter().enumerate().map(|(i, x)| x * x + i as f64).collect();
            if let Some(r) = pearson(&xs, &ys) {
                prop_assert!((-1.0 - 1e-9..=1.0 + 1e-9).contains(&r));
                let xs2: Vec<f64> = xs.iter().map(|x| a * x + b).collect();
                let r2 = pearson(&xs2, &ys).unwrap();
                prop_assert!((r - r2).abs() < 1e-6);
            }
            let self_r = pearson(&xs, &xs);
            prop_assert!(self_r.is_none_or(|r| (r - 1.0).abs() < 1e-9));
        }
    }
}
