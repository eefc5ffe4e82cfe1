//! A scenario resolves every knob once, says where each value came from,
//! applies vLLM's rules the same way whatever layer a value came from, and
//! simulates deterministically.

use blis_scenario::deployment::{LongContext, Server};
use blis_scenario::knobs::{KnobId, KnobValues, Knobs, Source};
use blis_scenario::{Outputs, Scenario, simulate};
use proptest::prelude::*;

const MODEL: &str = "meta-llama/llama-3.1-8b-instruct";

fn given(values: KnobValues) -> KnobValues {
    KnobValues { model: Some(MODEL.into()), num_requests: Some(40), ..values }
}

fn source_of(config: &blis_scenario::knobs::ConfigReport, key: &str) -> String {
    config[key]["source"].as_str().unwrap().to_string()
}

#[test]
fn every_value_is_reported_with_its_source() {
    let file = KnobValues { max_num_seqs: Some(64), ..KnobValues::default() };
    let scenario =
        Scenario::from_values(&given(KnobValues { rate: Some(5.0), ..KnobValues::default() }), vec![(file, "--config run.yaml".into())]);
    let resolved = scenario.resolve().unwrap();
    let c = &resolved.config;
    assert_eq!(source_of(c, "rate"), "flag");
    assert_eq!(source_of(c, "max-num-seqs"), "file");
    assert_eq!(source_of(c, "block-size"), "default");
    for derived in ["max-model-len", "num-gpu-blocks", "latency-model", "coefficients"] {
        assert_eq!(source_of(c, derived), "derived", "{derived}");
    }
    assert_eq!(c["max-model-len"]["value"], 131_072, "Llama-3.1's context");
    assert_eq!(resolved.primary().server.instance.scheduler.max_num_seqs, 64);
    assert!(resolved.primary().server.kv_budget.is_some());
}

#[test]
fn a_bad_value_names_the_file_it_came_from() {
    let file = KnobValues { block_size: Some(7), ..KnobValues::default() };
    let e = Scenario::from_values(&given(KnobValues::default()), vec![(file, "--config run.yaml".into())]).resolve().err().unwrap();
    assert_eq!(e.to_string(), "--config run.yaml: block-size 7: vLLM accepts [1, 8, 16, 32, 64, 128, 256] tokens");
    // The knob is the error's subject, as data: nothing reads it back from the words.
    assert_eq!((e.knob, e.file.as_deref()), (Some(KnobId::block_size), Some("--config run.yaml")));
    let flag = KnobValues { block_size: Some(7), ..KnobValues::default() };
    let e = Scenario::from_values(&given(flag), Vec::new()).resolve().err().unwrap();
    assert!(e.to_string().starts_with("--block-size 7: "), "{e}");
    assert_eq!((e.knob, e.file), (Some(KnobId::block_size), None));
    // A knob whose message is not about its own value still names the file it came from.
    let file = KnobValues { rate: Some(-1.0), tp: Some(3), ..KnobValues::default() };
    let e = Scenario::from_values(&given(KnobValues::default()), vec![(file, "--config f.yaml".into())]).resolve().err().unwrap();
    assert_eq!(e.knob, Some(KnobId::tp), "{e}");
    assert!(e.to_string().starts_with("--config f.yaml: tp 3: "), "{e}");
}

/// vLLM's rule: without chunked prefill a default token budget grows to hold
/// a whole prompt. It applies to an experiment's recorded knobs (file
/// layers) as to flags, but not to a budget someone set.
#[test]
fn the_budget_grows_without_chunked_prefill_from_any_layer_unless_set() {
    let recorded =
        KnobValues { model: Some(MODEL.into()), enable_chunked_prefill: Some(false), max_model_len: Some(16_384), ..KnobValues::default() };
    let resolve = |layers: &[(&KnobValues, Source)]| {
        let knobs = Knobs::layered(layers);
        let mut report = knobs.report();
        let server = Server::resolve(&knobs, LongContext::Recorded, &mut report, &mut Vec::new()).unwrap();
        (server.instance.scheduler.max_num_batched_tokens, report)
    };
    let (budget, report) = resolve(&[(&recorded, Source::File)]);
    assert_eq!(budget, 16_384);
    assert_eq!(report["max-num-batched-tokens"]["source"], "derived");
    let set = KnobValues { max_num_batched_tokens: Some(32_768), ..KnobValues::default() };
    assert_eq!(resolve(&[(&set, Source::Flag), (&recorded, Source::File)]).0, 32_768);
}

