//! Tests of the inference-perf reproduction, across its modules.

use std::collections::BTreeMap;

use blis_engine::driver::Workload;
use blis_engine::request::{Outcome, Request, RequestRecord, TokenRun};
use blis_engine::rng::{SimRng, subsystem_rng};
use blis_engine::time::Micros;

use super::timers::StageTimer;
use super::*;
use crate::io_distribution::{LengthDistribution, LengthShape};

const CONFIG: &str = r#"
api:
  type: completion
  streaming: true
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 10
    num_prompts_per_group: 10
    system_prompt_len: 100
    question_len: 466
    output_len: 247
load:
  type: constant
  interval: 1.0
  stages:
  - rate: 5.0
    duration: 600
  - rate: 10.0
    duration: 600
  num_workers: 224
  request_timeout: null
server:
  type: vllm
  ignore_eos: true
  model_name: meta-llama/Llama-2-7b-hf
storage:
  local_storage:
    path: /tmp
"#;

fn with_shared_prefix(extra: &str) -> Result<InferencePerfConfig, InferencePerfError> {
    InferencePerfConfig::from_yaml_str(&CONFIG.replace("output_len: 247", &format!("output_len: 247\n    {extra}")))
}

fn normal(mean: f64, std_dev: f64, min: u32, max: u32) -> Length {
    Length::Drawn(LengthDistribution { min, max, mean, std_dev, ..LengthDistribution::default() })
}

/// Every spelling inference-perf has had for a length resolves as its
/// `_resolve_distribution` resolves it.
#[test]
fn lengths_resolve_as_inference_perf_resolves_them() {
    let sp = |extra: &str| with_shared_prefix(extra).unwrap().shared_prefix().unwrap().clone();
    // Inline distributions (newest), on all three lengths.
    let s = CONFIG
        .replace("system_prompt_len: 100", "system_prompt_len: {type: uniform, min: 50, max: 150}")
        .replace("question_len: 466", "question_len: {type: skew_normal, mean: 200, std_dev: 80, skew: 2.5, min: 10, max: 2000}");
    let c = InferencePerfConfig::from_yaml_str(&s).unwrap();
    let sp0 = c.shared_prefix().unwrap();
    assert!(matches!(&sp0.system_prompt_len, Length::Drawn(d) if d.shape == LengthShape::Uniform && (d.min, d.max) == (50, 150)));
    assert!(matches!(&sp0.question_len, Length::Drawn(d) if d.shape == LengthShape::SkewNormal && d.skew == 2.5));
    assert_eq!(sp0.output_len, Length::Fixed(247));
    // The older `<name>_distribution`, over a number.
    assert_eq!(sp("output_distribution: {mean: 247, std_dev: 20, min: 100, max: 400}").output_len, normal(247.0, 20.0, 100, 400));
    // The short-lived `_std` / `_min` / `_max`: a normal around the number, at least 1 token.
    assert_eq!(sp("question_len_std: 30").question_len, normal(466.0, 30.0, 1, 766));
    assert_eq!(sp("output_len_std: 20\n    output_len_min: 100").output_len, normal(247.0, 20.0, 100, 447));
    assert_eq!(sp("question_len_std: 0\n    output_len_std: 0").question_len, Length::Fixed(466), "a zero spread is no spread");
    let e = with_shared_prefix("question_len_std: .nan").unwrap_err().to_string();
    assert!(e.contains("data.shared_prefix.question_len_std") && e.contains("std_dev: NaN") && e.contains("finite"), "{e}");
    let e = with_shared_prefix("output_len_std: -300").unwrap_err().to_string();
    assert!(e.contains("data.shared_prefix.output_len_std") && e.contains("std_dev: -300"), "{e}");
    // Newer versions write null for what is unset; pydantic takes a whole float as an int.
    let nulls = sp("seed: null\n    question_distribution: null\n    output_distribution: null\n    multimodal: null");
    assert_eq!(nulls, sp(""));
    let whole = InferencePerfConfig::from_yaml_str(&CONFIG.replace("question_len: 466", "question_len: 466.0")).unwrap();
    assert_eq!(whole.shared_prefix().unwrap().question_len, Length::Fixed(466));
}

#[test]
fn ambiguous_or_unreproducible_lengths_are_refused_with_the_field_named() {
    let err = |text: &str| InferencePerfConfig::from_yaml_str(text).unwrap_err().to_string();
    let both = CONFIG.replace("output_len: 247", "output_len: {mean: 247, std_dev: 5}\n    output_distribution: {mean: 247}");
    assert!(err(&both).contains("data.shared_prefix.output_distribution") && err(&both).contains("one or the other"), "{}", err(&both));
    let e = with_shared_prefix("question_distribution: {mean: 300}\n    question_len_std: 4").unwrap_err().to_string();
    assert!(e.contains("question_len_std"), "{e}");
    let e = with_shared_prefix("output_distribution: {type: lognormal, mean: 0}").unwrap_err().to_string();
    assert!(e.contains("data.shared_prefix.output_distribution") && e.contains("{mean: 0}") && e.contains("positive"), "{e}");
    let e = err(&CONFIG.replace("question_len: 466", "question_len: {type: triangle}"));
    assert!(e.contains("question_len") && e.contains("triangle"), "{e}");
    for bad in ["-5", "4.5", "\"long\"", "[1, 2]"] {
        let e = err(&CONFIG.replace("question_len: 466", &format!("question_len: {bad}")));
        assert!(e.contains("data.shared_prefix.question_len") && e.contains("a token count"), "{bad}: {e}");
    }
    let e = with_shared_prefix("multimodal: {image: {count: 1}}").unwrap_err().to_string();
    assert!(e.contains("data.shared_prefix.multimodal") && e.contains("not supported"), "{e}");
    let e = err(&CONFIG.replace("question_len: 466", "question_len: {type: fixed, mean: 2e7}"));
    assert!(e.contains("data.shared_prefix.question_len") && e.contains("10^7 tokens"), "{e}");
    // The larger of two parts that overflow together is the one named.
    let e = err(&CONFIG.replace("system_prompt_len: 100", "system_prompt_len: 4294967295"));
    assert!(e.contains("field `data.shared_prefix.system_prompt_len` = 4294967295") && e.contains("10^7 tokens"), "{e}");
    let e = err(&CONFIG.replace("num_groups: 10", "num_groups: 4294967295"));
    assert!(e.contains("field `data.shared_prefix.num_groups` = 4294967295") && e.contains("10^6"), "{e}");
    // A concurrent stage of no requests names its request count.
    let concurrent = "api:\n  type: completion\ndata:\n  type: shared_prefix\n  shared_prefix: {}\nload:\n  type: concurrent\n  stages:\n  - {num_requests: 0, concurrency_level: 4}\n";
    let e = err(concurrent);
    assert!(e.contains("load.stages[0].num_requests") && e.contains("must be at least 1"), "{e}");
}

