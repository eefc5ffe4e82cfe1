//! Tenant and SLO-class assignment over any request stream.
//!
//! Until a workload spec names a request's tenant and SLO class itself, a
//! [`LabelMix`] draws them from weighted mixes such as
//! `realtime:0.2,interactive:0.5,batch:0.3`. It wraps any arrival-ordered
//! iterator of requests and changes nothing but `meta.tenant` and
//! `meta.slo_class`; each label has its own seeded stream
//! (`workload/tenant`, `workload/slo-class`), so adding a tenant mix never
//! changes which class a request gets, and neither changes arrivals, lengths
//! or content.

use blis_engine::driver::Workload;
use blis_engine::request::{Labels, Request, RequestRecord, SloClassId, TenantId};
use blis_engine::rng::{SimRng, subsystem_rng};
use blis_engine::time::Micros;
use rand::RngExt;
use thiserror::Error;

use crate::RequestSource;

/// A malformed mix; the message names the flag and the offending part.
#[derive(Debug, Error, PartialEq)]
#[error("--{flag} {text:?}: {problem}")]
pub struct MixError {
    /// Flag the mix came from (`slo-class-mix`, `tenant-mix`).
    pub flag: &'static str,
    /// The text as given.
    pub text: String,
    /// What is wrong and what is allowed.
    pub problem: String,
}

/// Most names a mix may have (SLO classes are interned as 16-bit ids).
pub const MAX_NAMES: usize = 1 << 16;

/// Named weights: label `i` is drawn with probability `weight_i / Σ weights`.
///
/// Guarantees: between 1 and [`MAX_NAMES`] names; names are unique and
/// non-empty; weights are in [0, 1e9] and sum to more than zero.
#[derive(Clone, Debug, PartialEq)]
pub struct Mix {
    names: Vec<String>,
    cumulative: Vec<f64>,
}

impl Mix {
    /// Parses `name:weight,name:weight,...`. `flag` names the option in errors.
    pub fn parse(flag: &'static str, text: &str) -> Result<Mix, MixError> {
        let err = |problem: String| MixError { flag, text: text.to_string(), problem };
        let mut names: Vec<String> = Vec::new();
        let mut cumulative = Vec::new();
        let mut total = 0.0;
        for part in text.split(',') {
            let (name, weight) = part
                .split_once(':')
                .ok_or_else(|| err(format!("`{part}` is not NAME:WEIGHT (e.g. realtime:0.2,interactive:0.5,batch:0.3)")))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(err(format!("`{part}` has an empty name")));
            }
            if names.iter().any(|n| n == name) {
                return Err(err(format!("`{name}` appears twice")));
            }
            let weight: f64 = weight
                .trim()
                .parse()
                .ok()
                .filter(|w: &f64| (0.0..=1e9).contains(w))
                .ok_or_else(|| err(format!("weight of `{name}` must be a number in [0, 1e9], got `{}`", weight.trim())))?;
            total += weight;
            names.push(name.to_string());
            cumulative.push(total);
        }
        if total <= 0.0 {
            return Err(err("the weights sum to zero".to_string()));
        }
        if names.len() > MAX_NAMES {
            return Err(err(format!("{} names; at most {MAX_NAMES}", names.len())));
        }
        Ok(Mix { names, cumulative })
    }

    /// Draws an index with probability proportional to its weight.
    fn draw(&self, rng: &mut SimRng) -> usize {
        if self.names.len() == 1 {
            return 0;
        }
        let total = self.cumulative[self.cumulative.len() - 1];
        let u = rng.random::<f64>() * total;
        // The first bucket whose cumulative weight exceeds u; zero-weight names are never drawn.
        self.cumulative.iter().position(|&c| u < c).unwrap_or(self.cumulative.len() - 1)
    }
}

/// The label mixes of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelMix {
    /// Tenant mix; `None` leaves tenants as the stream set them.
    pub tenants: Option<Mix>,
    /// SLO-class mix; `None` leaves classes as the stream set them.
    pub slo_classes: Option<Mix>,
}

impl LabelMix {
    /// Whether it assigns nothing.
    pub fn is_empty(&self) -> bool {
        self.tenants.is_none() && self.slo_classes.is_none()
    }

    /// Writes the mixes' names into `labels` (only for the labels it assigns).
    pub fn name_into(&self, labels: &mut Labels) {
        if let Some(m) = &self.tenants {
            labels.tenants = m.names.clone();
        }
        if let Some(m) = &self.slo_classes {
            labels.slo_classes = m.names.clone();
        }
    }

    /// Wraps `requests`, assigning labels with streams derived from `seed`.
    pub fn apply<I: Iterator<Item = Request>>(&self, requests: I, seed: u64) -> Labeled<I> {
        Labeled {
            inner: requests,
            mix: self.clone(),
            tenant_rng: subsystem_rng(seed, "workload/tenant"),
            class_rng: subsystem_rng(seed, "workload/slo-class"),
        }
    }
}

impl LabelMix {
    /// Wraps a workload (sessions included: finishes are forwarded, so
    /// follow-up rounds are still released), assigning labels to every
    /// request it emits. Without mixes the workload passes through unchanged.
    pub fn apply_workload(&self, inner: Box<dyn RequestSource>, seed: u64) -> LabeledWorkload {
        LabeledWorkload {
            inner,
            mix: self.clone(),
            tenant_rng: subsystem_rng(seed, "workload/tenant"),
            class_rng: subsystem_rng(seed, "workload/slo-class"),
        }
    }