/// vLLM's batch defaults follow the GPU (1024 sequences and 8192 tokens on an
/// H100, 256 and 2048 on an A100 or an L40S); a value given wins, and a
/// token budget given below the default seats caps them, as vLLM does.
#[test]
fn batch_defaults_are_the_gpus_and_a_small_budget_caps_the_default_seats() {
    let batch = |values: KnobValues| {
        let knobs = Knobs::layered(&[(&KnobValues { model: Some(MODEL.into()), max_model_len: Some(8192), ..values }, Source::Flag)]);
        let mut report = knobs.report();
        let s = Server::resolve(&knobs, LongContext::Refused, &mut report, &mut Vec::new()).unwrap().instance.scheduler;
        let source = |key: &str| report[key]["source"].as_str().unwrap().to_string();
        ((s.max_num_seqs, s.max_num_batched_tokens), (source("max-num-seqs"), source("max-num-batched-tokens")))
    };
    let on = |gpu: &str| KnobValues { hardware: Some(gpu.into()), ..KnobValues::default() };
    let default = || (String::from("default"), String::from("default"));
    assert_eq!(batch(on("H100")), ((1024, 8192), default()));
    assert_eq!(batch(on("H200")), ((1024, 8192), default()));
    assert_eq!(batch(on("A100-80GB")), ((256, 2048), default()), "the A100 is excluded by name");
    assert_eq!(batch(on("L40S")), ((256, 2048), default()));
    let set = KnobValues { max_num_seqs: Some(64), max_num_batched_tokens: Some(4096), ..on("A100-80GB") };
    assert_eq!(batch(set), ((64, 4096), ("flag".into(), "flag".into())));
    let small_budget = KnobValues { max_num_batched_tokens: Some(512), ..on("H100") };
    assert_eq!(batch(small_budget), ((512, 512), ("derived".into(), "flag".into())));
    // A budget of 0 is the budget's error, not seats capped to 0.
    let zero = KnobValues { model: Some(MODEL.into()), max_num_batched_tokens: Some(0), ..on("H100") };
    let knobs = Knobs::layered(&[(&zero, Source::Flag)]);
    let e = Server::resolve(&knobs, LongContext::Refused, &mut knobs.report(), &mut Vec::new()).err().unwrap();
    assert!(e.to_string().starts_with("--max-num-batched-tokens"), "{e}");
}

/// vLLM forces the KV block size of a latent-attention (MLA) model where its
/// MLA kernels need one: 64 tokens on Hopper (FlashMLA), with a warning when
/// another was given; not on an A100, and not for other models.
#[test]
fn latent_attention_on_hopper_takes_flashmlas_blocks() {
    let block = |model: &str, gpu: &str, given: Option<u32>| {
        let values = KnobValues {
            model: Some(model.into()),
            hardware: Some(gpu.into()),
            block_size: given,
            max_model_len: Some(8192),
            ..KnobValues::default()
        };
        let knobs = Knobs::layered(&[(&values, Source::Flag)]);
        let (mut report, mut warnings) = (knobs.report(), Vec::new());
        let s = Server::resolve(&knobs, LongContext::Refused, &mut report, &mut warnings).unwrap();
        (s.instance.block_size, report["block-size"]["source"].as_str().unwrap().to_string(), warnings.len())
    };
    const MLA: &str = "deepseek-ai/DeepSeek-V2-Lite";
    assert_eq!(block(MLA, "H100", None), (64, "derived".into(), 0));
    assert_eq!(block(MLA, "H200", Some(16)), (64, "derived".into(), 1), "given, overridden and said");
    assert_eq!(block(MLA, "H100", Some(64)), (64, "flag".into(), 0));
    assert_eq!(block(MLA, "A100-80GB", None), (16, "default".into(), 0), "Triton MLA takes any size");
    assert_eq!(block(MODEL, "H100", None), (16, "default".into(), 0));
}

