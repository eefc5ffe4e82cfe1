//! Simulated time.
//!
//! Every instant and duration inside the simulation is an integer number of
//! microseconds ([`Micros`]). Floating-point seconds or milliseconds appear
//! only at the report boundary ([`Micros::as_ms_f64`], [`Micros::as_secs_f64`]),
//! so event ordering never depends on rounding.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// The longest span, in seconds, that a user-given duration may have (a
/// horizon, a timeout, a stage, an interval): about three years, far past
/// any serving experiment and far from where microsecond arithmetic saturates.
pub const MAX_SPAN_S: f64 = 1e8;

/// Microseconds per millisecond: what µs samples are divided by to report ms.
pub const US_PER_MS: f64 = 1e3;

/// A point in simulated time or a duration, in whole microseconds.
///
/// Arithmetic saturates instead of wrapping: a simulation that runs past
/// `u64::MAX` µs (585 000 years) pins at the maximum rather than travelling
/// back in time.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Micros(pub u64);

impl Micros {
    /// Time zero: the start of every simulation.
    pub const ZERO: Micros = Micros(0);
    /// The largest representable instant; used as "never".
    pub const MAX: Micros = Micros(u64::MAX);
    /// [`MAX_SPAN_S`] in microseconds: the latest instant an input may name
    /// (an arrival in a trace), so later arithmetic never saturates.
    pub const MAX_SPAN: Micros = Micros(100_000_000_000_000);

    /// Converts seconds to microseconds, rounding to the nearest microsecond.
    /// Returns `None` for NaN, negative or out-of-range input.
    pub fn from_secs_f64(secs: f64) -> Option<Micros> {
        Self::from_us_f64(secs * 1e6)
    }

    /// Converts milliseconds to microseconds, rounding to the nearest microsecond.
    /// Returns `None` for NaN, negative or out-of-range input.
    pub fn from_ms_f64(ms: f64) -> Option<Micros> {
        Self::from_us_f64(ms * 1e3)
    }

    /// Rounds a floating-point microsecond value to the nearest microsecond.
    /// Returns `None` for NaN, negative or out-of-range input.
    pub fn from_us_f64(us: f64) -> Option<Micros> {
        if us.is_finite() && us >= 0.0 && us < u64::MAX as f64 {
            Some(Micros(us.round() as u64))
        } else {
            None
        }
    }

    /// Whole seconds to microseconds, saturating.
    pub const fn from_secs(secs: u64) -> Micros {
        Micros(secs.saturating_mul(1_000_000))
    }

    /// Whole milliseconds to microseconds, saturating.
    pub const fn from_ms(ms: u64) -> Micros {
        Micros(ms.saturating_mul(1_000))
    }

    /// The raw microsecond count.
    pub const fn as_us(self) -> u64 {
        self.0
    }

    /// Milliseconds, for reports.
    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / US_PER_MS
    }

    /// Seconds, for reports.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// `self - earlier`, or zero when `earlier` is later than `self`.
    pub const fn saturating_sub(self, earlier: Micros) -> Micros {
        Micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add for Micros {
    type Output = Micros;
    fn add(self, rhs: Micros) -> Micros {
        Micros(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Micros {
    fn add_assign(&mut self, rhs: Micros) {
        *self = *self + rhs;
    }
}

impl Sub for Micros {
    type Output = Micros;
    /// Saturating difference: durations are never negative.
    fn sub(self, rhs: Micros) -> Micros {
        self.saturating_sub(rhs)
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}µs", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_span_is_max_span_s_in_microseconds() {
        assert_eq!(Micros::from_secs_f64(MAX_SPAN_S), Some(Micros::MAX_SPAN));
    }

    #[test]
    fn conversions_round_and_reject_bad_values() {
        assert_eq!(Micros::from_secs_f64(1.5), Some(Micros(1_500_000)));
        assert_eq!(Micros::from_ms_f64(0.0004), Some(Micros(0)));
        assert_eq!(Micros::from_ms_f64(0.0006), Some(Micros(1)));
        assert_eq!(Micros::from_secs_f64(f64::NAN), None);
        assert_eq!(Micros::from_secs_f64(-1.0), None);
        assert_eq!(Micros::from_secs_f64(f64::INFINITY), None);
        assert_eq!(Micros(2_500).as_ms_f64(), 2.5);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Micros(3) - Micros(5), Micros::ZERO);
        assert_eq!(Micros::MAX + Micros(1), Micros::MAX);
    }
}
