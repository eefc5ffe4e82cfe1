//! The one entry point gives the same requests whichever command reads an
//! input: the synthetic flags' plan is the synthetic stream itself, an
//! inference-perf file runs as the reproduction of the same configuration,
//! and options wrap any input the same way.

use std::collections::BTreeMap;
use std::path::Path;

use blis_engine::driver::Workload;
use blis_engine::request::{Outcome, Request, RequestRecord, extend_block_hashes};
use blis_engine::time::Micros;
use blis_workload::inference_perf::{InferencePerfConfig, MeasuredLengths, Reproduction};
use blis_workload::labels::{LabelMix, Mix};
use blis_workload::plan::Plan;
use blis_workload::spec::parse;
use blis_workload::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};
use blis_workload::{OpenOptions, Opened, WorkloadInput, open};
use proptest::prelude::*;

/// Every request of `w`, each completing `service` after it arrives (so
/// staged and session workloads move on), in the order sent.
fn drain(w: &mut dyn Workload, service: Micros) -> Vec<Request> {
    let mut out: Vec<Request> = Vec::new();
    let mut running: Vec<(Micros, Request)> = Vec::new();
    loop {
        let next_arrival = w.peek_arrival();
        let next_finish = running.iter().map(|(t, _)| *t).min();
        match (next_arrival, next_finish) {
            (Some(a), f) if f.is_none_or(|f| a <= f) => {
                let req = w.next_request().expect("peeked");
                running.push((req.arrival + service, req.clone()));
                out.push(req);
            }
            (_, Some(f)) => {
                let i = running.iter().position(|(t, _)| *t == f).expect("a finish");
                let (t, req) = running.swap_remove(i);
                w.on_finish(&RequestRecord::unserved(&req, Some(0), Outcome::Completed, t));
            }
            (None, None) => return out,
            (Some(_), None) => unreachable!("covered by the first arm"),
        }
    }
}

