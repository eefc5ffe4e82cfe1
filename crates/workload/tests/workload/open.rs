//! The one entry point gives the same requests whichever command reads an
//! input: the synthetic flags' plan is the synthetic stream itself, an
//! inference-perf file runs as the reproduction of the same configuration,
//! and options wrap any input the same way.

use std::path::Path;

use blis_engine::driver::Workload;
use blis_engine::request::{Outcome, Request, RequestRecord};
use blis_engine::time::Micros;
use blis_workload::inference_perf::{InferencePerfConfig, Reproduction};
use blis_workload::labels::{LabelMix, Mix};
use blis_workload::plan::Plan;
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
    (0.1f64..500.0, prop_oneof![Just(ArrivalProcess::Poisson), Just(ArrivalProcess::Constant)], 1u64..400, length.clone(), length, 0u32..300, 1u32..6, any::<u64>())
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
    let run = Reproduction { config, measured_prompt_tokens: None, recorded: None };
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
    assert_eq!(relabeled.iter().map(|r| (r.arrival, &r.prompt)).collect::<Vec<_>>(), plain.iter().map(|r| (r.arrival, &r.prompt)).collect::<Vec<_>>());
    let b_share = relabeled.iter().filter(|r| r.meta.tenant.0 == 1).count() as f64 / 500.0;
    assert!((b_share - 0.75).abs() < 0.06, "tenant b share {b_share}");
    // A cap of one connection: each request waits for the previous one.
    let capped = drain(open(&WorkloadInput::Synthetic(spec), &OpenOptions { max_concurrency: Some(1), ..OpenOptions::default() }).unwrap().stream.as_mut(), Micros::from_ms(50));
    assert!(capped.windows(2).all(|w| w[1].arrival >= w[0].arrival + Micros::from_ms(50)));
}
