//! Driving one instance with a workload: the single-instance event loop.

use crate::instance::{Instance, Observer, QueueEvent, StepEvent, TokenEvent};
use crate::request::{Request, RequestRecord};
use crate::time::Micros;

/// A lazy, arrival-ordered source of requests.
///
/// Guarantees expected of implementations: `peek_arrival` returns the arrival
/// time of the request `next_request` would return; arrivals never decrease;
/// a request released by `on_finish` (a follow-up round) arrives no earlier
/// than the finish that released it.
pub trait Workload {
    /// Arrival time of the next request, or `None` when no request is pending
    /// (more may still be released by `on_finish`).
    fn peek_arrival(&mut self) -> Option<Micros>;
    /// The next request.
    fn next_request(&mut self) -> Option<Request>;
    /// A request ended; session workloads release their next round here.
    fn on_finish(&mut self, _record: &RequestRecord) {}
}

/// Forwards instance callbacks to the user's observer and finishes to the workload.
struct Tee<'a> {
    obs: &'a mut dyn Observer,
    workload: &'a mut dyn Workload,
}

impl Observer for Tee<'_> {
    fn on_finish(&mut self, record: &RequestRecord) {
        self.obs.on_finish(record);
        self.workload.on_finish(record);
    }
    fn on_token(&mut self, token: &TokenEvent) {
        self.obs.on_token(token);
    }
    fn on_step(&mut self, step: &StepEvent<'_>) {
        self.obs.on_step(step);
    }
    fn on_queue(&mut self, event: &QueueEvent) {
        self.obs.on_queue(event);
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunEnd {
    /// Time of the last processed event (the horizon if the run was cut there).
    pub end: Micros,
    /// Requests handed to the instance.
    pub injected: u64,
    /// Requests still waiting when the run ended.
    pub queued: u32,
    /// Requests still running when the run ended.
    pub running: u32,
}

/// Runs `instance` on `workload` until both are exhausted or the next event
/// is past `horizon`. Arrivals precede instance events at the same instant.
pub fn run_single(
    instance: &mut Instance,
    workload: &mut dyn Workload,
    horizon: Option<Micros>,
    obs: &mut dyn Observer,
) -> RunEnd {
    let limit = horizon.unwrap_or(Micros::MAX);
    let mut end = Micros::ZERO;
    let mut injected = 0;
    loop {
        let arrival = workload.peek_arrival();
        let inst = instance.next_event().map(|k| k.time);
        let take_arrival = match (arrival, inst) {
            (None, None) => break,
            (Some(a), Some(i)) => a <= i,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let t = if take_arrival { arrival } else { inst }.unwrap_or(Micros::MAX);
        if t > limit {
            end = limit;
            break;
        }
        end = t;
        if take_arrival {
            let Some(req) = workload.next_request() else { break };
            injected += 1;
            instance.inject(req, t, &mut Tee { obs, workload });
        } else {
            instance.process_next(&mut Tee { obs, workload });
        }
    }
    let (queued, running) = instance.unfinished();
    RunEnd { end, injected, queued, running }
}

/// A workload backed by an iterator of requests already in arrival order.
pub struct IterWorkload<I: Iterator<Item = Request>> {
    iter: std::iter::Peekable<I>,
}

impl<I: Iterator<Item = Request>> IterWorkload<I> {
    /// Wraps an arrival-ordered iterator.
    pub fn new(iter: I) -> Self {
        IterWorkload { iter: iter.peekable() }
    }
}

impl<I: Iterator<Item = Request>> Workload for IterWorkload<I> {
    fn peek_arrival(&mut self) -> Option<Micros> {
        self.iter.peek().map(|r| r.arrival)
    }
    fn next_request(&mut self) -> Option<Request> {
        self.iter.next()
    }
}
