//! Named behaviours checked against hand-computed expectations.

use std::sync::Arc;

use blis_engine::latency::Blackbox;
use blis_engine::request::{DropReason, Outcome, Request, RequestId, RequestMeta, TokenRun, TokenSeq, extend_block_hashes};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;

use crate::harness::{run_checked, run_checked_with};

fn cfg(blocks: u64, seqs: u32, budget: u32, caching: bool) -> InstanceConfig {
    InstanceConfig { enable_prefix_caching: caching, ..InstanceConfig::basic(seqs, budget, 100_000, blocks) }
}

fn req(id: u64, arrival_us: u64, prompt: TokenSeq, out: u32) -> Request {
    Request {
        id: RequestId(id),
        arrival: Micros(arrival_us),
        prompt,
        max_output_tokens: out,
        output_seed: 1 << 50 | id,
        meta: RequestMeta::default(),
    }
}

/// Two requests, blackbox α = [50, 1, 7], β = [1000, 10, 100]:
///
/// * R0 (prompt 100, 3 tokens) arrives at 0, is enqueued at 0 + 50 + 100 = 150 and
///   prefilled alone: 1000 + 10·100 = 2000 µs → token 1 at 2150 + 1·7 = 2157.
/// * R1 (prompt 50, 2 tokens) arrives at 500, enqueued at 500 + 50 + 50 = 600,
///   waits for the step in flight. At 2150: R0 decode + R1 prefill =
///   1000 + 10·50 + 100·1 = 1600 µs → 3750. R0 token 2 at 3750 + 14 = 3764,
///   R1 token 1 at 3750 + 7 = 3757.
/// * At 3750: two decodes, 1000 + 200 = 1200 µs → 4950. R0 token 3 at 4950 + 21
///   = 4971 (E2E 4971); R1 token 2 at 4950 + 14 = 4964 (E2E 4464).
#[test]
fn hand_computed_two_request_timeline() {
    let model = Arc::new(Blackbox { alpha: [50.0, 1.0, 7.0], beta: [1000.0, 10.0, 100.0] });
    let reqs = vec![req(0, 0, TokenSeq::synthetic(1, 100), 3), req(1, 500, TokenSeq::synthetic(2, 50), 2)];
    let run = run_checked(cfg(1000, 8, 4096, false), model, reqs, None);
    run.assert_conservation();
    let r0 = &run.rec.records[&RequestId(0)];
    let r1 = &run.rec.records[&RequestId(1)];
    assert_eq!(run.rec.tokens[&RequestId(0)], [Micros(2157), Micros(3764), Micros(4971)]);
    assert_eq!(run.rec.tokens[&RequestId(1)], [Micros(3757), Micros(4964)]);
    assert_eq!((r0.ttft(), r0.e2e()), (Some(Micros(2157)), Some(Micros(4971))));
    assert_eq!((r1.ttft(), r1.e2e()), (Some(Micros(3257)), Some(Micros(4464))));
    assert_eq!((r0.enqueued, r1.enqueued), (Some(Micros(150)), Some(Micros(600))));
    // The engine, busy with R0's step, adds R1 to its scheduler when that
    // step ends (vLLM's QUEUED), and schedules it at once: queue time 0.
    assert_eq!((r1.queued, r1.scheduling_delay()), (Some(Micros(2150)), Some(Micros::ZERO)));
    assert_eq!(run.rec.steps.iter().map(|s| (s.0.as_us(), s.1.as_us())).collect::<Vec<_>>(), [(150, 2000), (2150, 1600), (3750, 1200)]);
    // Wait-queue events: R0 waits 150 → 150, R1 waits 600 → 2150.
    use blis_engine::instance::QueueChange::{Enqueued, Scheduled};
    assert_eq!(
        run.rec.queue,
        [
            (RequestId(0), Micros(150), Enqueued),
            (RequestId(0), Micros(150), Scheduled),
            (RequestId(1), Micros(600), Enqueued),
            (RequestId(1), Micros(2150), Scheduled)
        ]
    );
}

/// Chunked prefill: a 100-token prompt with a 40-token budget takes three
/// steps (40 + 40 + 20) and samples its first token only at the end of the third.
#[test]
fn chunked_prefill_spreads_a_prompt_over_steps() {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [100.0, 1.0, 1.0] });
    let run = run_checked(cfg(1000, 8, 40, false), model, vec![req(0, 0, TokenSeq::synthetic(1, 100), 2)], None);
    let tokens: Vec<u64> = run.rec.steps.iter().map(|s| s.3).collect();
    assert_eq!(tokens, [40, 40, 20, 1]);
    // Steps: 140, 140, 120 → first token at 400; decode 101 → 501.
    assert_eq!(run.rec.tokens[&RequestId(0)], [Micros(400), Micros(501)]);
}