fn synthetic() -> impl Strategy<Value = SyntheticSpec> {
    let length = (1.0f64..2000.0, prop_oneof![Just(0.0f64), 1.0..500.0], 1u32..20, prop_oneof![Just(u32::MAX), 2000u32..5000])
        .prop_map(|(mean, stdev, min, max)| LengthSpec { mean, stdev, min, max });
    (
        0.1f64..500.0,
        prop_oneof![Just(ArrivalProcess::Poisson), Just(ArrivalProcess::Constant)],
        1u64..400,
        length.clone(),
        length,
        0u32..300,
        1u32..6,
        any::<u64>(),
    )
        .prop_map(|(rate_per_s, arrival, num_requests, prompt, output, prefix_tokens, prefix_groups, seed)| SyntheticSpec {
            rate_per_s,
            arrival,
            num_requests,
            prompt,
            output,
            prefix_tokens,
            prefix_groups,
            seed,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `blis run` and `blis observe` read the synthetic flags as a
    /// one-client plan; its requests are exactly the synthetic stream's.
    #[test]
    fn the_synthetic_plan_sends_exactly_the_synthetic_stream(spec in synthetic()) {
        prop_assume!(spec.validate().is_ok());
        let stream: Vec<Request> = spec.generate().collect();
        let plan = Plan::synthetic(&spec);
        let generated: Vec<_> = plan.generator().collect();
        prop_assert_eq!(generated.iter().map(|g| g.request.clone()).collect::<Vec<_>>(), stream.clone());
        // Each request starts with the prefix of the group its record names.
        let client = &plan.clients[0];
        for g in &generated {
            match g.prefix_group {
                Some(i) => prop_assert_eq!(&g.request.prompt.runs()[0], &client.prefixes[i as usize].1),
                None => prop_assert_eq!(spec.prefix_tokens, 0),
            }
        }
        let mut opened = open(&WorkloadInput::Synthetic(spec.clone()), &OpenOptions::default()).unwrap();
        prop_assert_eq!(drain(opened.stream.as_mut(), Micros(1)), stream);
        prop_assert_eq!(opened.kind, Opened::Synthetic);
        prop_assert_eq!(opened.expected_requests, spec.num_requests);
    }
}

/// Checks the promise of `RequestMeta::own_prompt_from`: a prompt block
/// (of `block_size` tokens) holding a token at or past it occurs in no
/// other request's prompt. Returns how many requests made the promise.
fn own_prompts_are_own(reqs: &[Request], block_size: u32) -> Result<usize, TestCaseError> {
    let hashes: Vec<Vec<u64>> = reqs
        .iter()
        .map(|r| {
            let mut h = Vec::new();
            extend_block_hashes(&r.prompt, r.output_seed, 0, block_size, &mut h);
            h
        })
        .collect();
    let mut holders: BTreeMap<u64, usize> = BTreeMap::new();
    for h in hashes.iter().flatten() {
        *holders.entry(*h).or_default() += 1;
    }
    let mut promising = 0;
    for (r, h) in reqs.iter().zip(&hashes) {
        let Some(from) = r.meta.own_prompt_from else { continue };
        promising += 1;
        prop_assert!(r.meta.session.is_none(), "a session round promised its prompt: {:?}", r.id);
        for (k, hash) in h.iter().enumerate().skip((from / block_size) as usize) {
            prop_assert_eq!(holders[hash], 1, "block {} of {:?} (own from token {}) occurs in another prompt", k, r.id, from);
        }
    }
    Ok(promising)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The synthetic stream promises every prompt past its shared prefix,
    /// and keeps the promise at any block size.
    #[test]
    fn synthetic_prompts_are_their_own_past_the_prefix(spec in synthetic(), block_size in prop::sample::select(vec![1u32, 16])) {
        prop_assume!(spec.validate().is_ok() && spec.num_requests <= 200);
        let reqs: Vec<Request> = spec.generate().collect();
        prop_assert_eq!(own_prompts_are_own(&reqs, block_size)?, reqs.len());
    }
}

/// A spec's first rounds promise their prompts past the prefix (clients
/// sharing a prefix group share only it); session rounds promise nothing.
#[test]
fn spec_first_rounds_are_their_own_and_sessions_are_not() {
    let spec = "aggregate_rate: 20\nnum_requests: 300\nclients:\n\
      - {id: a, rate_fraction: 1, prefix_group: sys, prefix_length: 40, input_distribution: {type: gaussian, params: {mean: 40, std_dev: 30, min: 1, max: 80}}, output_distribution: {type: constant, params: {value: 20}}}\n\
      - {id: b, rate_fraction: 1, prefix_group: sys, prefix_length: 40, input_distribution: {type: gaussian, params: {mean: 40, std_dev: 30, min: 1, max: 80}}, output_distribution: {type: constant, params: {value: 20}}}\n\
      - {id: c, rate_fraction: 1, input_distribution: {type: constant, params: {value: 48}}, output_distribution: {type: constant, params: {value: 20}}}\n\
      - {id: d, rate_fraction: 1, prefix_group: sys, prefix_length: 40, input_distribution: {type: constant, params: {value: 30}}, output_distribution: {type: constant, params: {value: 20}}, multi_turn: {max_rounds: 3, think_time_us: 1000, context_growth: accumulate}}\n";
    let plan = parse(spec, "own", Path::new(".")).unwrap().plan().unwrap();
    let reqs = drain(&mut plan.generator(), Micros::from_ms(5));
    for block_size in [1, 16] {
        let promising = own_prompts_are_own(&reqs, block_size).unwrap();
        let single_turn = reqs.iter().filter(|r| r.meta.session.is_none()).count();
        assert_eq!(promising, single_turn);
        assert!(single_turn > 150 && single_turn < reqs.len(), "{single_turn} of {}", reqs.len());
    }
    for r in reqs.iter().filter(|r| r.meta.session.is_none()) {
        let prefix = if r.meta.client == 2 { 0 } else { 40 };
        assert_eq!(r.meta.own_prompt_from, Some(prefix), "{:?}", r.id);
    }
}

/// inference-perf's `random` data promises every prompt (each is drawn
/// from a stream keyed by its request); `synthetic` data, prefixes of one
/// text, promises none.
#[test]
fn inference_perf_random_prompts_are_their_own() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/inference-perf-synthetic.yaml")).unwrap();
    for (data, promised) in [("synthetic", false), ("random", true)] {
        let config = InferencePerfConfig::from_yaml_str(&text.replace("type: synthetic", &format!("type: {data}"))).unwrap();
        let run = Reproduction { config, measured: MeasuredLengths::default(), recorded: None };
        let mut opened = open(&WorkloadInput::InferencePerf(Box::new(run)), &OpenOptions { seed: 3, ..OpenOptions::default() }).unwrap();
        let reqs: Vec<Request> = drain(opened.stream.as_mut(), Micros::from_ms(50)).into_iter().take(400).collect();
        assert_eq!(own_prompts_are_own(&reqs, 16).unwrap(), if promised { reqs.len() } else { 0 }, "{data}");
    }
}

fn profile() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/vllm-h100/20260217-231439-llama-2-7b-tp1-general/profile.yaml"))
}

