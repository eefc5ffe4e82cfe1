//! How unevenly expert parallelism loads its ranks.
//!
//! With vLLM's `--enable-expert-parallel` each of R ranks holds N/R whole
//! experts, and a MoE layer ends when its busiest rank does. Tokens pick
//! their k experts uniformly at random (the assumption behind nEff), so a
//! rank's share of a step's work is random and the busiest rank has more
//! than the mean; with tensor parallelism instead every rank computes 1/R of
//! every expert and the load is even. Two quantities matter, each as the
//! busiest rank's over the mean rank's ("skew", ≥ 1, tending to 1 as a
//! step's tokens grow):
//!
//! * **token–expert assignments** (the routed GEMMs' FLOPs): a token's k
//!   experts fall on a rank as a hypergeometric draw; over T tokens a rank's
//!   count has mean T·k/R and variance T·k·(1/R)(1 − 1/R)(N − k)/(N − 1).
//!   The busiest of R is taken as mean + c_R·σ (c_R: the expected maximum
//!   of R standard normals), at most T·min(k, N/R).
//! * **experts touched** (the weights a rank reads): each expert receives a
//!   token with probability p = 1 − ((N − k)/N)^T, so a rank touches a
//!   Binomial(N/R, p) count of its experts; the expected maximum of R of them
//!   is Σ_x (1 − F(x)^R), exact for independent ranks.
//!
//! Small decode batches are where this matters: one Mixtral token at R = 2
//! sends both its experts to one rank 3 times in 7. Against random routing
//! both skews are within 8 % (the test below); real routers are skewed
//! further, so these are lower bounds.

/// The expected maximum of R independent standard normals, by quadrature of
/// ∫ x·R·φ(x)·Φ(x)^(R−1) dx (0 for R = 1).
fn expected_max_of_normals(ranks: u32) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let (lo, hi, steps) = (-9.0f64, 9.0f64, 3600);
    let h = (hi - lo) / f64::from(steps);
    let r = f64::from(ranks);
    (0..=steps)
        .map(|i| {
            let x = lo + f64::from(i) * h;
            let weight = if i == 0 || i == steps { 0.5 } else { 1.0 };
            let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            weight * x * r * density * normal_cdf(x).powf(r - 1.0)
        })
        .sum::<f64>()
        * h
}

/// Φ(x), by Abramowitz and Stegun 7.1.26 (absolute error below 1.5·10⁻⁷).
pub(crate) fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 { 0.5 * (1.0 + erf) } else { 0.5 * (1.0 - erf) }
}

/// Up to this many variance-matched draws a rank's assignment count is a
/// binomial summed exactly (small steps are discrete and skewed); beyond,
/// the normal approximation is within a few percent (the test below).
const EXACT_DRAWS: f64 = 256.0;

/// E[max of R independent Binomial(n, p)] = Σ_{x < n} (1 − F(x)^R), with
/// p < 1; the sum stops where its terms fall below 10⁻¹².
fn expected_max_of_binomials(n: u32, p: f64, ranks: u32) -> f64 {
    let ranks = i32::try_from(ranks).unwrap_or(i32::MAX);
    let (mut pmf, mut cdf, mut busiest) = ((1.0 - p).powi(i32::try_from(n).unwrap_or(i32::MAX)), 0.0, 0.0);
    for x in 0..n {
        cdf += pmf;
        let term = 1.0 - cdf.min(1.0).powi(ranks);
        if term < 1e-12 && f64::from(x) > f64::from(n) * p {
            break;
        }
        busiest += term;
        pmf *= f64::from(n - x) / f64::from(x + 1) * p / (1.0 - p);
    }
    busiest
}

/// The load skew of N experts, k per token, spread over R expert-parallel
/// ranks. Guarantees: both skews are ≥ 1, and exactly 1 at R = 1.
#[derive(Clone, Debug)]
pub(crate) struct ExpertLoad {
    experts: f64,
    k: f64,
    ranks: u32,
    /// Experts per rank (N/R, rounded up: some ranks hold one more when R does not divide N).
    per_rank: u32,
    /// c_R.
    max_normal: f64,
}

impl ExpertLoad {
    /// N experts, k per token, R ranks (N ≥ 2, 1 ≤ k ≤ N, R ≥ 1).
    pub(crate) fn new(experts: f64, k: f64, ranks: u32) -> ExpertLoad {
        let ranks = ranks.max(1);
        ExpertLoad {
            experts,
            k: k.clamp(1.0, experts),
            ranks,
            per_rank: (experts / f64::from(ranks)).ceil() as u32,
            max_normal: expected_max_of_normals(ranks),
        }
    }

