//! The simulation thread behind `blis serve`: the engine's event driver
//! ([`blis_engine::driver::Driver`], one instance behind the pass-through
//! control plane) stepped so that its simulated clock follows the wall
//! clock (optionally sped up), fed by HTTP handlers through a channel,
//! emitting each token when the simulated engine emits it.
//!
//! The engine itself stays pure; this thread is the only place that maps
//! simulated microseconds to wall-clock instants: sim time `t` happens at
//! `start + t / time_scale`. Requests enter the simulation at the simulated
//! instant corresponding to their wall-clock arrival, after every engine event
//! up to that instant has been processed ([`Driver::run_until`]), so the
//! simulated clock never goes backwards.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use blis_engine::driver::{Driver, PassThrough};
use blis_engine::event::{EventClass, EventQueue};
use blis_engine::instance::{Instance, Observer, TokenEvent};
use blis_engine::kv::events::KvEventBatch;
use blis_engine::request::{Outcome, Request, RequestId, RequestMeta, RequestRecord, TokenRun, TokenSeq, output_stream_seed};
use blis_engine::time::Micros;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot};

use super::metrics::PromMetrics;
use crate::kv_events::{Publisher, encode_batch};

/// What the simulation tells one request's HTTP handler.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// Output token `index` (1-based) reached the API.
    Token {
        /// 1-based token index.
        index: u32,
    },
    /// The request ended (boxed: a token event, far more common, stays small).
    Finished(Box<RequestRecord>),
}

/// A message from the HTTP side to the simulation thread.
pub enum Command {
    /// Start simulating a request now.
    Submit {
        /// Unique id.
        id: RequestId,
        /// Prompt token ids.
        prompt: Vec<u32>,
        /// Output tokens to generate.
        output_tokens: u32,
        /// Where to send its tokens.
        events: mpsc::UnboundedSender<StreamEvent>,
    },
    /// The client went away: abort the request.
    Abandon(RequestId),
    /// Render the Prometheus metrics.
    Metrics(oneshot::Sender<String>),
    /// vLLM's `reset_prefix_cache`: whether the cache was reset (refused
    /// while requests hold blocks).
    ResetPrefixCache(oneshot::Sender<bool>),
}

enum Emitted {
    Token(RequestId, u32),
    Finished(Box<RequestRecord>),
}

/// Collects what the instance emits while processing events.
#[derive(Default)]
struct Buffer {
    out: Vec<(Micros, Emitted)>,
    metrics: PromMetrics,
    /// Where KV events go, and the Unix time (s) of simulated time 0 and
    /// the time scale, to stamp them as vLLM does (wall-clock seconds).
    kv_events: Option<(Publisher, f64, f64)>,
}

impl Observer for Buffer {
    fn on_finish(&mut self, record: &RequestRecord) {
        self.metrics.record(record);
        self.out.push((record.finished, Emitted::Finished(Box::new(record.clone()))));
    }

    fn on_token(&mut self, token: &TokenEvent) {
        self.metrics.token(token);
        self.out.push((token.time, Emitted::Token(token.id, token.index)));
    }

    fn on_kv_events(&mut self, batch: &KvEventBatch<'_>) {
        if let Some((publisher, epoch_s, time_scale)) = &self.kv_events {
            publisher.publish(encode_batch(batch, epoch_s + batch.time.as_secs_f64() / time_scale));
        }
    }
}

/// Salt of the output-token streams of served requests.
pub const OUTPUT_SALT: u64 = 0x5e7e;

/// Processes every engine event at or before `now`; returns `now`.
fn catch_up(driver: &mut Driver<PassThrough>, buffer: &mut Buffer, now: Micros) -> Micros {
    driver.run_until(now, buffer);
    now
}

/// The wall-clock instant of simulated time `t` when sim time 0 was at
/// `start`; `None` when that instant is beyond what [`Instant`] can hold
/// (a tiny `time_scale` puts every event in the far future), i.e. never.
fn wall_at(start: Instant, t: Micros, time_scale: f64) -> Option<Instant> {
    let after = Duration::try_from_secs_f64(t.as_secs_f64() / time_scale).ok()?;
    start.checked_add(after)
}