#[test]
fn a_context_longer_than_the_model_allows_is_refused_warned_or_taken_as_recorded() {
    let long = KnobValues { model: Some("meta-llama/Llama-2-7b-hf".into()), max_model_len: Some(8192), ..KnobValues::default() };
    let knobs = Knobs::layered(&[(&long, Source::Flag)]);
    let mut warnings = Vec::new();
    let e = Server::resolve(&knobs, LongContext::Refused, &mut knobs.report(), &mut warnings).err().unwrap();
    assert!(e.to_string().contains("longer than the 4096 tokens") && e.to_string().contains("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"), "{e}");
    let s = Server::resolve(&knobs, LongContext::Allowed, &mut knobs.report(), &mut warnings).unwrap();
    assert_eq!((s.instance.scheduler.max_model_len, warnings.len()), (8192, 1));
    Server::resolve(&knobs, LongContext::Recorded, &mut knobs.report(), &mut warnings).unwrap();
    assert_eq!(warnings.len(), 1, "a recorded server is taken as it ran");
}

#[test]
fn the_same_scenario_simulates_to_the_same_report() {
    let values = given(KnobValues {
        num_instances: Some(3),
        routing_policy: Some("least-loaded".into()),
        tenant_mix: Some("a:1,b:2".into()),
        ..KnobValues::default()
    });
    let scenario = Scenario::from_values(&values, Vec::new());
    let json = || serde_json::to_string(&simulate(scenario.resolve().unwrap(), Outputs::default()).unwrap()).unwrap();
    let (a, b) = (json(), json());
    assert_eq!(a, b);
    let report: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(report["requests"]["completed"], 40);
    assert_eq!(report["cluster"]["num_instances"], 3);
    assert_eq!(report["cluster"]["tenants"].as_object().unwrap().len(), 2);
}