/// With a tiny cache, requests are preempted (recompute) and still all complete.
#[test]
fn preemption_happens_and_recovers_when_the_cache_is_tiny() {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 1.0, 5.0] });
    // 20 usable 16-token blocks = 320 tokens; 8 requests of 64 + 64 tokens each need 8 blocks at the end.
    let reqs = (0..8).map(|i| req(i, i * 10, TokenSeq::synthetic(i, 64), 64)).collect();
    let run = run_checked(cfg(21, 8, 4096, true), model, reqs, None);
    run.assert_conservation();
    assert_eq!(run.completed().count(), 8);
    let preemptions: u32 = run.rec.records.values().map(|r| r.preemptions).sum();
    assert!(preemptions > 0, "expected preemptions with a tiny cache");
    // Every preemption puts its victim back in the queue: one extra Enqueued/Scheduled pair each.
    let enqueued = run.rec.queue.iter().filter(|e| e.2 == blis_engine::instance::QueueChange::Enqueued).count();
    assert_eq!(enqueued, 8 + preemptions as usize);
    assert_eq!(run.instance.stats().preemptions, u64::from(preemptions));
}

/// vLLM accepts more seats than KV blocks (`--max-num-seqs 256
/// --num-gpu-blocks-override 8`): the cache, not the seat count, bounds the
/// batch, and every request still completes.
#[test]
fn more_seats_than_blocks_runs_with_the_cache_as_the_limit() {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 1.0, 5.0] });
    // 7 usable 16-token blocks; each request needs 2 blocks at its end (20 + 12 tokens).
    let reqs = (0..12).map(|i| req(i, 0, TokenSeq::synthetic(i, 20), 12)).collect();
    let run = run_checked(cfg(8, 256, 4096, false), model, reqs, None);
    run.assert_conservation();
    assert_eq!(run.completed().count(), 12);
    assert!(run.rec.steps.iter().all(|s| s.2 <= 7), "a running request holds at least one of the 7 usable blocks");
}

fn prefix_workload(shared: bool) -> Vec<Request> {
    (0..40)
        .map(|i| {
            let mut p = TokenSeq::new();
            p.push(TokenRun::synthetic(if shared { 7 } else { 100 + i }, 256));
            p.push(TokenRun::synthetic(1000 + i, 64));
            req(i, i * 50_000, p, 8)
        })
        .collect()
}

#[test]
fn a_prompt_hashed_by_the_caller_runs_exactly_as_one_the_instance_hashes() {
    let model = Arc::new(Blackbox { alpha: [10.0, 1.0, 0.0], beta: [1000.0, 5.0, 5.0] });
    // Shared and private prefixes, 1 ms apart, on a cache small enough to evict and preempt.
    let mut workload = prefix_workload(true);
    workload.extend(prefix_workload(false).into_iter().map(|r| Request { id: RequestId(r.id.0 + 40), ..r }));
    workload.sort_by_key(|r| (r.arrival, r.id));
    for r in &mut workload {
        r.arrival = Micros(r.arrival.0 / 50);
    }
    let own = run_checked(cfg(60, 16, 512, true), model.clone(), workload.clone(), None);
    let given = run_checked_with(cfg(60, 16, 512, true), model, workload, None, |inst, req, t, rec| {
        let mut hashes = Vec::new();
        extend_block_hashes(&req.prompt, req.output_seed, 0, 16, &mut hashes);
        inst.inject_hashed(req, t, &mut hashes, rec);
        assert!(hashes.is_empty(), "the instance hands back an emptied buffer");
    });
    assert!(own.instance.stats().preemptions > 0 && own.instance.stats().prefix_hit_tokens > 0);
    assert_eq!(own.rec.records, given.rec.records);
    assert_eq!(own.rec.tokens, given.rec.tokens);
    assert_eq!(own.instance.stats(), given.instance.stats());
}