    fn relabel(&self, req: &mut Request, tenant_rng: &mut SimRng, class_rng: &mut SimRng) {
        if let Some(m) = &self.tenants {
            req.meta.tenant = TenantId(m.draw(tenant_rng) as u32);
        }
        if let Some(m) = &self.slo_classes {
            req.meta.slo_class = SloClassId(m.draw(class_rng) as u16);
        }
    }
}

/// A workload whose requests get labels from a [`LabelMix`].
pub struct LabeledWorkload {
    inner: Box<dyn RequestSource>,
    mix: LabelMix,
    tenant_rng: SimRng,
    class_rng: SimRng,
}

impl RequestSource for LabeledWorkload {
    fn take_error(&mut self) -> Option<crate::error::WorkloadError> {
        self.inner.take_error()
    }
}

impl Workload for LabeledWorkload {
    fn peek_arrival(&mut self) -> Option<Micros> {
        self.inner.peek_arrival()
    }

    fn next_request(&mut self) -> Option<Request> {
        let mut req = self.inner.next_request()?;
        self.mix.relabel(&mut req, &mut self.tenant_rng, &mut self.class_rng);
        Some(req)
    }

    fn on_finish(&mut self, record: &RequestRecord) {
        self.inner.on_finish(record);
    }
}

/// A request stream with labels assigned by a [`LabelMix`].
pub struct Labeled<I> {
    inner: I,
    mix: LabelMix,
    tenant_rng: SimRng,
    class_rng: SimRng,
}

impl<I: Iterator<Item = Request>> Iterator for Labeled<I> {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let mut req = self.inner.next()?;
        self.mix.relabel(&mut req, &mut self.tenant_rng, &mut self.class_rng);
        Some(req)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};

    fn stream(n: u64) -> impl Iterator<Item = Request> {
        SyntheticSpec {
            rate_per_s: 100.0,
            arrival: ArrivalProcess::Poisson,
            num_requests: n,
            prompt: LengthSpec::fixed(32),
            output: LengthSpec::fixed(4),
            prefix_tokens: 0,
            prefix_groups: 1,
            seed: 1,
        }
        .generate()
    }

    #[test]
    fn class_fractions_follow_the_weights_and_nothing_else_changes() {
        let mix =
            LabelMix { slo_classes: Some(Mix::parse("slo-class-mix", "realtime:0.2,interactive:0.5,batch:0.3").unwrap()), tenants: None };
        let labeled: Vec<Request> = mix.apply(stream(20_000), 9).collect();
        let plain: Vec<Request> = stream(20_000).collect();
        let mut counts = [0u32; 3];
        for (l, p) in labeled.iter().zip(&plain) {
            counts[l.meta.slo_class.0 as usize] += 1;
            assert_eq!((l.arrival, &l.prompt, l.meta.tenant), (p.arrival, &p.prompt, p.meta.tenant));
        }
        for (got, want) in counts.iter().zip([0.2, 0.5, 0.3]) {
            let frac = f64::from(*got) / 20_000.0;
            assert!((frac - want).abs() < 0.015, "{frac} vs {want}");
        }
        let mut labels = Labels::default();
        mix.name_into(&mut labels);
        assert_eq!(labels.slo_classes, ["realtime", "interactive", "batch"]);
        assert!(labels.tenants.is_empty());
    }

    #[test]
    fn assignment_is_seeded_and_independent_per_label() {
        let classes = Some(Mix::parse("slo-class-mix", "a:1,b:1").unwrap());
        let only_classes = LabelMix { slo_classes: classes.clone(), tenants: None };
        let both = LabelMix { slo_classes: classes, tenants: Some(Mix::parse("tenant-mix", "x:1,y:3").unwrap()) };
        let a: Vec<_> = only_classes.apply(stream(500), 3).map(|r| r.meta.slo_class).collect();
        let b: Vec<_> = both.apply(stream(500), 3).map(|r| r.meta.slo_class).collect();
        let c: Vec<_> = only_classes.apply(stream(500), 4).map(|r| r.meta.slo_class).collect();
        assert_eq!(a, b, "adding a tenant mix must not change class draws");
        assert_ne!(a, c, "a different seed gives different draws");
    }

    #[test]
    fn zero_weight_names_are_never_drawn() {
        let mix = LabelMix { tenants: Some(Mix::parse("tenant-mix", "never:0,always:2").unwrap()), slo_classes: None };
        assert!(mix.apply(stream(2000), 5).all(|r| r.meta.tenant == TenantId(1)));
    }

    #[test]
    fn malformed_mixes_name_the_problem() {
        for (text, needle) in [
            ("realtime", "NAME:WEIGHT"),
            ("a:0.5,a:0.5", "twice"),
            (":1", "empty name"),
            ("a:-1", "in [0, 1e9]"),
            ("a:NaN", "in [0, 1e9]"),
            ("a:1e300", "in [0, 1e9]"),
            ("a:0,b:0", "sum to zero"),
        ] {
            let e = Mix::parse("slo-class-mix", text).unwrap_err();
            assert!(e.to_string().contains(needle) && e.to_string().starts_with("--slo-class-mix"), "{text}: {e}");
        }
    }
}
