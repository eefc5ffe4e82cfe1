//! The flag-driven synthetic workload of `blis run`: Poisson or constant
//! arrivals at a fixed rate, prompt and output lengths fixed or clamped
//! Gaussian, optional shared prefixes.

use blis_engine::request::{Request, RequestId, RequestMeta, TokenRun, TokenSeq, output_stream_seed};
use blis_engine::rng::{SimRng, mix64, subsystem_rng, subsystem_seed};
use blis_engine::time::Micros;
use rand::RngExt;
use rand_distr::{Distribution, Exp};
use thiserror::Error;

use crate::dist::{MAX_TOKENS, Sampler, Shape};
use crate::limits::{MAX_RATE_PER_S, MAX_REQUESTS, fmt_num};

/// How inter-arrival gaps are drawn.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ArrivalProcess {
    /// Exponential gaps (a Poisson process).
    #[default]
    Poisson,
    /// Equal gaps of 1/rate.
    Constant,
}

/// A token-length distribution: `mean` when `stdev` is 0, else a Gaussian
/// rounded to whole tokens and clamped to `[min, max]`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LengthSpec {
    /// Mean length in tokens.
    pub mean: f64,
    /// Standard deviation in tokens (0 = fixed length).
    pub stdev: f64,
    /// Smallest length drawn.
    pub min: u32,
    /// Largest length drawn.
    pub max: u32,
}

impl LengthSpec {
    /// A fixed length.
    pub fn fixed(tokens: u32) -> LengthSpec {
        LengthSpec { mean: f64::from(tokens), stdev: 0.0, min: tokens, max: tokens }
    }

    /// Draws one length: rounded to whole tokens and clamped to `[min, max]`.
    pub fn sample(&self, rng: &mut SimRng) -> u32 {
        self.sampler().tokens(rng)
    }

    /// Checks that the mean is a number of tokens ≥ 1, the deviation ≥ 0 and
    /// 1 ≤ min ≤ mean ≤ max (to the token) — what [`LengthSpec::sample`]
    /// needs; errors name `role`'s flags.
    pub fn validate(&self, role: LengthRole) -> Result<(), SpecError> {
        let [mean, stdev, min, max] = role.flags();
        check(
            self.mean.is_finite() && (1.0..=MAX_TOKENS).contains(&self.mean),
            mean,
            fmt_num(self.mean),
            "must be a number of tokens in [1, 2^30]",
        )?;
        check(self.stdev.is_finite() && (0.0..=MAX_TOKENS).contains(&self.stdev), stdev, fmt_num(self.stdev), "must be in [0, 2^30]")?;
        check(self.min >= 1, min, self.min, "must be ≥ 1")?;
        check(self.min <= self.max, max, self.max, "must be ≥ the minimum")?;
        // A bound past the mean clamps most draws (every one without a
        // deviation) to itself: a length no one asked for.
        let the_mean = || format!("the mean length (--{mean} {})", fmt_num(self.mean));
        if f64::from(self.min) > self.mean.ceil() {
            return check(false, min, self.min, format!("must be at most {}", the_mean()));
        }
        check(f64::from(self.max) >= self.mean.floor(), max, self.max, format!("must be at least {}", the_mean()))
    }

    /// The sampler: a clamped Gaussian, or a constant (no draw) when `stdev` is 0.
    pub(crate) fn sampler(&self) -> Sampler {
        let shape =
            if self.stdev > 0.0 { Shape::Gaussian { mean: self.mean, std_dev: self.stdev } } else { Shape::Constant { value: self.mean } };
        Sampler { shape, min: f64::from(self.min), max: f64::from(self.max) }
    }
}

/// Which length a [`LengthSpec`] sets; it names the flags in errors.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LengthRole {
    /// `--prompt-tokens[-stdev|-min|-max]`.
    Prompt,
    /// `--output-tokens[-stdev|-min|-max]`.
    Output,
}

impl LengthRole {
    /// The mean, deviation, minimum and maximum flags.
    fn flags(self) -> [&'static str; 4] {
        match self {
            LengthRole::Prompt => ["prompt-tokens", "prompt-tokens-stdev", "prompt-tokens-min", "prompt-tokens-max"],
            LengthRole::Output => ["output-tokens", "output-tokens-stdev", "output-tokens-min", "output-tokens-max"],
        }
    }
}

