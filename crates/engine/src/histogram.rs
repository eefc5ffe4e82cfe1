//! A log-linear histogram of `f64` samples: constant memory, O(1) push,
//! percentiles within a stated relative error.
//!
//! The bucket of a value is the top `KEY_BITS` bits of its IEEE-754 bit
//! pattern, mapped to an unsigned order-preserving integer (so every finite
//! value, negative or not, has one): its sign, its 11-bit exponent and the
//! top [`SUB_BITS`] bits of its mantissa. A bucket therefore spans one
//! 2^-[`SUB_BITS`] relative slice of a binade, and reporting a bucket's
//! midpoint is within 2^-([`SUB_BITS`] + 1) ≈ 0.012 % of every value in it.
//! This is the layout of HdrHistogram and of Prometheus' native histograms,
//! indexed by bit arithmetic instead of logarithms.
//!
//! Buckets live in pages of 2^[`SUB_BITS`] counts, one page per binade
//! touched, allocated on first use: latencies from 1 µs to one day touch
//! about 37 binades, so memory stays below 1.2 MiB whatever the number of
//! samples.

/// Mantissa bits kept per bucket: 4096 buckets per binade.
pub const SUB_BITS: u32 = 12;
/// Bits of the order-preserving bit pattern that name a bucket (sign,
/// exponent and [`SUB_BITS`] of mantissa).
const KEY_BITS: u32 = 1 + 11 + SUB_BITS;
const SHIFT: u32 = 64 - KEY_BITS;
const PAGE: usize = 1 << SUB_BITS;

/// The largest relative distance between a sample and the value reported
/// for its bucket.
pub const RELATIVE_ERROR: f64 = 1.0 / (1u64 << (SUB_BITS + 1)) as f64;

/// `v`'s bit pattern as an unsigned integer whose order is `f64::total_cmp`'s.
fn ordered_bits(v: f64) -> u64 {
    let b = v.to_bits();
    if b >> 63 == 1 { !b } else { b | 1 << 63 }
}

/// Inverse of [`ordered_bits`].
fn from_ordered_bits(o: u64) -> f64 {
    f64::from_bits(if o >> 63 == 1 { o & !(1 << 63) } else { !o })
}

/// Counts per bucket; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct LogHistogram {
    /// One page per binade (index = key >> SUB_BITS), allocated when touched.
    pages: Vec<Option<Box<[u64]>>>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl LogHistogram {
    /// Adds one finite sample.
    #[inline]
    pub fn push(&mut self, v: f64) {
        let key = (ordered_bits(v) >> SHIFT) as usize;
        let (page, slot) = (key >> SUB_BITS, key & (PAGE - 1));
        if page >= self.pages.len() {
            self.pages.resize(page + 1, None);
        }
        self.pages[page].get_or_insert_with(|| vec![0; PAGE].into_boxed_slice())[slot] += 1;
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        self.sum += v;
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Sum of the samples (in push order).
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Smallest sample, exactly (0 when empty).
    pub fn min(&self) -> f64 {
        self.min
    }

    /// Largest sample, exactly (0 when empty).
    pub fn max(&self) -> f64 {
        self.max
    }

    /// The sample at 0-based rank `r` (`r < len`) of the sorted samples, to
    /// within [`RELATIVE_ERROR`]: its bucket's midpoint, clamped to the
    /// exact minimum and maximum (so ranks 0 and len − 1 are exact).
    pub fn at_rank(&self, r: u64) -> f64 {
        let mut seen = 0;
        for (page, counts) in self.pages.iter().enumerate() {
            let Some(counts) = counts else { continue };
            for (slot, &n) in counts.iter().enumerate() {
                seen += n;
                if r < seen {
                    let key = ((page << SUB_BITS) | slot) as u64;
                    if key == ordered_bits(0.0) >> SHIFT || key == ordered_bits(-0.0) >> SHIFT {
                        // Zero and subnormals below 1e-311: zero, not the midpoint.
                        return 0.0f64.clamp(self.min, self.max);
                    }
                    let lo = from_ordered_bits(key << SHIFT);
                    let hi = from_ordered_bits((key << SHIFT) | ((1 << SHIFT) - 1));
                    return (lo / 2.0 + hi / 2.0).clamp(self.min, self.max);
                }
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordered_bits_round_trip_and_keep_order() {
        let values = [-1e300, -2.5, -0.0, 0.0, 1e-300, 1.0, 1.5, 3.0e9, f64::MAX];
        for w in values.windows(2) {
            assert!(ordered_bits(w[0]) <= ordered_bits(w[1]), "{} vs {}", w[0], w[1]);
        }
        for v in values {
            assert_eq!(from_ordered_bits(ordered_bits(v)).to_bits(), v.to_bits());
        }
    }

    proptest! {
        /// Every rank is within the stated relative error of the exact
        /// sorted sample; count, sum, min and max are exact.
        #[test]
        fn ranks_are_within_the_relative_error(raw in prop::collection::vec(prop_oneof![0.0f64..1e10, -1e6f64..1e6, 0.0f64..2.0, Just(0.0), Just(-0.0)], 1..3_000)) {
            let mut h = LogHistogram::default();
            for &v in &raw {
                h.push(v);
            }
            let mut sorted = raw.clone();
            sorted.sort_by(f64::total_cmp);
            prop_assert_eq!(h.len(), raw.len() as u64);
            prop_assert_eq!((h.min(), h.max()), (sorted[0], sorted[sorted.len() - 1]));
            prop_assert_eq!(h.sum(), raw.iter().sum::<f64>());
            for (r, &want) in sorted.iter().enumerate() {
                let got = h.at_rank(r as u64);
                prop_assert!((got - want).abs() <= RELATIVE_ERROR * want.abs() + 1e-300, "rank {}: {} vs {}", r, got, want);
            }
        }
    }
}
