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
        if us.is_finite() && us >= 0.0 && us < u64::MAX as f64 { Some(Micros(us.round() as u64)) } else { None }
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

/// Parses a duration as people write it: a number with a unit (`500us`,
/// `250ms`, `30s`, `4m`, `1.5h`) or a bare number of seconds; at most
/// [`MAX_SPAN_S`]. The error says what is accepted.
pub fn parse_duration(text: &str) -> Result<Micros, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let per_unit_s = match unit.trim() {
        "" | "s" => 1.0,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "`{text}`: unknown unit `{other}`; a duration is a number with us, ms, s, m or h (e.g. 30s, 4m), or seconds"
            ));
        }
    };
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration such as 30s, 4m or 250ms"))?;
    let secs = value * per_unit_s;
    if !(secs.is_finite() && (0.0..=MAX_SPAN_S).contains(&secs)) {
        return Err(format!("`{text}`: must be between 0 and {MAX_SPAN_S:e} s"));
    }
    Micros::from_secs_f64(secs).ok_or_else(|| format!("`{text}` is not a duration"))
}

/// Writes a duration in the largest unit that divides it (`30s`, `4m`,
/// `250ms`, `7us`); [`parse_duration`] reads it back exactly.
pub fn format_duration(d: Micros) -> String {
    let us = d.as_us();
    match us {
        0 => "0s".to_string(),
        _ if us.is_multiple_of(3_600_000_000) => format!("{}h", us / 3_600_000_000),
        _ if us.is_multiple_of(60_000_000) => format!("{}m", us / 60_000_000),
        _ if us.is_multiple_of(1_000_000) => format!("{}s", us / 1_000_000),
        _ if us.is_multiple_of(1_000) => format!("{}ms", us / 1_000),
        _ => format!("{us}us"),
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
    fn durations_take_units_and_bare_seconds() {
        assert_eq!(parse_duration("30s"), Ok(Micros::from_secs(30)));
        assert_eq!(parse_duration("4m"), Ok(Micros::from_secs(240)));
        assert_eq!(parse_duration(" 1.5h "), Ok(Micros::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Micros(250_000)));
        assert_eq!(parse_duration("7us"), Ok(Micros(7)));
        assert_eq!(parse_duration("90"), Ok(Micros::from_secs(90)));
        assert_eq!(parse_duration("0s"), Ok(Micros::ZERO));
        for bad in ["", "s", "-1s", "1d", "NaNs", "1e9s", "four minutes"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        for us in [0, 7, 250_000, 30_000_000, 240_000_000, 5_400_000_000, 7_200_000_000, 1_500] {
            let text = format_duration(Micros(us));
            assert_eq!(parse_duration(&text), Ok(Micros(us)), "{text}");
        }
        assert_eq!((format_duration(Micros::from_secs(240)), format_duration(Micros(1_500))), ("4m".to_string(), "1500us".to_string()));
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Micros(3) - Micros(5), Micros::ZERO);
        assert_eq!(Micros::MAX + Micros(1), Micros::MAX);
    }
}