#[test]
fn prefix_hits_increase_with_a_shared_prefix_and_are_zero_with_caching_off() {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 5.0, 5.0] });
    let hit_rate = |shared, caching| {
        let run = run_checked(cfg(4000, 16, 4096, caching), model.clone(), prefix_workload(shared), None);
        let s = run.instance.stats();
        (s.prefix_hit_tokens as f64 / s.prefix_query_tokens as f64, run)
    };
    let (shared, run_shared) = hit_rate(true, true);
    let (private, _) = hit_rate(false, true);
    let (off, _) = hit_rate(true, false);
    assert_eq!(off, 0.0);
    assert_eq!(private, 0.0);
    // 39 of 40 requests hit the 256-token prefix: 39·256 / (40·320) = 0.78.
    assert!((shared - 0.78).abs() < 1e-9, "{shared}");
    assert!(run_shared.completed().skip(1).all(|r| r.cached_prompt_tokens == 256));
}

#[test]
fn requests_that_can_never_run_are_dropped_with_a_reason() {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [100.0, 1.0, 1.0] });
    let mut c = cfg(11, 4, 64, false); // 10 usable blocks = 160 tokens
    c.scheduler.max_model_len = 1000;
    let reqs = vec![
        req(0, 0, TokenSeq::synthetic(1, 990), 20), // 1010 > max_model_len
        req(1, 1, TokenSeq::synthetic(2, 150), 20), // 170 tokens > 160 cached
        req(2, 2, TokenSeq::synthetic(3, 100), 20), // fits
    ];
    let run = run_checked(c, model, reqs, None);
    let outcome = |id| run.rec.records[&RequestId(id)].outcome;
    assert_eq!(outcome(0), Outcome::Dropped(DropReason::ExceedsMaxModelLen));
    assert_eq!(outcome(1), Outcome::Dropped(DropReason::ExceedsKvCapacity));
    assert_eq!(outcome(2), Outcome::Completed);
}

#[test]
fn client_timeout_aborts_and_frees_the_request() {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [10_000.0, 0.0, 0.0] });
    let mut c = cfg(1000, 1, 4096, false);
    c.client_timeout = Some(Micros(50_000));
    // One seat: R1 waits behind R0 (100 tokens × 10 ms) and gives up at 50 ms.
    let reqs = vec![req(0, 0, TokenSeq::synthetic(1, 16), 100), req(1, 0, TokenSeq::synthetic(2, 16), 5)];
    let run = run_checked(c, model, reqs, None);
    run.assert_conservation();
    let r0 = &run.rec.records[&RequestId(0)];
    let r1 = &run.rec.records[&RequestId(1)];
    assert_eq!(r0.outcome, Outcome::TimedOut);
    assert_eq!(r0.finished, Micros(50_000));
    assert_eq!(r1.outcome, Outcome::TimedOut);
    assert_eq!(r1.first_scheduled, None);
    assert_eq!(run.instance.kv().num_used_blocks(), 0);
}

/// A cancelled request ends at its cancellation when that comes before its
/// client's timeout, and at the timeout otherwise; one cancelled after it
/// finished is unaffected.
#[test]
fn a_cancellation_ends_a_request_like_an_earlier_timeout() {
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [10_000.0, 0.0, 0.0] });
    let cancelled = |id, cancel_ms| {
        let mut r = req(id, 0, TokenSeq::synthetic(id + 1, 16), 100);
        r.meta.cancel_at = Some(Micros::from_ms(cancel_ms));
        r
    };
    for (timeout_ms, cancel_ms, want_ms) in [(None, 30, 30), (Some(50), 30, 30), (Some(20), 30, 20)] {
        let mut c = cfg(1000, 1, 4096, false);
        c.client_timeout = timeout_ms.map(Micros::from_ms);
        let run = run_checked(c, model.clone(), vec![cancelled(0, cancel_ms), cancelled(1, 5_000)], None);
        run.assert_conservation();
        let (r0, r1) = (&run.rec.records[&RequestId(0)], &run.rec.records[&RequestId(1)]);
        assert_eq!(
            (r0.outcome, r0.finished),
            (Outcome::TimedOut, Micros::from_ms(want_ms)),
            "timeout {timeout_ms:?}, cancel {cancel_ms} ms"
        );
        match timeout_ms {
            // R1 ran after R0 gave up: 100 tokens of 10 ms end well before its cancellation at 5 s.
            None => assert_eq!(r1.outcome, Outcome::Completed),
            Some(t) => assert_eq!((r1.outcome, r1.finished), (Outcome::TimedOut, Micros::from_ms(t))),
        }
        assert_eq!(run.instance.kv().num_used_blocks(), 0);
    }
}