/// inference-perf's defaults for an unset shared-prefix field.
#[test]
fn shared_prefix_defaults_are_inference_perfs() {
    let text =
        "api:\n  type: completion\ndata:\n  type: shared_prefix\n  shared_prefix: {}\nload:\n  stages:\n  - {rate: 1, duration: 1}\n";
    let c = InferencePerfConfig::from_yaml_str(text).unwrap();
    let sp = c.shared_prefix().unwrap();
    assert_eq!((sp.num_groups, sp.num_prompts_per_group), (10, 10));
    assert_eq!((&sp.system_prompt_len, &sp.question_len, &sp.output_len), (&Length::Fixed(100), &Length::Fixed(50), &Length::Fixed(50)));
}

/// Drawn lengths: a system prompt length per group, question and output
/// lengths per prompt, within bounds, with the requested means; each
/// prompt keeps its lengths every time it recurs.
#[test]
fn drawn_shared_prefix_lengths_follow_their_distributions() {
    let text = CONFIG
        .replace("num_groups: 10", "num_groups: 40")
        .replace("num_prompts_per_group: 10", "num_prompts_per_group: 50")
        .replace("system_prompt_len: 100", "system_prompt_len: {type: uniform, min: 50, max: 150}")
        .replace("question_len: 466", "question_len: {mean: 400, std_dev: 100, min: 100, max: 700}")
        .replace("output_len: 247", "output_len: {type: lognormal, mean: 250, std_dev: 60, min: 20, max: 2000}");
    let c = InferencePerfConfig::from_yaml_str(&text).unwrap();
    let StagePrompts::Shared(p) = StagePrompts::new(&c.data, &MeasuredLengths::default(), 11).unwrap() else { panic!("shared prefix") };
    let mut system_of_group = BTreeMap::new();
    let (mut questions, mut outputs) = (Vec::new(), Vec::new());
    for n in 0..p.len() as u64 {
        let prompt = p.prompt(n, None);
        let system = prompt.runs()[0].len();
        assert_eq!(*system_of_group.entry(p.group_of(n)).or_insert(system), system, "one system prompt per group");
        questions.push(f64::from(p.question_tokens(n)));
        outputs.push(f64::from(p.output_tokens(n)));
        assert_eq!(prompt.len(), system + p.question_tokens(n));
        assert_eq!(p.prompt(n + p.len() as u64, None), prompt, "a prompt recurs with its lengths");
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let systems: Vec<f64> = system_of_group.values().map(|&s| f64::from(s)).collect();
    assert!(systems.iter().all(|s| (50.0..=150.0).contains(s)) && (mean(&systems) - 100.5).abs() < 10.0, "{systems:?}");
    assert!(questions.iter().all(|q| (100.0..=700.0).contains(q)) && (mean(&questions) - 400.0).abs() < 8.0, "{}", mean(&questions));
    assert!(outputs.iter().all(|o| (20.0..=2000.0).contains(o)) && (mean(&outputs) - 250.0).abs() < 5.0, "{}", mean(&outputs));
    let sp = StagePrompts::Shared(p);
    assert!(!sp.fixed_output());
    assert!((sp.mean_output_tokens() - mean(&outputs)).abs() < 1e-9);
    // Scaled to a measured mean 10 % above the drawn one.
    let StagePrompts::Shared(p) = &sp else { unreachable!() };
    let drawn_mean = (0..p.len() as u64).map(|n| f64::from(p.prompt(n, None).len())).sum::<f64>() / p.len() as f64;
    let StagePrompts::Shared(scaled) =
        StagePrompts::new(&c.data, &MeasuredLengths { prompt_mean_tokens: Some(1.1 * drawn_mean), ..MeasuredLengths::default() }, 11)
            .unwrap()
    else {
        unreachable!()
    };
    let scaled_mean = (0..scaled.len() as u64).map(|n| f64::from(scaled.prompt(n, None).len())).sum::<f64>() / scaled.len() as f64;
    assert!((scaled_mean / drawn_mean - 1.1).abs() < 1e-3, "{scaled_mean} vs {drawn_mean}");
}

#[test]
fn parses_the_effective_config_and_its_defaults() {
    let c = InferencePerfConfig::from_yaml_str(CONFIG).unwrap();
    let want = SharedPrefix {
        num_groups: 10,
        num_prompts_per_group: 10,
        system_prompt_len: Length::Fixed(100),
        question_len: Length::Fixed(466),
        output_len: Length::Fixed(247),
        enable_multi_turn_chat: false,
    };
    assert_eq!(c.shared_prefix().unwrap(), &want);
    assert_eq!(c.load.stages.iter().map(Stage::num_requests).collect::<Vec<_>>(), [3000, 6000]);
    assert_eq!((c.load.kind, c.ignore_eos, c.streaming), (LoadKind::Constant, true, true));
    assert_eq!(c.client_timeout(), Micros::from_secs(300));
    assert_eq!(c.report_file_prefix, "");
    let prefixed = CONFIG.replace("    path: /tmp", "    path: /tmp\n    report_file_prefix: run7_\n  google_cloud_storage: null");
    assert_eq!(InferencePerfConfig::from_yaml_str(&prefixed).unwrap().report_file_prefix, "run7_");
    assert_eq!(c.notes, Vec::<String>::new());
}

/// A misspelt key is ignored, as inference-perf ignores it, leaving the
/// default in place; the configuration names it.
#[test]
fn a_misspelt_key_keeps_the_default_and_is_named() {
    let c = InferencePerfConfig::from_yaml_str(&CONFIG.replace("  interval: 1.0", "  intervall: 7.0")).unwrap();
    assert_eq!(c.load.interval, 1.0);
    assert_eq!(c.notes, ["unknown key `load.intervall` ignored (inference-perf ignores it too); did you mean `interval`?"]);
}

/// A length inference-perf can draw as 0 tokens is named: vLLM refuses an
/// empty prompt and `max_tokens` 0, where BLIS simulates 1 token. A
/// minimum of 1, or a fixed length of at least 1, says nothing (a fixed
/// shared-prefix output of 0 is refused outright).
#[test]
fn lengths_that_can_be_zero_tokens_are_named() {
    let random = |input: &str, output: &str| {
        let text = format!(
            "data:\n  type: random\n  input_distribution: {input}\n  output_distribution: {output}\nload:\n  type: constant\n  stages: [{{rate: 1, duration: 10}}]\napi:\n  type: completion\n"
        );
        InferencePerfConfig::from_yaml_str(&text).unwrap().notes
    };
    let (some, zero) = ("{min: 1, max: 100, mean: 50, std_dev: 10}", "{min: 0, max: 100, mean: 50, std_dev: 10}");
    assert_eq!(random(some, some), Vec::<String>::new());
    let notes = random(zero, some);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("data.input_distribution: inference-perf can draw prompts of 0 tokens, which vLLM refuses (HTTP 400"),
        "{notes:?}"
    );
    let notes = random(some, "{type: fixed, mean: 0.5}");
    assert!(notes.len() == 1 && notes[0].starts_with("data.output_distribution: inference-perf can draw outputs of 0 tokens"), "{notes:?}");
    assert_eq!(random(some, "{type: fixed, mean: 1}"), Vec::<String>::new());
    let shared = InferencePerfConfig::from_yaml_str(
        &CONFIG.replace("output_len: 247", "output_len: 247\n    output_distribution: {mean: 247, std_dev: 20, min: 0, max: 400}"),
    );
    let shared = shared.unwrap();
    assert!(
        shared.notes.iter().any(|n| n.starts_with("data.shared_prefix.output_len: inference-perf can draw outputs of 0 tokens")),
        "{:?}",
        shared.notes
    );
}