    /// Busiest rank's token–expert assignments over the mean, for a step of
    /// `tokens` tokens.
    pub(crate) fn assignment_skew(&self, tokens: f64) -> f64 {
        if self.ranks <= 1 || tokens <= 0.0 {
            return 1.0;
        }
        let (n, k, r) = (self.experts, self.k, f64::from(self.ranks));
        let mean = tokens * k / r;
        // A Binomial(n', 1/R) count, shifted to the mean, with n' chosen for the variance.
        let draws = tokens * k * (n - k) / (n - 1.0);
        let busiest = if draws <= EXACT_DRAWS {
            let draws = draws.round().max(1.0);
            mean - draws / r + expected_max_of_binomials(draws as u32, 1.0 / r, self.ranks)
        } else {
            mean + self.max_normal * (draws * (1.0 / r) * (1.0 - 1.0 / r)).sqrt()
        };
        (busiest.min(tokens * k.min(f64::from(self.per_rank))) / mean).max(1.0)
    }

    /// Busiest rank's experts touched over the mean, for a step of `tokens` tokens.
    pub(crate) fn expert_skew(&self, tokens: f64) -> f64 {
        if self.ranks <= 1 || tokens <= 0.0 {
            return 1.0;
        }
        let p = 1.0 - ((self.experts - self.k) / self.experts).powf(tokens);
        if p >= 1.0 - 1e-12 {
            return 1.0;
        }
        let m = self.per_rank;
        (expected_max_of_binomials(m, p, self.ranks) / (f64::from(m) * p)).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::seq::index::sample;

    use super::*;
    use blis_engine::rng::SimRng;

    #[test]
    fn the_expected_maximum_of_normals_matches_known_values() {
        for (r, want) in [(1, 0.0), (2, 0.5642), (3, 0.8463), (4, 1.0294), (8, 1.4236)] {
            assert!((expected_max_of_normals(r) - want).abs() < 5e-4, "R = {r}: {}", expected_max_of_normals(r));
        }
    }

    /// Both skews against routing drawn at random (each token picks k
    /// distinct experts; rank i holds experts i·N/R .. (i + 1)·N/R), within
    /// 8 %: the assignment skew runs 1–6 % low at a few tokens, where a
    /// rank's count is far from normal and the ranks' counts, summing to
    /// T·k, are not independent.
    #[test]
    fn skews_match_random_routing() {
        let mut rng = SimRng::seed_from_u64(7);
        for (n, k, r) in [(8u32, 2u32, 2u32), (8, 2, 4), (128, 8, 4), (64, 6, 8)] {
            let load = ExpertLoad::new(f64::from(n), f64::from(k), r);
            for tokens in [1u32, 4, 32, 256] {
                let trials = 4000;
                let (mut max_assign, mut max_touched, mut sum_assign, mut sum_touched) = (0.0, 0.0, 0.0, 0.0);
                for _ in 0..trials {
                    let mut assign = vec![0u32; r as usize];
                    let mut touched = vec![false; n as usize];
                    for _ in 0..tokens {
                        for e in sample(&mut rng, n as usize, k as usize) {
                            assign[e / (n / r) as usize] += 1;
                            touched[e] = true;
                        }
                    }
                    let mut per_rank = vec![0u32; r as usize];
                    for (e, t) in touched.iter().enumerate() {
                        per_rank[e / (n / r) as usize] += u32::from(*t);
                    }
                    max_assign += f64::from(*assign.iter().max().unwrap());
                    sum_assign += f64::from(assign.iter().sum::<u32>()) / f64::from(r);
                    max_touched += f64::from(*per_rank.iter().max().unwrap());
                    sum_touched += f64::from(per_rank.iter().sum::<u32>()) / f64::from(r);
                }
                let (want_a, want_t) = (max_assign / sum_assign, max_touched / sum_touched);
                let (got_a, got_t) = (load.assignment_skew(f64::from(tokens)), load.expert_skew(f64::from(tokens)));
                assert!((got_a / want_a - 1.0).abs() < 0.08, "N {n} k {k} R {r} T {tokens}: assignments {got_a:.3} vs {want_a:.3}");
                assert!((got_t / want_t - 1.0).abs() < 0.08, "N {n} k {k} R {r} T {tokens}: experts {got_t:.3} vs {want_t:.3}");
                assert!(got_a >= 1.0 && got_t >= 1.0);
            }
        }
    }

    #[test]
    fn one_rank_is_even_and_many_tokens_even_out() {
        let one = ExpertLoad::new(8.0, 2.0, 1);
        assert_eq!((one.assignment_skew(3.0), one.expert_skew(3.0)), (1.0, 1.0));
        let ep = ExpertLoad::new(8.0, 2.0, 2);
        assert!(ep.assignment_skew(1.0) > ep.assignment_skew(64.0) && ep.assignment_skew(1e6) < 1.01);
        assert!(ep.expert_skew(1.0) > ep.expert_skew(4.0) && ep.expert_skew(64.0) < 1.0001);
    }
}