/// Parameters of the synthetic workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    /// Mean arrival rate, requests per second.
    pub rate_per_s: f64,
    /// Gap distribution.
    pub arrival: ArrivalProcess,
    /// Requests to generate.
    pub num_requests: u64,
    /// Prompt length (excluding the shared prefix).
    pub prompt: LengthSpec,
    /// Output length (`max_tokens`, generated in full as with `ignore_eos`).
    pub output: LengthSpec,
    /// Length of each shared prefix (0 = no prefix), prepended to the prompt.
    pub prefix_tokens: u32,
    /// Number of distinct shared prefixes; each request draws one uniformly.
    pub prefix_groups: u32,
    /// Master seed.
    pub seed: u64,
}

/// A parameter outside its allowed range; the message names the flag.
#[derive(Debug, Error, PartialEq)]
#[error("--{flag} {value}: {allowed}")]
pub struct SpecError {
    /// Flag name.
    pub flag: &'static str,
    /// Offending value as text.
    pub value: String,
    /// What is allowed.
    pub allowed: String,
}

fn check(ok: bool, flag: &'static str, value: impl ToString, allowed: impl Into<String>) -> Result<(), SpecError> {
    if ok { Ok(()) } else { Err(SpecError { flag, value: value.to_string(), allowed: allowed.into() }) }
}

/// Most shared-prefix groups: each is held for the whole run.
const MAX_PREFIX_GROUPS: u32 = 1_000_000;

impl SyntheticSpec {
    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), SpecError> {
        let rate_ok = self.rate_per_s.is_finite() && self.rate_per_s > 0.0 && self.rate_per_s <= MAX_RATE_PER_S;
        check(rate_ok, "rate", fmt_num(self.rate_per_s), "must be a positive number of requests per second, at most 1e6")?;
        check((1..=MAX_REQUESTS).contains(&self.num_requests), "num-requests", self.num_requests, "must be in [1, 1e12]")?;
        self.prompt.validate(LengthRole::Prompt)?;
        self.output.validate(LengthRole::Output)?;
        check((1..=MAX_PREFIX_GROUPS).contains(&self.prefix_groups), "prefix-groups", self.prefix_groups, "must be in [1, 1e6]")?;
        Ok(())
    }

    /// Its shared prefixes, by group: `prefix-0`, `prefix-1`, ... (none without a prefix length).
    pub fn prefixes(&self) -> Vec<(String, TokenRun)> {
        let content_seed = subsystem_seed(self.seed, "workload/content");
        let groups = if self.prefix_tokens > 0 { self.prefix_groups } else { 0 };
        (0..groups).map(|g| (format!("prefix-{g}"), prefix_run(content_seed, g, self.prefix_tokens))).collect()
    }

    /// The lazy request stream. Call [`SyntheticSpec::validate`] first.
    pub fn generate(&self) -> SyntheticStream {
        SyntheticStream {
            spec: self.clone(),
            next_id: 0,
            clock_s: 0.0,
            prompt: self.prompt.sampler(),
            output: self.output.sampler(),
            arrivals: subsystem_rng(self.seed, "workload/arrivals"),
            lengths: subsystem_rng(self.seed, "workload/lengths"),
            prefixes: subsystem_rng(self.seed, "workload/prefixes"),
            content_seed: subsystem_seed(self.seed, "workload/content"),
        }
    }
}

/// Iterator over the synthetic requests, in arrival order.
pub struct SyntheticStream {
    spec: SyntheticSpec,
    prompt: Sampler,
    output: Sampler,
    next_id: u64,
    clock_s: f64,
    arrivals: SimRng,
    lengths: SimRng,
    prefixes: SimRng,
    content_seed: u64,
}