#[test]
fn rejects_what_it_cannot_reproduce_with_the_field_named() {
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("type: shared_prefix", "type: mock")).unwrap_err();
    assert!(e.to_string().contains("data.type") && e.to_string().contains("random, synthetic"), "{e}");
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("type: shared_prefix", "type: random")).unwrap_err();
    assert!(e.to_string().contains("data.input_distribution"), "{e}");
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 5.0", "rate: -5.0")).unwrap_err();
    assert!(e.to_string().contains("rate"), "{e}");
    // The request cap is on the whole run: 3 000 requests in stage 0 plus 600 s × 16 666/s in stage 1.
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 10.0", "rate: 16666")).unwrap_err().to_string();
    assert!(e.starts_with("field `load.stages[1].rate` = 16666.0") && e.contains("10^7"), "{e}");
    // u32 lengths whose sum would wrap.
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("system_prompt_len: 100", "system_prompt_len: 4294967000")).unwrap_err();
    assert!(e.to_string().contains("system_prompt_len + question_len"), "{e}");
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("num_groups: 10", "num_groups: 4000000000")).unwrap_err();
    assert!(e.to_string().contains("num_prompts_per_group"), "{e}");
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("duration: 600\n  - rate", "duration: nope\n  - rate")).unwrap_err();
    assert!(e.to_string().contains("duration"), "{e}");
    // A huge interval used to become 0 s silently; huge spans are refused.
    for (from, to, field) in [
        ("interval: 1.0", "interval: 1e300", "load.interval"),
        ("request_timeout: null", "request_timeout: 1e300", "load.request_timeout"),
        ("rate: 5.0\n    duration: 600", "rate: 1e-300\n    duration: 1e300", "load.stages[0].duration"),
    ] {
        let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace(from, to)).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("1e8] seconds"), "{e}");
    }
    assert!(InferencePerfConfig::from_yaml_str("{").is_err());
}

#[test]
fn prompts_cycle_and_share_their_group_prefix() {
    let c = InferencePerfConfig::from_yaml_str(CONFIG).unwrap();
    let sp = c.shared_prefix().unwrap();
    let p = SharedPrefixPrompts::new(sp, None, 7);
    assert_eq!(p.len(), 100);
    assert_eq!(p.prompt(3, None), p.prompt(103, None));
    assert_eq!(p.prompt(3, None).len(), 566);
    assert_eq!(p.prompt(3, Some(600)).len(), 600);
    assert_eq!(p.prompt(3, Some(50)).len(), 50);
    // Two prompts of one group share the system run and nothing else.
    let a = (0..100).find(|&i| p.group_of(i) == p.group_of(0) && i != 0).unwrap();
    let (x, y) = (p.prompt(0, None), p.prompt(a, None));
    assert_eq!(x.runs()[0], y.runs()[0]);
    assert_ne!(x.runs()[1], y.runs()[1]);
    // Every group holds ten prompts.
    let mut sizes = [0; 10];
    (0..100).for_each(|i| sizes[p.group_of(i)] += 1);
    assert_eq!(sizes, [10; 10]);
}

/// inference-perf's load timers as BLIS first wrote them, drawing a stage's
/// offsets all at once: the reference [`StageTimer`] must match.
fn reference_offsets(kind: LoadKind, stage: &Stage, rng: &mut SimRng) -> Vec<f64> {
    use rand_distr::{Distribution, Exp, Poisson};
    fn spread(n: usize, rate: f64, duration: f64, start: f64, rng: &mut SimRng) -> Vec<f64> {
        let Ok(exp) = Exp::new(rate) else { return vec![start; n] };
        let gaps: Vec<f64> = (0..n).map(|_| exp.sample(rng)).collect();
        let total: f64 = gaps.iter().sum();
        let scale = if total > 0.0 { duration / total } else { 0.0 };
        let mut t = start;
        gaps.iter()
            .map(|g| {
                t += g * scale;
                t
            })
            .collect()
    }
    let n = stage.num_requests() as usize;
    match kind {
        LoadKind::Constant | LoadKind::Concurrent => spread(n, stage.rate, stage.duration, 0.0, rng),
        LoadKind::Poisson => {
            let (mut out, poisson, mut second) = (Vec::new(), Poisson::new(stage.rate).unwrap(), 0.0);
            while out.len() < n {
                let count = poisson.sample(rng) as usize;
                if count > 0 {
                    out.extend(spread(count, count as f64, 1.0, second, rng));
                }
                second += 1.0;
            }
            out.truncate(n);
            out
        }
    }
}

/// Every offset a timer sends, and the stream after it.
fn drain(timer: &mut StageTimer, rng: &mut SimRng) -> Vec<f64> {
    let mut out = Vec::new();
    while let Some(t) = timer.peek() {
        out.push(t);
        timer.advance(rng);
    }
    out
}

