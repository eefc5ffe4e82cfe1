//! The load generator of `blis observe`: sends planned requests at their
//! arrival times with bounded concurrency, measures how late each send was
//! (schedule delay, inference-perf's methodology), and hands every finished
//! exchange to a sink as soon as it completes, so an interrupted run loses
//! nothing that finished.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use crate::client::{Exchange, ExchangeStatus, PromptContent, RunClock, Target, request_body, send};

/// One request to send.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned<M> {
    /// Intended send time, µs after the start of the run.
    pub arrival_us: u64,
    /// What to send.
    pub prompt: PromptContent,
    /// `max_tokens`.
    pub max_tokens: u32,
    /// Caller data carried to the sink (ids, labels, planned lengths).
    pub meta: M,
}

/// A finished request: the plan, what happened, and how late it was sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome<M> {
    /// The plan.
    pub planned: Planned<M>,
    /// The measurements.
    pub exchange: Exchange,
    /// `send time − intended send time`, µs (negative if early).
    pub schedule_delay_us: i64,
}

/// Where requests come from: an arrival-ordered plan that may also react to
/// results (multi-turn sessions release their next round when a round
/// finishes, possibly earlier than requests already planned).
pub trait Plan<M>: Send {
    /// Intended send time (µs after the start) of the next request, if one is
    /// planned; `None` while [`Plan::pending`] means "nothing until a result
    /// arrives", else the end.
    fn peek(&mut self) -> Option<u64>;
    /// The next request (the one [`Plan::peek`] announced).
    fn take(&mut self) -> Option<Planned<M>>;
    /// Whether more requests may be released by future results.
    fn pending(&self) -> bool;
    /// A request finished (successfully or not), `now_us` after the start.
    fn on_result(&mut self, _outcome: &Outcome<M>, _now_us: u64) {}
}

/// Receives outcomes in completion order.
pub trait Sink<M> {
    /// Records one outcome. An error stops the run.
    fn record(&mut self, outcome: &Outcome<M>) -> std::io::Result<()>;
}

/// Summary of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadSummary {
    /// Requests sent.
    pub sent: u64,
    /// Of which completed with status ok.
    pub ok: u64,
    /// Failed with an error status or a broken stream.
    pub errors: u64,
    /// Timed out.
    pub timeouts: u64,
    /// Whether the run was interrupted before the plan ended.
    pub interrupted: bool,
    /// Seconds from the start to the last send.
    pub send_duration_s: f64,
    /// Every schedule delay, µs, in completion order.
    pub schedule_delays_us: Vec<i64>,
}

/// Runs the plan against `target` through `http` (a client from
/// [`crate::client::http_builder`]). `interrupt` resolving stops dispatching;
/// requests in flight are still awaited (up to their timeout) and recorded.
pub async fn run<M: Clone + Send + 'static>(
    plan: &mut dyn Plan<M>,
    http: reqwest::Client,
    target: Arc<Target>,
    max_concurrency: usize,
    clock: RunClock,
    sink: &mut dyn Sink<M>,
    interrupt: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> std::io::Result<LoadSummary> {
    let permits = Arc::new(Semaphore::new(max_concurrency.max(1)));
    let (tx, mut rx) = mpsc::unbounded_channel::<Outcome<M>>();
    let mut summary =
        LoadSummary { sent: 0, ok: 0, errors: 0, timeouts: 0, interrupted: false, send_duration_s: 0.0, schedule_delays_us: Vec::new() };
    let mut in_flight = 0u64;
    let mut interrupt = interrupt;
    let start_us = clock.start_unix_us();
    let record = |o: &Outcome<M>, summary: &mut LoadSummary, sink: &mut dyn Sink<M>| -> std::io::Result<()> {
        summary.schedule_delays_us.push(o.schedule_delay_us);
        summary.send_duration_s = summary.send_duration_s.max(o.exchange.send_time_us.saturating_sub(start_us) as f64 / 1e6);
        match o.exchange.status {
            ExchangeStatus::Ok => summary.ok += 1,
            ExchangeStatus::Error => summary.errors += 1,
            ExchangeStatus::Timeout => summary.timeouts += 1,
        }
        sink.record(o)
    };
    loop {
        // Next planned send time, or wait for a result that may release one.
        let Some(due_us) = plan.peek() else {
            if plan.pending() && in_flight > 0 {
                let Some(o) = rx.recv().await else { break };
                in_flight -= 1;
                plan.on_result(&o, clock.now_unix_us() - clock.start_unix_us());
                record(&o, &mut summary, sink)?;
                continue;
            }
            break;
        };
        // Wait for it (recording results meanwhile; a result may release an
        // earlier request, so peek again after each) unless interrupted.
        let due = tokio::time::Instant::from_std(clock.instant_at(due_us));
        tokio::select! {
            biased;
            _ = &mut interrupt => {
                summary.interrupted = true;
                break;
            }
            Some(o) = rx.recv() => {
                in_flight -= 1;
                plan.on_result(&o, clock.now_unix_us() - clock.start_unix_us());
                record(&o, &mut summary, sink)?;
                continue;
            }
            _ = tokio::time::sleep_until(due) => {}
        }
        // Bounded concurrency: a full pipe delays the send (and shows as schedule delay).
        let permit = tokio::select! {
            biased;
            _ = &mut interrupt => {
                summary.interrupted = true;
                break;
            }
            p = permits.clone().acquire_owned() => p.ok(),
        };
        let (Some(permit), Some(planned)) = (permit, plan.take()) else { break };
        let body = request_body(&target, &planned.prompt, planned.max_tokens);
        let (http, target, tx) = (http.clone(), target.clone(), tx.clone());
        let intended = clock.start_unix_us() + planned.arrival_us;
        summary.sent += 1;
        in_flight += 1;
        tokio::spawn(async move {
            let exchange = send(&http, &target, &body, &clock).await;
            let schedule_delay_us = exchange.send_time_us as i64 - intended as i64;
            drop(permit);
            let _ = tx.send(Outcome { planned, exchange, schedule_delay_us });
        });
    }
    drop(tx);
    while let Some(o) = rx.recv().await {
        record(&o, &mut summary, sink)?;
    }
    Ok(summary)
}
