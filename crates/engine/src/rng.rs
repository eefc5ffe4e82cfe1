//! Partitioned, seeded randomness.
//!
//! Every subsystem that draws random numbers ("workload", "router",
//! "instance/3", ...) gets its own stream, derived from the master seed and the
//! subsystem's name. Changing how many numbers one subsystem draws never
//! changes another subsystem's numbers, and the derivation uses only integer
//! arithmetic, so streams are identical on every platform.

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

/// The random number generator used everywhere in BLIS: PCG64 (MCG variant),
/// portable and fast. Seed it only through [`subsystem_rng`].
pub type SimRng = Pcg64Mcg;

/// FNV-1a over the bytes of `name`: a stable, documented string hash (the
/// same on every platform and release).
pub fn fnv1a(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finaliser: a bijective 64-bit mixer with full avalanche.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Derives the seed of subsystem `name` from `master_seed`.
pub fn subsystem_seed(master_seed: u64, name: &str) -> u64 {
    mix64(master_seed ^ fnv1a(name))
}

/// A generator for subsystem `name`, deterministic in `(master_seed, name)`.
pub fn subsystem_rng(master_seed: u64, name: &str) -> SimRng {
    SimRng::seed_from_u64(subsystem_seed(master_seed, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn streams_are_reproducible_and_isolated() {
        let a1: Vec<u64> = (0..4)
            .map({
                let mut r = subsystem_rng(7, "workload");
                move |_| r.random()
            })
            .collect();
        let a2: Vec<u64> = (0..4)
            .map({
                let mut r = subsystem_rng(7, "workload");
                move |_| r.random()
            })
            .collect();
        assert_eq!(a1, a2);
        // Drawing from "router" does not perturb "workload".
        let mut router = subsystem_rng(7, "router");
        let _: u64 = router.random();
        let mut w = subsystem_rng(7, "workload");
        assert_eq!(w.random::<u64>(), a1[0]);
        // Different names and seeds give different streams.
        assert_ne!(subsystem_seed(7, "workload"), subsystem_seed(7, "router"));
        assert_ne!(subsystem_seed(7, "workload"), subsystem_seed(8, "workload"));
    }
}