#[test]
fn constant_stage_sends_exactly_n_requests_ending_at_the_duration() {
    let mut rng = subsystem_rng(1, "t");
    let offs =
        drain(&mut StageTimer::new(LoadKind::Constant, &Stage { rate: 5.0, duration: 600.0, concurrency: None }, &mut rng), &mut rng);
    assert_eq!(offs.len(), 3000);
    assert!(offs.windows(2).all(|w| w[0] <= w[1]));
    assert!((offs[2999] - 600.0).abs() < 1e-6);
    let p = drain(&mut StageTimer::new(LoadKind::Poisson, &Stage { rate: 5.0, duration: 600.0, concurrency: None }, &mut rng), &mut rng);
    assert_eq!(p.len(), 3000);
    assert!(p.windows(2).all(|w| w[0] <= w[1]));
    assert!((p[2999] / 600.0 - 1.0).abs() < 0.1, "{}", p[2999]);
}

proptest::proptest! {
    /// Drawn lazily, a stage's offsets are bit for bit those drawn all at
    /// once, and the stream is left where the next stage expects it.
    #[test]
    fn lazy_stage_timers_draw_what_the_whole_draw_would(
        seed in 0u64..1000,
        poisson in proptest::bool::ANY,
        stages in proptest::collection::vec((0.05f64..50.0, 0.0f64..40.0), 1..4),
    ) {
        let kind = if poisson { LoadKind::Poisson } else { LoadKind::Constant };
        let (mut lazy, mut whole) = (subsystem_rng(seed, "t"), subsystem_rng(seed, "t"));
        for (rate, duration) in stages {
            let stage = Stage { rate, duration, concurrency: None };
            let got = drain(&mut StageTimer::new(kind, &stage, &mut lazy), &mut lazy);
            let want = reference_offsets(kind, &stage, &mut whole);
            proptest::prop_assert_eq!(got.iter().map(|t| t.to_bits()).collect::<Vec<_>>(), want.iter().map(|t| t.to_bits()).collect::<Vec<_>>());
        }
        proptest::prop_assert_eq!(rand::RngExt::random::<u64>(&mut lazy), rand::RngExt::random::<u64>(&mut whole));
    }
}

fn finish(r: &Request, at: Micros) -> RequestRecord {
    RequestRecord {
        id: r.id,
        meta: r.meta,
        instance: Some(0),
        outcome: Outcome::Completed,
        arrival: r.arrival,
        enqueued: None,
        queued: None,
        first_scheduled: None,
        first_token: None,
        last_token: None,
        finished: at,
        input_tokens: r.prompt_tokens(),
        output_tokens: r.max_output_tokens,
        cached_prompt_tokens: 0,
        preemptions: 0,
        loaded_prompt_tokens: 0,
        kv_load_wait: Micros::ZERO,
        pd: None,
    }
}

#[test]
fn next_stage_starts_after_the_previous_drains() {
    let c = InferencePerfConfig::from_yaml_str(CONFIG).unwrap();
    let mut w =
        StagedWorkload::new(&c, &MeasuredLengths { prompt_mean_tokens: Some(1.05 * 566.0), ..MeasuredLengths::default() }, 3).unwrap();
    let mut stage0 = Vec::new();
    while let Some(r) = w.next_request() {
        stage0.push(r);
    }
    assert_eq!(stage0.len(), 3000);
    assert!(stage0[0].arrival >= Micros::from_secs(1));
    assert!(stage0.iter().all(|r| r.meta.stage == 0 && r.max_output_tokens == 247));
    // Nothing more until every stage-0 request has finished.
    let last = stage0.last().unwrap().arrival;
    for r in &stage0[..2999] {
        w.on_finish(&finish(r, last));
    }
    assert_eq!(w.peek_arrival(), None);
    let drained = last + Micros::from_secs(2);
    w.on_finish(&finish(&stage0[2999], drained));
    let first1 = w.next_request().unwrap();
    assert_eq!(first1.meta.stage, 1);
    // interval (1 s) + start offset (1 s) + the first gap.
    assert!(first1.arrival > drained + Micros::from_secs(2));
    assert_eq!(first1.prompt, stage0[0].prompt, "each stage restarts the prompt cycle");
}

/// Drives a workload as a server with a fixed service time would:
/// requests finish `service` after they are sent (or when their client
/// cancels them, if earlier), in time order.
fn drive(w: &mut (impl Workload + ?Sized), service: Micros) -> Vec<Request> {
    let ends = |r: &Request| (r.arrival + service).min(r.meta.cancel_at.unwrap_or(Micros::MAX));
    let mut sent: Vec<Request> = Vec::new();
    let mut running: std::collections::BTreeMap<(Micros, u64), Request> = Default::default();
    loop {
        let next_send = w.peek_arrival();
        let next_done = running.keys().next().copied();
        match (next_send, next_done) {
            (None, None) => return sent,
            (Some(t), Some((d, _))) if t < d => {
                let r = w.next_request().unwrap();
                running.insert((ends(&r), r.id.0), r.clone());
                sent.push(r);
            }
            (Some(_), None) => {
                let r = w.next_request().unwrap();
                running.insert((ends(&r), r.id.0), r.clone());
                sent.push(r);
            }
            (_, Some(key)) => {
                let r = running.remove(&key).unwrap();
                w.on_finish(&finish(&r, key.0));
            }
        }
    }
}

/// inference-perf sends ⌊rate × duration⌋ requests per stage, for both
/// load types, with and without multi-turn chat; stages follow each other.
#[test]
fn stage_request_counts_equal_rate_times_duration() {
    for (load, multi_turn) in [("constant", false), ("poisson", false), ("constant", true)] {
        let text = CONFIG
            .replace("type: constant", &format!("type: {load}"))
            .replace("rate: 5.0\n    duration: 600", "rate: 8.0\n    duration: 30")
            .replace("rate: 10.0\n    duration: 600", "rate: 20.0\n    duration: 15")
            .replace("output_len: 247", &format!("output_len: 247\n    enable_multi_turn_chat: {multi_turn}"));
        let c = InferencePerfConfig::from_yaml_str(&text).unwrap();
        let mut w = StagedWorkload::new(&c, &MeasuredLengths::default(), 9).unwrap();
        let sent = drive(&mut w, Micros::from_ms(300));
        let per_stage = |s: u32| sent.iter().filter(|r| r.meta.stage == s).count();
        assert_eq!((per_stage(0), per_stage(1)), (240, 300), "{load}, multi-turn {multi_turn}");
        assert!(sent.windows(2).all(|p| p[0].arrival <= p[1].arrival));
    }
}

