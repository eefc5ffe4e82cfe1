//! Small, deterministic numerical solvers for fitting: non-negative least
//! squares (Lawson–Hanson), ridge regression, and Nelder–Mead. Problems here
//! have at most a few dozen unknowns, so dense normal equations suffice.

/// Solves the symmetric positive-definite system `m·x = b` (row-major n×n)
/// by Cholesky decomposition; `None` if `m` is not positive definite.
pub fn solve_spd(m: &[f64], b: &[f64]) -> Option<Vec<f64>> {
    let n = b.len();
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut sum = m[i * n + j];
            for k in 0..j {
                sum -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if sum <= 0.0 || !sum.is_finite() {
                    return None;
                }
                l[i * n + i] = sum.sqrt();
            } else {
                l[i * n + j] = sum / l[j * n + j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        y[i] = (b[i] - (0..i).map(|k| l[i * n + k] * y[k]).sum::<f64>()) / l[i * n + i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        x[i] = (y[i] - (i + 1..n).map(|k| l[k * n + i] * x[k]).sum::<f64>()) / l[i * n + i];
    }
    Some(x)
}

/// A least-squares problem `min ||A·x − b||²` held as its normal equations,
/// with columns scaled to unit norm (so tolerances and penalties do not
/// depend on feature units).
#[derive(Clone, Debug)]
pub struct LeastSquares {
    n: usize,
    /// AᵀA of the scaled columns, row-major.
    ata: Vec<f64>,
    /// Aᵀb of the scaled columns.
    atb: Vec<f64>,
    /// Column norms (1 for all-zero columns).
    scale: Vec<f64>,
}

impl LeastSquares {
    /// Builds the problem from rows `(a_i, b_i)`.
    pub fn new(rows: &[(Vec<f64>, f64)], n: usize) -> LeastSquares {
        let mut scale = vec![0.0; n];
        for (a, _) in rows {
            for j in 0..n {
                scale[j] += a[j] * a[j];
            }
        }
        let scale: Vec<f64> = scale.iter().map(|s| if *s > 0.0 { s.sqrt() } else { 1.0 }).collect();
        let mut ata = vec![0.0; n * n];
        let mut atb = vec![0.0; n];
        for (a, b) in rows {
            for i in 0..n {
                let ai = a[i] / scale[i];
                atb[i] += ai * b;
                for j in 0..n {
                    ata[i * n + j] += ai * a[j] / scale[j];
                }
            }
        }
        LeastSquares { n, ata, atb, scale }
    }

    fn unscale(&self, x: &[f64]) -> Vec<f64> {
        x.iter().zip(&self.scale).map(|(v, s)| v / s).collect()
    }

    /// Least squares over the columns in `set` (others fixed at 0), scaled space.
    fn solve_subset(&self, set: &[usize]) -> Vec<f64> {
        let k = set.len();
        let mut m = vec![0.0; k * k];
        let mut b = vec![0.0; k];
        for (r, &i) in set.iter().enumerate() {
            b[r] = self.atb[i];
            for (c, &j) in set.iter().enumerate() {
                m[r * k + c] = self.ata[i * self.n + j] + if r == c { 1e-12 } else { 0.0 };
            }
        }
        let sol = solve_spd(&m, &b).unwrap_or_else(|| vec![0.0; k]);
        let mut x = vec![0.0; self.n];
        for (r, &i) in set.iter().enumerate() {
            x[i] = sol[r];
        }
        x
    }

    /// Non-negative least squares (Lawson–Hanson active set).
    pub fn nnls(&self) -> Vec<f64> {
        let n = self.n;
        let tol = 1e-10;
        let mut x = vec![0.0; n];
        let mut passive = vec![false; n];
        for _ in 0..3 * n + 3 {
            let w: Vec<f64> = (0..n).map(|i| self.atb[i] - (0..n).map(|j| self.ata[i * n + j] * x[j]).sum::<f64>()).collect();
            let Some(t) = (0..n).filter(|&i| !passive[i] && w[i] > tol).max_by(|&a, &b| w[a].total_cmp(&w[b])) else { break };
            passive[t] = true;
            for _ in 0..3 * n + 3 {
                let set: Vec<usize> = (0..n).filter(|&i| passive[i]).collect();
                let s = self.solve_subset(&set);
                if set.iter().all(|&i| s[i] > tol) {
                    x = s;
                    break;
                }
                let step = set.iter().filter(|&&i| s[i] <= tol).map(|&i| x[i] / (x[i] - s[i])).fold(f64::INFINITY, f64::min);
                for i in 0..n {
                    x[i] += step * (s[i] - x[i]);
                    if passive[i] && x[i] <= tol {
                        passive[i] = false;
                        x[i] = 0.0;
                    }
                }
            }
        }
        self.unscale(&x)
    }

    /// Ridge regression with penalty `lambda` on the scaled coefficients.
    pub fn ridge(&self, lambda: f64) -> Vec<f64> {
        let n = self.n;
        let mut m = self.ata.clone();
        for i in 0..n {
            m[i * n + i] += lambda.max(1e-12);
        }
        self.unscale(&solve_spd(&m, &self.atb).unwrap_or_else(|| vec![0.0; n]))
    }
}

/// Minimises `f` by Nelder–Mead from `start` with initial steps `steps`,
/// stopping after `max_evals` evaluations. Returns the best point and value.
/// Deterministic: the same inputs give the same sequence of evaluations.
pub fn nelder_mead(f: &mut dyn FnMut(&[f64]) -> f64, start: &[f64], steps: &[f64], max_evals: usize) -> (Vec<f64>, f64) {
    let n = start.len();
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    let mut evals = 0;
    let mut eval = |x: &[f64], evals: &mut usize| {
        *evals += 1;
        f(x)
    };
    let f0 = eval(start, &mut evals);
    simplex.push((start.to_vec(), f0));
    for i in 0..n {
        let mut x = start.to_vec();
        x[i] += steps[i];
        let fx = eval(&x, &mut evals);
        simplex.push((x, fx));
    }
    while evals < max_evals {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let worst = simplex[n].clone();
        let centroid: Vec<f64> = (0..n).map(|j| simplex[..n].iter().map(|p| p.0[j]).sum::<f64>() / n as f64).collect();
        let along = |t: f64| -> Vec<f64> { (0..n).map(|j| centroid[j] + t * (worst.0[j] - centroid[j])).collect() };
        let reflected = along(-1.0);
        let fr = eval(&reflected, &mut evals);
        if fr < simplex[0].1 {
            let expanded = along(-2.0);
            let fe = eval(&expanded, &mut evals);
            simplex[n] = if fe < fr { (expanded, fe) } else { (reflected, fr) };
        } else if fr < simplex[n - 1].1 {
            simplex[n] = (reflected, fr);
        } else {
            let contracted = if fr < worst.1 { along(-0.5) } else { along(0.5) };
            let fc = eval(&contracted, &mut evals);
            if fc < worst.1.min(fr) {
                simplex[n] = (contracted, fc);
            } else {
                let best = simplex[0].0.clone();
                for p in simplex.iter_mut().skip(1) {
                    p.0 = (0..n).map(|j| best[j] + 0.5 * (p.0[j] - best[j])).collect();
                    p.1 = eval(&p.0, &mut evals);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex.swap_remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nnls_matches_a_hand_solved_problem() {
        // b = 2·a0 − 1·a1 exactly; NNLS must clamp the second coefficient at
        // 0 and refit the first: min (x·[1,1,1] − [1,2,3])² → x = 2.
        let rows = vec![(vec![1.0, 1.0], 1.0), (vec![1.0, 0.0], 2.0), (vec![1.0, -1.0], 3.0)];
        let x = LeastSquares::new(&rows, 2).nnls();
        assert!((x[0] - 2.0).abs() < 1e-9 && x[1] == 0.0, "{x:?}");
        // Unconstrained answer when it is non-negative.
        let rows = vec![(vec![1.0, 0.0], 3.0), (vec![0.0, 2.0], 4.0), (vec![1.0, 1.0], 5.0)];
        let x = LeastSquares::new(&rows, 2).nnls();
        assert!((x[0] - 3.0).abs() < 1e-9 && (x[1] - 2.0).abs() < 1e-9, "{x:?}");
    }

    #[test]
    fn ridge_shrinks_towards_zero() {
        let rows = vec![(vec![1.0], 2.0), (vec![1.0], 2.0)];
        let ls = LeastSquares::new(&rows, 1);
        assert!((ls.ridge(1e-12)[0] - 2.0).abs() < 1e-9);
        // Scaled column (1/√2, 1/√2): x_s = 2√2 / (1 + λ), x = x_s/√2 = 2/(1 + λ); λ = 1 halves it.
        assert!((ls.ridge(1.0)[0] - 1.0).abs() < 1e-9);
    }

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let mut f = |x: &[f64]| (x[0] - 3.0).powi(2) + 10.0 * (x[1] + 1.0).powi(2);
        let (x, v) = nelder_mead(&mut f, &[0.0, 0.0], &[1.0, 1.0], 400);
        assert!((x[0] - 3.0).abs() < 1e-3 && (x[1] + 1.0).abs() < 1e-3 && v < 1e-6, "{x:?} {v}");
    }

    proptest! {
        #[test]
        fn nnls_is_nonnegative_and_no_worse_than_zero(
            rows in prop::collection::vec((prop::collection::vec(-10f64..10.0, 3), -10f64..10.0), 4..30)
        ) {
            let ls = LeastSquares::new(&rows, 3);
            let x = ls.nnls();
            prop_assert!(x.iter().all(|v| *v >= 0.0));
            let cost = |x: &[f64]| rows.iter().map(|(a, b)| (a.iter().zip(x).map(|(a, x)| a * x).sum::<f64>() - b).powi(2)).sum::<f64>();
            prop_assert!(cost(&x) <= cost(&[0.0; 3]) + 1e-9);
            // Each single coordinate perturbation (staying feasible) does not improve the cost.
            for i in 0..3 {
                for d in [1e-3, -1e-3] {
                    let mut y = x.clone();
                    y[i] = (y[i] + d).max(0.0);
                    prop_assert!(cost(&y) >= cost(&x) - 1e-6 * cost(&x).max(1.0));
                }
            }
        }
    }
}