/// `blis run --workload-spec profile.yaml` and `blis validate` of an
/// experiment that recorded only that profile send the same requests.
#[test]
fn an_inference_perf_file_runs_as_the_reproduction_of_its_configuration() {
    let options = OpenOptions { seed: 7, ..OpenOptions::default() };
    let mut from_file = open(&WorkloadInput::File(profile().to_path_buf()), &options).unwrap();
    let config = InferencePerfConfig::from_yaml_str(&std::fs::read_to_string(profile()).unwrap()).unwrap();
    let run = Reproduction { config, measured: MeasuredLengths::default(), recorded: None };
    let mut reproduced = open(&WorkloadInput::InferencePerf(Box::new(run)), &options).unwrap();
    let service = Micros::from_ms(800);
    let a = drain(from_file.stream.as_mut(), service);
    let b = drain(reproduced.stream.as_mut(), service);
    assert_eq!(a.len(), 16_800, "8/s × 600 s + 20/s × 600 s");
    assert_eq!(a, b);
    assert_eq!(from_file.kind, reproduced.kind);
    assert_eq!(from_file.client_timeout, Some(Micros::from_secs(300)));
}

/// A label mix names its tenants and classes, relabels every request from
/// streams of its own, and leaves arrivals and prompts alone.
#[test]
fn options_cap_concurrency_and_relabel_any_input() {
    let spec = SyntheticSpec {
        rate_per_s: 100.0,
        arrival: ArrivalProcess::Poisson,
        num_requests: 500,
        prompt: LengthSpec::fixed(100),
        output: LengthSpec::fixed(10),
        prefix_tokens: 0,
        prefix_groups: 1,
        seed: 3,
    };
    let label_mix = LabelMix { tenants: Some(Mix::parse("tenant-mix", "a:1,b:3").unwrap()), slo_classes: None };
    let plain = drain(open(&WorkloadInput::Synthetic(spec.clone()), &OpenOptions::default()).unwrap().stream.as_mut(), Micros(10));
    let mut mixed = open(&WorkloadInput::Synthetic(spec.clone()), &OpenOptions { label_mix, seed: 3, ..OpenOptions::default() }).unwrap();
    assert_eq!(mixed.labels.tenants, ["a", "b"]);
    assert_eq!(mixed.labels.slo_classes, ["default"]);
    let relabeled = drain(mixed.stream.as_mut(), Micros(10));
    assert_eq!(
        relabeled.iter().map(|r| (r.arrival, &r.prompt)).collect::<Vec<_>>(),
        plain.iter().map(|r| (r.arrival, &r.prompt)).collect::<Vec<_>>()
    );
    let b_share = relabeled.iter().filter(|r| r.meta.tenant.0 == 1).count() as f64 / 500.0;
    assert!((b_share - 0.75).abs() < 0.06, "tenant b share {b_share}");
    // A cap of one connection: each request waits for the previous one.
    let capped = drain(
        open(&WorkloadInput::Synthetic(spec), &OpenOptions { max_concurrency: Some(1), ..OpenOptions::default() }).unwrap().stream.as_mut(),
        Micros::from_ms(50),
    );
    assert!(capped.windows(2).all(|w| w[1].arrival >= w[0].arrival + Micros::from_ms(50)));
}