/// With multi-turn chat, request n is a round of user n mod 100: a round
/// never starts before the user's previous round finished, and its prompt
/// extends the previous prompt and answer (so the prefix cache can hit)
/// with the user's question; every round generates the user's output length.
#[test]
fn multi_turn_rounds_wait_for_the_previous_round_and_accumulate_context() {
    let fixed = CONFIG
        .replace("output_len: 247", "output_len: 247\n    enable_multi_turn_chat: true")
        .replace("rate: 5.0\n    duration: 600", "rate: 50.0\n    duration: 20");
    let drawn = fixed
        .replace("question_len: 466", "question_len: {mean: 466, std_dev: 100, min: 1, max: 1000}")
        .replace("output_len: 247", "output_len: {mean: 247, std_dev: 50, min: 1, max: 500}");
    for text in [fixed, drawn] {
        let c = InferencePerfConfig::from_yaml_str(&text).unwrap();
        let StagePrompts::Shared(prompts) = StagePrompts::new(&c.data, &MeasuredLengths::default(), 4).unwrap() else {
            panic!("shared prefix")
        };
        let mut w = StagedWorkload::new(&c, &MeasuredLengths::default(), 4).unwrap();
        // Service 3 s: a user's next timer event (2 s later at 50 req/s) finds it busy.
        let service = Micros::from_secs(3);
        let sent = drive(&mut w, service);
        let mut by_user: std::collections::BTreeMap<u64, Vec<&Request>> = Default::default();
        for r in sent.iter().filter(|r| r.meta.stage == 0) {
            by_user.entry(r.meta.session.unwrap().0).or_default().push(r);
        }
        assert_eq!(by_user.len(), 100);
        for (&user, rounds) in &by_user {
            assert!(rounds.iter().all(|r| r.max_output_tokens == prompts.output_tokens(user)));
            for (k, pair) in rounds.windows(2).enumerate() {
                assert_eq!(pair[1].meta.session.unwrap().1, k as u32 + 1);
                assert!(pair[1].arrival >= pair[0].arrival + service, "round {} overlapped the previous one", k + 1);
                let prev = &pair[0].prompt;
                assert_eq!(pair[1].prompt.runs()[..prev.runs().len()], prev.runs()[..], "context accumulates");
                assert_eq!(pair[1].prompt.len(), prev.len() + pair[0].max_output_tokens + prompts.question_tokens(user));
            }
        }
    }
}

fn concurrent_config(stages: &str) -> Result<InferencePerfConfig, InferencePerfError> {
    let load = format!("load:\n  type: concurrent\n  interval: 1.0\n  stages:\n{stages}  request_timeout: null\nserver:");
    InferencePerfConfig::from_yaml_str(&CONFIG.replace(&CONFIG[CONFIG.find("load:").unwrap()..CONFIG.find("server:").unwrap() + 7], &load))
}

/// A concurrent load: each stage is its requests scheduled within one
/// second and sent through `concurrency_level` slots, so at most that
/// many are ever in flight; stages still follow each other.
#[test]
fn a_concurrent_load_keeps_each_stage_within_its_concurrency() {
    // As written by hand, and as inference-perf writes it back with rate and duration filled in.
    let c = concurrent_config(
        "  - {num_requests: 120, concurrency_level: 4}\n  - {num_requests: 90, concurrency_level: 16, rate: 90, duration: 1}\n",
    )
    .unwrap();
    assert_eq!(c.load.kind, LoadKind::Concurrent);
    assert_eq!(c.load.stages.iter().map(|s| (s.num_requests(), s.concurrency)).collect::<Vec<_>>(), [(120, Some(4)), (90, Some(16))]);
    assert_eq!(c.load.stages[0].offered_rate(), None);
    assert_eq!(c.load.stages[0].describe(), "120 requests, 4 at a time");
    let mut w = StagedWorkload::new(&c, &MeasuredLengths::default(), 2).unwrap();
    let service = Micros::from_ms(700);
    let sent = drive(&mut w, service);
    assert_eq!(sent.len(), 210);
    for (stage, limit) in [(0, 4), (1, 16)] {
        let sends: Vec<Micros> = sent.iter().filter(|r| r.meta.stage == stage).map(|r| r.arrival).collect();
        // With a fixed service time, requests in flight at t are those sent in (t − service, t].
        let most = sends.iter().map(|&t| sends.iter().filter(|&&s| s <= t && s + service > t).count()).max().unwrap();
        assert_eq!(most, limit, "stage {stage}");
    }
    // The first stage's 120 requests at 4 at a time take 30 rounds of 0.7 s.
    let last0 = sent.iter().filter(|r| r.meta.stage == 0).map(|r| r.arrival).max().unwrap();
    assert!((Micros::from_secs(21)..Micros::from_secs(22)).contains(&last0), "{last0:?}");
}