/// Runs the simulation of `instance` until every command sender is dropped,
/// publishing its KV events through `kv_events` if given.
pub fn run(instance: Instance, time_scale: f64, model_name: String, commands: Receiver<Command>, kv_events: Option<Publisher>) {
    let mut driver = Driver::new(vec![instance], PassThrough);
    let start = Instant::now();
    let epoch_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let sim_now = || Micros((start.elapsed().as_secs_f64() * time_scale * 1e6) as u64);
    let mut streams: FxHashMap<RequestId, mpsc::UnboundedSender<StreamEvent>> = FxHashMap::default();
    let mut outbox: EventQueue<Emitted> = EventQueue::new();
    let mut buffer = Buffer { kv_events: kv_events.map(|p| (p, epoch_s, time_scale)), ..Buffer::default() };
    let mut clock = Micros::ZERO;
    loop {
        // 1. Catch the simulation up with the wall clock.
        clock = catch_up(&mut driver, &mut buffer, sim_now().max(clock));
        for (t, e) in buffer.out.drain(..) {
            outbox.push(t, EventClass::RequestCompletion, e);
        }
        // 2. Deliver what has reached the API.
        while outbox.peek_key().is_some_and(|k| k.time <= clock) {
            let Some((_, e)) = outbox.pop() else { break };
            match e {
                Emitted::Token(id, index) => {
                    if let Some(tx) = streams.get(&id) {
                        let _ = tx.send(StreamEvent::Token { index });
                    }
                }
                Emitted::Finished(record) => {
                    if let Some(tx) = streams.remove(&record.id) {
                        let _ = tx.send(StreamEvent::Finished(record));
                    }
                }
            }
        }
        // 3. Sleep until the next engine event or delivery, or a command.
        let next = [driver.next_event(), outbox.peek_key().map(|k| k.time)].into_iter().flatten().min();
        let command = match next.and_then(|t| wall_at(start, t, time_scale)) {
            Some(at) => match commands.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(c) => c,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match commands.recv() {
                Ok(c) => c,
                Err(_) => return,
            },
        };
        // Bring the engine up to the command's arrival instant before applying it.
        clock = catch_up(&mut driver, &mut buffer, sim_now().max(clock));
        match command {
            Command::Submit { id, prompt, output_tokens, events } => {
                let mut seq = TokenSeq::new();
                seq.push(TokenRun::Explicit(prompt.into()));
                let req = Request {
                    id,
                    arrival: clock,
                    prompt: seq,
                    max_output_tokens: output_tokens,
                    output_seed: output_stream_seed(id, OUTPUT_SALT),
                    meta: RequestMeta::default(),
                };
                streams.insert(id, events);
                driver.arrive(req, &mut buffer);
            }
            Command::Abandon(id) => {
                if streams.remove(&id).is_some() {
                    driver.fleet_mut().abandon(0, id, &mut buffer);
                }
            }
            Command::Metrics(reply) => {
                let _ = reply.send(buffer.metrics.render(&model_name, &driver.fleet().instances()[0]));
            }
            Command::ResetPrefixCache(reply) => {
                let _ = reply.send(driver.fleet_mut().reset_prefix_cache(0, &mut buffer));
            }
        }
        for (t, e) in buffer.out.drain(..) {
            // A request dropped on arrival, or aborted, has nobody left to tell.
            if let Emitted::Finished(r) = &e
                && matches!(r.outcome, Outcome::Dropped(_) | Outcome::TimedOut)
                && !streams.contains_key(&r.id)
            {
                continue;
            }
            outbox.push(t, EventClass::RequestCompletion, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_at_maps_sim_time_through_the_scale() {
        let start = Instant::now();
        assert_eq!(wall_at(start, Micros(2_000_000), 2.0), Some(start + Duration::from_secs(1)));
        assert_eq!(wall_at(start, Micros::ZERO, 1e-30), Some(start));
    }

    #[test]
    fn a_tiny_time_scale_puts_events_never_instead_of_panicking() {
        // 1 µs of simulated time at 1e-30 is 1e24 s of wall time: beyond Duration and Instant.
        assert_eq!(wall_at(Instant::now(), Micros(1), 1e-30), None);
        // 1e19 s fits a Duration (up to ~1.8e19 s) but not an Instant (~9.2e18 s on Linux).
        assert_eq!(wall_at(Instant::now(), Micros(1), 1e-25), None);
    }
}