/// A random deployment: model, GPU and TP; a small or derived KV cache,
/// batch limits, chunking, caching, async scheduling; CPU and disk tiers;
/// several instances or prefill/decode pools, or an autoscaled fleet; a
/// synthetic workload, open or closed loop, with shared prefixes and client
/// timeouts, or one of the example specs (multi-turn sessions among them);
/// sometimes cut at a horizon. Whatever vLLM would refuse is refused at
/// resolution; the rest is the fields below, `None` leaving vLLM's (or
/// BLIS's) default.
fn deployment() -> impl Strategy<Value = KnobValues> {
    let server = (
        prop::sample::select(vec![
            MODEL,
            "mistralai/Mixtral-8x7B-v0.1",
            "Qwen/Qwen3-30B-A3B",
            "deepseek-ai/DeepSeek-V2-Lite",
            "Qwen/Qwen2.5-7B-Instruct",
        ]),
        prop::sample::select(vec!["H100", "A100-80GB", "L40S"]),
        prop::sample::select(vec![1u32, 2, 4]),
        prop::option::of(prop::sample::select(vec![60u64, 200, 600, 2000])),
        prop::option::of(1u32..64),
        prop::option::of(prop::sample::select(vec![256u32, 1024, 4096])),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    );
    let tiers = (
        prop::option::of(prop::sample::select(vec![0.5f64, 4.0, 64.0])),
        prop::option::of(prop::sample::select(vec!["disk:2", "disk:64"])),
    );
    // 0: one instance; 1: several; 2: prefill/decode pools; 3: autoscaled.
    let fleet = (
        0u8..4,
        1u32..4,
        prop::sample::select(vec!["round-robin", "least-loaded", "prefix-affinity"]),
        prop::sample::select(vec!["target-tracking", "queue-depth", "threshold"]),
    );
    let load = (
        (1.0f64..200.0, 1u64..120, prop::option::of(1u32..32)),
        (16.0f64..3000.0, 1.0f64..300.0, prop::option::of((64u32..512, 1u32..4))),
        (prop::option::of(1.0f64..60.0), 0u64..1000, prop::option::weighted(0.2, 0.05f64..20.0)),
        // Or a workload spec: multi-turn reasoning sessions, multimodal prompts, language mixes.
        prop::option::of(prop::sample::select(vec!["reasoning.yaml", "multimodal.yaml", "language.yaml"])),
    );
    (server, tiers, fleet, load).prop_map(|(server, tiers, fleet, load)| {
        let (model, gpu, tp, blocks, seqs, budget, (chunked, caching, async_scheduling)) = server;
        let ((rate, requests, concurrency), (prompt, output, prefix), (timeout, seed, horizon), spec) = load;
        let (shape, count, routing, autoscale) = fleet;
        let mut v = KnobValues {
            model: Some(model.into()),
            hardware: Some(gpu.into()),
            tp: Some(tp),
            num_gpu_blocks: blocks,
            max_num_seqs: seqs,
            // Without chunking vLLM needs a budget of the whole context.
            max_num_batched_tokens: budget.filter(|_| chunked),
            max_model_len: Some(8192),
            enable_chunked_prefill: Some(chunked),
            enable_prefix_caching: Some(caching),
            async_scheduling: Some(async_scheduling),
            kv_offloading_size: tiers.0,
            kv_tiers: tiers.1.map(|t| blis_scenario::tier_list::KvTierList::parse(t).unwrap()),
            rate: Some(rate),
            num_requests: Some(requests),
            max_concurrency: concurrency,
            // A spec sets the lengths and prefixes itself.
            prompt_tokens: Some(prompt).filter(|_| spec.is_none()),
            output_tokens: Some(output).filter(|_| spec.is_none()),
            prefix_tokens: prefix.filter(|_| spec.is_none()).map(|p| p.0),
            prefix_groups: prefix.filter(|_| spec.is_none()).map(|p| p.1),
            client_timeout: timeout,
            horizon,
            seed: Some(seed),
            workload_spec: spec.map(|file| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(file)),
            ..KnobValues::default()
        };
        match shape {
            0 => {}
            1 => (v.num_instances, v.routing_policy) = (Some(count + 1), Some(routing.into())),
            2 => (v.prefill_instances, v.decode_instances) = (Some(count), Some(count.div_ceil(2))),
            _ => {
                (v.autoscale_policy, v.min_instances, v.max_instances) = (Some(autoscale.into()), Some(1), Some(count + 1));
                (v.provisioning_delay, v.loading_delay) = (Some("1s".into()), Some("2s".into()));
            }
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every deployment that resolves runs to the end: each request is
    /// completed, dropped, rejected or timed out, none is left queued or
    /// running (unless the run is cut at a horizon), and the report's books
    /// balance. Run again, it gives the same report, byte for byte.
    #[test]
    fn every_deployment_that_resolves_runs_every_request_to_an_end(values in deployment()) {
        let scenario = Scenario::from_values(&values, Vec::new());
        let Ok(resolved) = scenario.resolve() else { return Ok(()) };
        let text = serde_json::to_string(&simulate(resolved, Outputs::default()).unwrap()).unwrap();
        let again = serde_json::to_string(&simulate(scenario.resolve().unwrap(), Outputs::default()).unwrap()).unwrap();
        prop_assert!(text == again, "the same scenario simulated twice differs");
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        let r = &report["requests"];
        let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("requests.{k} in {r}"));
        // Cut at a horizon, what had not ended is still queued or running.
        let unfinished = n("queued") + n("running");
        prop_assert!(values.horizon.is_some() || unfinished == 0, "{}", r);
        prop_assert_eq!(n("injected"), n("completed") + n("dropped") + n("timed_out") + unfinished, "{}", r);
        if let Some(c) = report.get("cluster").and_then(|c| c.get("requests")) {
            let m = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("cluster.requests.{k} in {c}"));
            prop_assert_eq!(m("arrived"), m("rejected") + m("injected") + m("in_control_plane"), "{}", c);
            if values.workload_spec.is_none() && values.horizon.is_none() {
                prop_assert_eq!(m("arrived"), values.num_requests.unwrap(), "{}", c);
            }
        }
    }
}