#[test]
fn concurrent_and_rate_stages_refuse_each_others_fields() {
    let err = |r: Result<InferencePerfConfig, InferencePerfError>| r.unwrap_err().to_string();
    let e = err(concurrent_config("  - {num_requests: 120}\n"));
    assert!(e.contains("load.stages[0].concurrency_level") && e.contains("required"), "{e}");
    let e = err(concurrent_config("  - {num_requests: 120, concurrency_level: 0}\n"));
    assert!(e.contains("concurrency_level") && e.contains("at least 1"), "{e}");
    let e = err(concurrent_config("  - {num_requests: 20000000, concurrency_level: 4}\n"));
    assert!(e.contains("load.stages[0].num_requests") && e.contains("10^7"), "{e}");
    let e = err(InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 5.0", "rate: 5.0\n    concurrency_level: 3")));
    assert!(e.contains("load.stages[0].concurrency_level") && e.contains("only a concurrent load"), "{e}");
    let e = err(InferencePerfConfig::from_yaml_str(&CONFIG.replace("rate: 5.0\n", "")));
    assert!(e.contains("load.stages[0].rate") && e.contains("required"), "{e}");
}

/// A one-stage configuration of `data_type` with inference-perf's distribution fields.
fn drawn_config(data_type: &str) -> InferencePerfConfig {
    let text = format!(
        "api:\n  type: completion\n  streaming: true\ndata:\n  type: {data_type}\n  input_distribution:\n    min: 50\n    max: 400\n    \
         mean: 200\n    std_dev: 80\n    total_count: 30\n  output_distribution:\n    min: 5\n    max: 60\n    mean: 20\n    std_dev: 10\n    \
         total_count: 30\nload:\n  type: poisson\n  stages:\n  - rate: 20\n    duration: 6\n"
    );
    InferencePerfConfig::from_yaml_str(&text).unwrap()
}

#[test]
fn random_prompts_cycle_their_lengths_but_never_their_tokens() {
    let c = drawn_config("random");
    assert!(c.shared_prefix().is_none());
    let sent = drive(&mut StagedWorkload::new(&c, &MeasuredLengths::default(), 5).unwrap(), Micros::from_ms(100));
    assert_eq!(sent.len(), 120);
    assert!(sent.iter().all(|r| (50..=400).contains(&r.prompt.len()) && (5..=60).contains(&r.max_output_tokens)));
    // Entry n mod total_count: request 3 and 33 have the same lengths, yet different tokens.
    assert_eq!((sent[3].prompt.len(), sent[3].max_output_tokens), (sent[33].prompt.len(), sent[33].max_output_tokens));
    assert_ne!(sent[3].prompt.runs()[0], sent[33].prompt.runs()[0]);
    let distinct_lengths: std::collections::BTreeSet<u32> = sent.iter().map(|r| r.prompt.len()).collect();
    assert!(distinct_lengths.len() > 10, "lengths are drawn, not fixed: {distinct_lengths:?}");
}

#[test]
fn synthetic_prompts_are_prefixes_of_one_text() {
    let sent = drive(&mut StagedWorkload::new(&drawn_config("synthetic"), &MeasuredLengths::default(), 5).unwrap(), Micros::from_ms(100));
    let first = sent[0].prompt.runs()[0].clone();
    for r in &sent {
        match (&r.prompt.runs()[0], &first) {
            (TokenRun::Synthetic { seed, offset: 0, .. }, TokenRun::Synthetic { seed: s0, .. }) => assert_eq!(seed, s0),
            other => panic!("not a prefix of the shared text: {other:?}"),
        }
    }
}

#[test]
fn distribution_errors_name_the_field() {
    let text = "data:\n  type: synthetic\n  input_distribution:\n    mean: 5000\n  output_distribution: {}\nload:\n  stages:\n  - {rate: 1, duration: 1}\napi: {}\n";
    let e = InferencePerfConfig::from_yaml_str(&text.replace("api: {}\n", "api:\n  type: completion\n")).unwrap_err();
    assert!(e.to_string().contains("data.input_distribution") && e.to_string().contains("mean: 5000"), "{e}");
}

/// A one-stage `shareGPT` run of 120 requests (a dataset: its lengths come
/// from the run's records, not from the configuration).
fn dataset_config() -> InferencePerfConfig {
    let text = "api:\n  type: chat\n  streaming: true\ndata:\n  type: shareGPT\n  path: /data/ShareGPT_V3_unfiltered_cleaned_split.json\n  \
                input_distribution: {min: 4, max: 4000}\nload:\n  type: poisson\n  stages:\n  - rate: 20\n    duration: 6\n";
    InferencePerfConfig::from_yaml_str(text).unwrap()
}

/// What a report's percentiles say of a shareGPT run: prompts 20–1 800
/// tokens (median 200), answers 5–900 (median 250).
fn dataset_lengths() -> MeasuredLengths {
    MeasuredLengths {
        prompt_mean_tokens: Some(300.0),
        prompt: Some(QuantileTable::new(vec![(0.0, 20.0), (0.5, 200.0), (0.9, 700.0), (1.0, 1800.0)]).unwrap()),
        output: Some(QuantileTable::new(vec![(0.0, 5.0), (0.5, 250.0), (1.0, 900.0)]).unwrap()),
    }
}

#[test]
fn every_dataset_inference_perf_names_is_read() {
    for dataset in Dataset::ALL {
        let c = InferencePerfConfig::from_yaml_str(&CONFIG.replace("type: shared_prefix", &format!("type: {}", dataset.name()))).unwrap();
        assert_eq!(c.data, Data::Dataset(dataset));
    }
    let e = InferencePerfConfig::from_yaml_str(&CONFIG.replace("type: shared_prefix", "type: visionarena")).unwrap_err().to_string();
    assert!(e.contains("data.type") && e.contains("visionarena") && e.contains("shareGPT, cnn_dailymail"), "{e}");
}

/// Without measured lengths a dataset cannot be sent, and the error says
/// what to do; with them, each request draws its own lengths within the
/// measured range, its prompt of fresh tokens that promise nothing shared.
#[test]
fn dataset_requests_draw_lengths_from_what_the_run_measured() {
    let c = dataset_config();
    let e = StagedWorkload::new(&c, &MeasuredLengths::default(), 5).err().unwrap().to_string();
    assert!(e.contains("data.type") && e.contains("shareGPT") && e.contains("blis validate") && e.contains("data.type random"), "{e}");
    let sent = drive(&mut StagedWorkload::new(&c, &dataset_lengths(), 5).unwrap(), Micros::from_ms(100));
    assert_eq!(sent.len(), 120);
    assert!(sent.iter().all(|r| (20..=1800).contains(&r.prompt.len()) && (5..=900).contains(&r.max_output_tokens)));
    assert!(sent.iter().all(|r| r.meta.own_prompt_from == Some(0)));
    let streams: std::collections::BTreeSet<_> = sent.iter().map(|r| format!("{:?}", r.prompt.runs()[0])).collect();
    assert_eq!(streams.len(), sent.len(), "a prompt is sent once");
    let median = |mut v: Vec<u32>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (inputs, outputs): (Vec<u32>, Vec<u32>) = sent.iter().map(|r| (r.prompt.len(), r.max_output_tokens)).unzip();
    assert!((100..=320).contains(&median(inputs.clone())), "median prompt {} (measured 200)", median(inputs));
    assert!((130..=380).contains(&median(outputs.clone())), "median output {} (measured 250)", median(outputs));
    // Deterministic in the seed, different across seeds.
    let again = drive(&mut StagedWorkload::new(&c, &dataset_lengths(), 5).unwrap(), Micros::from_ms(100));
    assert_eq!(sent, again);
    let other = drive(&mut StagedWorkload::new(&c, &dataset_lengths(), 6).unwrap(), Micros::from_ms(100));
    assert_ne!(sent.iter().map(|r| r.prompt.len()).collect::<Vec<_>>(), other.iter().map(|r| r.prompt.len()).collect::<Vec<_>>());
}

/// A recorded dataset run keeps each send's recorded prompt and output
/// length; a failed send, which recorded neither, draws both (its prompt
/// never recurs, so no other send's length stands in for it).
#[test]
fn a_recorded_dataset_run_keeps_what_was_recorded() {
    let sends: Vec<RecordedSend> = (0..40u64)
        .map(|i| RecordedSend {
            index: i,
            stage: 0,
            send_us: i * 50_000,
            input_tokens: if i % 10 == 9 { 0 } else { 30 + i as u32 },
            output_tokens: (i % 10 != 9).then_some(7 + i as u32),
            failed: i % 10 == 9,
        })
        .collect();
    let run = Reproduction { config: dataset_config(), measured: dataset_lengths(), recorded: Some(sends.clone()) };
    let mut stream = run.stream(1).unwrap();
    let sent = drive(stream.as_mut(), Micros::from_ms(100));
    assert_eq!(sent.len(), 40);
    for (r, s) in sent.iter().zip(&sends) {
        assert_eq!(r.arrival, Micros(s.send_us));
        if s.failed {
            assert!((20..=1800).contains(&r.prompt.len()) && (5..=900).contains(&r.max_output_tokens), "{r:?}");
        } else {
            assert_eq!((r.prompt.len(), r.max_output_tokens), (s.input_tokens, s.output_tokens.unwrap()));
        }
    }
    let prompts = run.prompts(1).unwrap();
    assert_eq!(prompts.prompt_cycle(), None);
    assert!(!prompts.fixed_output());
    assert!((prompts.mean_output_tokens() - dataset_lengths().output.unwrap().mean()).abs() < 1e-9);
}

/// A `total_count` left unset (omitted, or null as inference-perf writes
/// its default) is the largest stage's request count plus one, as
/// inference-perf sets it: no drawn length recurs within a stage.
#[test]
fn an_unset_total_count_covers_the_largest_stage() {
    let drawn = drawn_config("random");
    for unset in ["", "\n    total_count: null"] {
        let text = format!(
            "api:\n  type: completion\ndata:\n  type: random\n  input_distribution:\n    min: 50\n    max: 400\n    mean: 200\n    std_dev: 80{unset}\n  \
             output_distribution:\n    min: 5\n    max: 60\n    mean: 20\n    std_dev: 10{unset}\nload:\n  type: poisson\n  stages:\n  \
             - {{rate: 20, duration: 6}}\n  - {{rate: 5, duration: 2}}\n"
        );
        let c = InferencePerfConfig::from_yaml_str(&text).unwrap();
        let Data::Random(io) = &c.data else { panic!("random") };
        assert_eq!((io.input.total_count, io.output.total_count), (Some(121), Some(121)), "{unset:?}");
        let prompts = StagePrompts::new(&c.data, &MeasuredLengths::default(), 5).unwrap();
        assert_eq!(prompts.prompt_cycle(), Some(121));
    }
    let Data::Random(io) = &drawn.data else { panic!("random") };
    assert_eq!(io.input.total_count, Some(30), "a count given stays");
}

/// A sweep replaces the configured stages with those it generates at run
/// time: parsed, it has none, and cannot be run until a recorded run's
/// reports fill them in; inference-perf's refusals are BLIS's.
#[test]
fn a_sweep_has_no_stages_until_a_run_records_them() {
    let sweep = CONFIG.replace("  num_workers: 224", "  sweep: {type: linear, num_stages: 4, stage_duration: 120}\n  num_workers: 224");
    let c = InferencePerfConfig::from_yaml_str(&sweep).unwrap();
    assert!(c.load.stages.is_empty());
    assert_eq!(
        c.load.sweep,
        Some(Sweep { probe_requests: 2000, probe_timeout_s: 60.0, closed_loop_probe: false, num_stages: 4, stage_duration: 120.0 })
    );
    let e = c.check_runnable().unwrap_err().to_string();
    assert!(e.contains("load.sweep") && e.contains("load.stages") && e.contains("blis validate"), "{e}");
    let run = Reproduction { config: c.clone(), measured: MeasuredLengths::default(), recorded: None };
    assert!(crate::open(&crate::WorkloadInput::InferencePerf(Box::new(run)), &crate::OpenOptions::default()).is_err());
    let mut filled = c;
    filled.load.stages = vec![Stage { rate: 3.0, duration: 120.0, concurrency: None }];
    assert_eq!(filled.check_runnable(), Ok(()));
    for bad in [sweep.replace("stage_duration: 120", "stage_duration: 0"), sweep.replace("num_stages: 4", "num_stages: 0")] {
        let e = InferencePerfConfig::from_yaml_str(&bad).unwrap_err().to_string();
        assert!(e.contains("load.sweep") && e.contains("at least one stage"), "{e}");
    }
    let concurrent = "load:\n  type: concurrent\n  stages: []\n  sweep: {type: linear}\n";
    let e =
        InferencePerfConfig::from_yaml_str(&format!("{}{concurrent}", &CONFIG[..CONFIG.find("load:").unwrap()])).unwrap_err().to_string();
    assert!(e.contains("load.sweep") && e.contains("concurrent"), "{e}");
    for (bad, field) in [
        ("num_stages: 4", "num_stages: 4, num_requests: 100000000000"),
        ("num_stages: 4", "num_stages: 4, timeout: 0"),
        ("num_stages: 4", "num_stages: 4, timeout: .nan"),
    ]
    .map(|(from, to)| (sweep.replace(from, to), if to.contains("timeout") { "load.sweep.timeout" } else { "load.sweep.num_requests" }))
    {
        let e = InferencePerfConfig::from_yaml_str(&bad).unwrap_err().to_string();
        assert!(e.contains(field) && e.lines().count() == 1, "{e}");
    }
}

/// The probe burst a sweep sends first, as a stage: `num_requests` within
/// 5 s; none for the closed-loop ladder (`probe`) or zero requests.
#[test]
fn a_sweeps_probe_is_its_requests_within_five_seconds() {
    let sweep = |fields: &str| {
        let yaml = CONFIG.replace("  num_workers: 224", &format!("  sweep: {{type: linear{fields}}}\n  num_workers: 224"));
        InferencePerfConfig::from_yaml_str(&yaml).unwrap().load.sweep.unwrap()
    };
    let default = sweep("");
    assert_eq!((default.probe_requests, default.probe_timeout_s), (2000, 60.0), "inference-perf's defaults");
    let probe = default.probe_stage().unwrap();
    assert_eq!((probe.rate, probe.duration, probe.num_requests()), (400.0, 5.0, 2000));
    for n in [1u64, 3, 7, 33, 999] {
        assert_eq!(sweep(&format!(", num_requests: {n}, timeout: 20")).probe_stage().unwrap().num_requests(), n);
    }
    assert_eq!(sweep(", num_requests: 0").probe_stage(), None);
    let ladder = sweep(", probe: {start_concurrency: 4}");
    assert!(ladder.closed_loop_probe && ladder.probe_stage().is_none());
}

/// A sweep over the stages `stages`, its probe `probe` (sweep fields).
fn sweep_config(probe: &str, stages: Vec<Stage>) -> InferencePerfConfig {
    let text = CONFIG.replace("  num_workers: 224", &format!("  sweep: {{type: linear, {probe}}}\n  num_workers: 224"));
    let mut c = InferencePerfConfig::from_yaml_str(&text).unwrap();
    c.load.stages = stages;
    c
}

/// A sweep first sends its probe burst (stage −1): `num_requests` within
/// 5 s from 1 s, at the times an explicit first stage of that rate would
/// be sent, each cancelled `timeout` after the probe's start; stage 0
/// starts once the probe has drained, without the interval, its prompts
/// from the start of the cycle. A timeout shorter than the burst sends
/// only what came before it.
#[test]
fn a_sweep_sends_its_probe_first_and_cancels_what_is_left_at_its_timeout() {
    let stage = Stage { rate: 8.0, duration: 30.0, concurrency: None };
    let c = sweep_config("num_requests: 50, timeout: 20", vec![stage]);
    let sent = drive(&mut StagedWorkload::new(&c, &MeasuredLengths::default(), 4).unwrap(), Micros::from_secs(30));
    let (probe, stage0): (Vec<&Request>, Vec<&Request>) = sent.iter().partition(|r| r.meta.stage == PROBE_STAGE);
    assert_eq!((probe.len(), stage0.len()), (50, 240));
    let cancel = Micros::from_secs(21);
    assert!(probe.iter().all(|r| r.meta.cancel_at == Some(cancel) && (Micros::from_secs(1)..=Micros::from_secs(6)).contains(&r.arrival)));
    assert!(stage0.iter().all(|r| r.meta.stage == 0 && r.meta.cancel_at.is_none()));
    // Every probe request ends at the cancellation (30 s of service is longer): stage 0 starts then, plus its 1 s.
    assert!(stage0[0].arrival > cancel + Micros::from_secs(1), "{:?}", stage0[0].arrival);
    assert_eq!(stage0[0].prompt, probe[0].prompt, "stage 0 restarts the prompt cycle");

    // The same sends as an explicit first stage of 10 req/s for 5 s.
    let mut explicit = c.clone();
    explicit.load.sweep = None;
    explicit.load.stages = vec![Stage { rate: 10.0, duration: 5.0, concurrency: None }, stage];
    let reference = drive(&mut StagedWorkload::new(&explicit, &MeasuredLengths::default(), 4).unwrap(), Micros::from_secs(30));
    let first: Vec<(Micros, u32)> = reference.iter().filter(|r| r.meta.stage == 0).map(|r| (r.arrival, r.prompt.len())).collect();
    assert_eq!(probe.iter().map(|r| (r.arrival, r.prompt.len())).collect::<Vec<_>>(), first);

    // A 2 s timeout: the probe sends what falls before 3 s, and nothing after.
    let short = sweep_config("num_requests: 50, timeout: 2", vec![Stage { rate: 8.0, duration: 30.0, concurrency: None }]);
    let sent = drive(&mut StagedWorkload::new(&short, &MeasuredLengths::default(), 4).unwrap(), Micros::from_secs(30));
    let probe: Vec<&Request> = sent.iter().filter(|r| r.meta.stage == PROBE_STAGE).collect();
    assert_eq!(probe.len(), first.iter().filter(|(t, _)| *t < Micros::from_secs(3)).count());
    assert!((12..=30).contains(&probe.len()), "about 2 s of 10 req/s: {}", probe.len());
    // The closed-loop probe is not simulated: stage 0 comes first.
    let ladder = sweep_config("probe: {start_concurrency: 2}", vec![Stage { rate: 8.0, duration: 30.0, concurrency: None }]);
    let sent = drive(&mut StagedWorkload::new(&ladder, &MeasuredLengths::default(), 4).unwrap(), Micros::from_secs(30));
    assert!(sent.len() == 240 && sent.iter().all(|r| r.meta.stage == 0));
}

/// A recorded sweep replays its stages' sends after the probe, which it
/// simulates as the staged run sends it (the same times and prompts): the
/// probe's requests take the first ids, no recorded row, and the recorded
/// sends follow two seconds after the probe's cancellation.
#[test]
fn a_recorded_sweep_replays_its_stages_after_the_simulated_probe() {
    let stage = Stage { rate: 8.0, duration: 30.0, concurrency: None };
    let c = sweep_config("num_requests: 40, timeout: 60", vec![stage]);
    let sends: Vec<RecordedSend> = (0..20u64)
        .map(|i| RecordedSend { index: i, stage: 0, send_us: (19 - i) * 100_000, input_tokens: 600, output_tokens: None, failed: false })
        .collect();
    let run = Reproduction { config: c.clone(), measured: MeasuredLengths::default(), recorded: Some(sends) };
    let order = run.send_order(7);
    assert_eq!(order.len(), 60);
    assert!(order[..40].iter().all(Option::is_none));
    assert_eq!(
        order[40..].iter().map(|i| i.unwrap()).collect::<Vec<_>>(),
        (0..20).rev().collect::<Vec<_>>(),
        "recorded sends in send order"
    );
    assert_eq!(run.expected_requests(7), 60);
    let sent = drive(run.stream(7).unwrap().as_mut(), Micros::from_secs(1));
    assert_eq!(sent.iter().map(|r| r.id.0).collect::<Vec<_>>(), (0..60).collect::<Vec<_>>());
    let staged = drive(&mut StagedWorkload::new(&c, &MeasuredLengths::default(), 7).unwrap(), Micros::from_secs(1));
    let probe = |rs: &[Request]| {
        rs.iter().filter(|r| r.meta.stage == PROBE_STAGE).map(|r| (r.arrival, r.prompt.clone(), r.meta.cancel_at)).collect::<Vec<_>>()
    };
    assert_eq!(probe(&sent), probe(&staged));
    assert_eq!(probe(&sent).len(), 40);
    let zero = Micros::from_secs(1 + 60 + 2);
    assert_eq!(
        sent[40..].iter().map(|r| r.arrival).collect::<Vec<_>>(),
        (0..20u64).map(|i| zero + Micros(i * 100_000)).collect::<Vec<_>>()
    );
    assert!(sent[40..].iter().all(|r| r.meta.stage == 0 && r.prompt.len() == 600));
}