#[test]
fn an_abandoned_request_is_aborted_and_its_blocks_freed() {
    use blis_engine::instance::Instance;
    use blis_engine::metrics::Collector;
    let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 0.0, 0.0] });
    let mut inst = Instance::new(0, cfg(1000, 4, 4096, true), model).unwrap();
    let mut c = Collector::default();
    inst.inject(req(0, 0, TokenSeq::synthetic(1, 64), 100), Micros(0), &mut c);
    inst.inject(req(1, 0, TokenSeq::synthetic(2, 64), 3), Micros(0), &mut c);
    // Run a few steps, then the first client disconnects mid-generation.
    for _ in 0..6 {
        inst.process_next(&mut c);
    }
    let t = inst.next_event().unwrap().time;
    inst.abandon(RequestId(0), t, &mut c);
    inst.abandon(RequestId(99), t, &mut c); // unknown ids are ignored
    while inst.process_next(&mut c).is_some() {}
    inst.assert_consistent();
    assert_eq!((c.completed, c.timed_out), (1, 1));
    assert_eq!(inst.kv().num_used_blocks(), 0);
    assert!(inst.is_idle());
}

/// A model with a fixed step time and every overhead set, to check where each applies.
struct Overheads;

impl blis_engine::latency::LatencyModel for Overheads {
    fn name(&self) -> &'static str {
        "overheads"
    }
    fn step_time(&self, _batch: &blis_engine::latency::StepBatch<'_>) -> Micros {
        Micros(1000)
    }
    fn queueing_delay(&self, _input: &blis_engine::latency::QueueingInput) -> Micros {
        Micros(100)
    }
    fn output_token_overhead(&self) -> Micros {
        Micros(3)
    }
    fn token_emission_delay(&self) -> Micros {
        Micros(40)
    }
    fn completion_overhead(&self) -> Micros {
        Micros(500)
    }
}

/// One request (prompt 32, 3 tokens) arriving at 0: enqueued at 100, steps
/// end at 1100, 2100, 3100. Token k reaches the API at step end + 40 + 3·k:
/// 1143, 2146, 3149 (the emission delay shifts every token once, the per-token
/// overhead accumulates); finished = 3149 + 500.
#[test]
fn emission_delay_shifts_tokens_once_and_per_token_overhead_accumulates() {
    let reqs = vec![req(0, 0, TokenSeq::synthetic(3, 32), 3)];
    let run = run_checked(cfg(100, 4, 2048, false), Arc::new(Overheads), reqs, None);
    assert_eq!(run.rec.tokens[&RequestId(0)], [Micros(1143), Micros(2146), Micros(3149)]);
    let r = &run.rec.records[&RequestId(0)];
    assert_eq!((r.ttft(), r.e2e()), (Some(Micros(1143)), Some(Micros(3649))));
}

/// Fixed 1000 µs steps, no overheads. R0 (3 tokens) arrives at 0 and runs
/// steps [0, 1000), [1000, 2000), [2000, 3000). R1 (1 token) arrives at 500,
/// during the first step. Synchronously it joins the step at 1000 (token at
/// 2000); with async scheduling the step at 1000 was formed at 0, so R1
/// joins the step at 2000 (token at 3000). R0 is unaffected. Either way R1
/// reaches the scheduler (vLLM's `QUEUED`) when the engine's loop comes
/// round, at the boundary that lets it into a step, so its queue time
/// (vLLM's `request_queue_time`) is 0.
#[test]
fn async_scheduling_delays_admission_by_one_step() {
    for (async_scheduling, r1_token) in [(false, 2000), (true, 3000)] {
        let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 0.0, 0.0] });
        let mut c = cfg(100, 8, 2048, false);
        c.scheduler.async_scheduling = async_scheduling;
        let reqs = vec![req(0, 0, TokenSeq::synthetic(1, 16), 3), req(1, 500, TokenSeq::synthetic(2, 16), 1)];
        let run = run_checked(c, model, reqs, None);
        run.assert_conservation();
        assert_eq!(run.rec.tokens[&RequestId(0)], [Micros(1000), Micros(2000), Micros(3000)]);
        assert_eq!(run.rec.tokens[&RequestId(1)], [Micros(r1_token)], "async_scheduling = {async_scheduling}");
        let r1 = &run.rec.records[&RequestId(1)];
        let boundary = Micros(r1_token - 1000);
        assert_eq!(
            (r1.enqueued, r1.queued, r1.first_scheduled),
            (Some(Micros(500)), Some(boundary), Some(boundary)),
            "async_scheduling = {async_scheduling}"
        );
        assert_eq!(r1.scheduling_delay(), Some(Micros::ZERO));
        assert_eq!(run.rec.records[&RequestId(0)].scheduling_delay(), Some(Micros::ZERO), "R0 found the engine idle");
    }
}
