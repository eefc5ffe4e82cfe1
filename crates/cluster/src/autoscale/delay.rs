//! Durations as people write them in flags and files, and the seeded delay
//! distributions of node provisioning and model loading.

use std::fmt;

use blis_engine::rng::SimRng;
use blis_engine::time::{Micros, format_duration, parse_duration};
use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// A duration in a file as text: a string, or a bare number of seconds.
fn duration_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{SYNTAX}")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(Text)
}

/// A duration in a file: text with a unit (`30s`, `4m`, `250ms`) or a
/// number of seconds; written back as text.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Micros);

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        parse_duration(&duration_text(d)?).map(Span).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_duration(self.0))
    }
}

/// How long something takes, drawn from a seeded stream when it varies.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Delay {
    /// Always the same.
    Fixed(Micros),
    /// Uniform between two durations.
    Uniform(Micros, Micros),
    /// Log-normal with the given median and shape σ (the standard deviation of its log).
    LogNormal(Micros, f64),
}

impl Default for Delay {
    fn default() -> Delay {
        Delay::Fixed(Micros::ZERO)
    }
}

const SYNTAX: &str = "a duration (30s, 2m), uniform:MIN,MAX (uniform:1m,3m) or lognormal:MEDIAN,SIGMA (lognormal:2m,0.3)";

impl Delay {
    /// Parses [`Delay`]'s text: `30s`, `uniform:1m,3m`, `lognormal:2m,0.3`.
    pub fn parse(text: &str) -> Result<Delay, String> {
        let t = text.trim();
        fn pair<'a>(whole: &str, rest: &'a str) -> Result<(&'a str, &'a str), String> {
            rest.split_once(',').ok_or_else(|| format!("`{whole}`: expected {SYNTAX}"))
        }
        if let Some(rest) = t.strip_prefix("uniform:") {
            let (a, b) = pair(t, rest)?;
            let (lo, hi) = (parse_duration(a)?, parse_duration(b)?);
            if lo > hi {
                return Err(format!("`{t}`: the minimum is above the maximum"));
            }
            Ok(Delay::Uniform(lo, hi))
        } else if let Some(rest) = t.strip_prefix("lognormal:") {
            let (m, s) = pair(t, rest)?;
            let sigma: f64 = s
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && (0.0..=3.0).contains(v))
                .ok_or_else(|| format!("`{t}`: σ must be a number in [0, 3]"))?;
            Ok(Delay::LogNormal(parse_duration(m)?, sigma))
        } else {
            parse_duration(t).map(Delay::Fixed).map_err(|e| if t.contains(':') { format!("`{t}`: expected {SYNTAX}") } else { e })
        }
    }

    /// One draw (the fixed value without touching `rng`).
    pub fn sample(&self, rng: &mut SimRng) -> Micros {
        match *self {
            Delay::Fixed(d) => d,
            Delay::Uniform(lo, hi) => Micros(rng.random_range(lo.as_us()..=hi.as_us())),
            Delay::LogNormal(median, sigma) => {
                let z: f64 = StandardNormal.sample(rng);
                let us = median.as_us() as f64 * (sigma * z).exp();
                Micros::from_us_f64(us.min(blis_engine::time::MAX_SPAN_S * 1e6)).unwrap_or(median)
            }
        }
    }
}

impl fmt::Display for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Delay::Fixed(d) => f.write_str(&format_duration(d)),
            Delay::Uniform(lo, hi) => {
                write!(f, "uniform:{},{}", format_duration(lo), format_duration(hi))
            }
            Delay::LogNormal(m, s) => write!(f, "lognormal:{},{s}", format_duration(m)),
        }
    }
}

impl Serialize for Delay {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Delay {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Delay, D::Error> {
        Delay::parse(&duration_text(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::rng::subsystem_rng;

    #[test]
    fn delays_parse_print_and_draw_within_their_support() {
        for text in ["30s", "uniform:1m,3m", "lognormal:2m,0.3"] {
            assert_eq!(Delay::parse(text).unwrap().to_string(), text);
        }
        for bad in ["-1s", "uniform:3m,1m", "uniform:1m", "lognormal:2m,x", "lognormal:2m,9", "gamma:1s,2"] {
            assert!(Delay::parse(bad).is_err(), "{bad}");
        }
        let mut rng = subsystem_rng(1, "autoscale");
        let u = Delay::parse("uniform:1m,3m").unwrap();
        let draws: Vec<Micros> = (0..1000).map(|_| u.sample(&mut rng)).collect();
        assert!(draws.iter().all(|d| (Micros::from_secs(60)..=Micros::from_secs(180)).contains(d)));
        let l = Delay::parse("lognormal:2m,0.3").unwrap();
        let mut logs: Vec<f64> = (0..4001).map(|_| (l.sample(&mut rng).as_us() as f64).ln()).collect();
        logs.sort_by(f64::total_cmp);
        let median = logs[2000].exp() / 1e6;
        assert!((median - 120.0).abs() < 6.0, "sample median {median} s");
    }

    #[test]
    fn spans_read_units_and_bare_seconds() {
        let s: Span = serde_json::from_value(serde_json::json!("4m")).unwrap();
        assert_eq!(s, Span(Micros::from_secs(240)));
        let s: Span = serde_json::from_value(serde_json::json!(1.5)).unwrap();
        assert_eq!(s, Span(Micros(1_500_000)));
        assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!("1500ms"));
        assert!(serde_json::from_value::<Span>(serde_json::json!("-3s")).is_err());
    }
}