impl SyntheticStream {
    /// The next request and the index of the shared prefix its prompt starts with.
    pub(crate) fn next_with_group(&mut self) -> Option<(Request, Option<u32>)> {
        if self.next_id >= self.spec.num_requests {
            return None;
        }
        let id = RequestId(self.next_id);
        if self.next_id > 0 {
            self.clock_s += match self.spec.arrival {
                ArrivalProcess::Constant => 1.0 / self.spec.rate_per_s,
                ArrivalProcess::Poisson => Exp::new(self.spec.rate_per_s).map_or(0.0, |e| e.sample(&mut self.arrivals)),
            };
        }
        self.next_id += 1;
        let mut prompt = TokenSeq::new();
        let mut prefix_group = None;
        if self.spec.prefix_tokens > 0 {
            let group = if self.spec.prefix_groups > 1 { self.prefixes.random_range(0..self.spec.prefix_groups) } else { 0 };
            prompt.push(prefix_run(self.content_seed, group, self.spec.prefix_tokens));
            prefix_group = Some(group);
        }
        let prompt_len = self.prompt.tokens(&mut self.lengths);
        let output_len = self.output.tokens(&mut self.lengths);
        prompt.push(TokenRun::synthetic(mix64(self.content_seed ^ id.0), prompt_len));
        let req = Request {
            id,
            arrival: Micros::from_secs_f64(self.clock_s).unwrap_or(Micros::MAX),
            prompt,
            max_output_tokens: output_len,
            output_seed: output_stream_seed(id, self.content_seed),
            // The run after the prefix is keyed by the request id.
            meta: RequestMeta { own_prompt_from: Some(self.spec.prefix_tokens), ..RequestMeta::default() },
        };
        Some((req, prefix_group))
    }
}

/// Shared prefix `group` of a synthetic workload whose content seed is `content_seed`.
fn prefix_run(content_seed: u64, group: u32, len: u32) -> TokenRun {
    TokenRun::synthetic(mix64(content_seed ^ 0x7072_6566 ^ u64::from(group).rotate_left(32)), len)
}

impl Iterator for SyntheticStream {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        self.next_with_group().map(|(req, _)| req)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.spec.num_requests - self.next_id) as usize;
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SyntheticSpec {
        SyntheticSpec {
            rate_per_s: 10.0,
            arrival: ArrivalProcess::Poisson,
            num_requests: 20_000,
            prompt: LengthSpec { mean: 512.0, stdev: 100.0, min: 1, max: 1024 },
            output: LengthSpec::fixed(128),
            prefix_tokens: 64,
            prefix_groups: 4,
            seed: 3,
        }
    }

    #[test]
    fn poisson_rate_and_lengths_match_the_spec() {
        let reqs: Vec<Request> = spec().generate().collect();
        assert_eq!(reqs.len(), 20_000);
        assert!(reqs.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        let span_s = reqs.last().unwrap().arrival.as_secs_f64();
        let rate = (reqs.len() - 1) as f64 / span_s;
        assert!((rate - 10.0).abs() < 0.3, "rate {rate}");
        let mean_prompt = reqs.iter().map(|r| f64::from(r.prompt_tokens() - 64)).sum::<f64>() / reqs.len() as f64;
        assert!((mean_prompt - 512.0).abs() < 3.0, "mean prompt {mean_prompt}");
        assert!(reqs.iter().all(|r| r.max_output_tokens == 128 && (65..=64 + 1024).contains(&r.prompt_tokens())));
        // Four distinct prefixes.
        let mut prefixes: Vec<_> = reqs.iter().map(|r| r.prompt.runs()[0].clone()).collect();
        prefixes.sort_by_key(|r| format!("{r:?}"));
        prefixes.dedup();
        assert_eq!(prefixes.len(), 4);
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced_and_seeded_streams_reproduce() {
        let mut s = spec();
        s.arrival = ArrivalProcess::Constant;
        s.num_requests = 5;
        let times: Vec<u64> = s.generate().map(|r| r.arrival.as_us()).collect();
        assert_eq!(times, [0, 100_000, 200_000, 300_000, 400_000]);
        let a: Vec<Request> = spec().generate().take(50).collect();
        let b: Vec<Request> = spec().generate().take(50).collect();
        assert_eq!(a, b);
        let mut other = spec();
        other.seed = 4;
        assert_ne!(a, other.generate().take(50).collect::<Vec<_>>());
    }

    #[test]
    fn invalid_values_name_their_flag() {
        let mut s = spec();
        s.rate_per_s = f64::NAN;
        assert_eq!(s.validate().unwrap_err().flag, "rate");
        let mut s = spec();
        s.prompt.min = 10;
        s.prompt.max = 5;
        assert_eq!(s.validate().unwrap_err().flag, "prompt-tokens-max");
        let mut s = spec();
        s.output.mean = -3.0;
        assert_eq!(s.validate().unwrap_err().flag, "output-tokens");
    }
}
