//! A cap on requests in flight, as a load generator with N connections
//! imposes it (`vllm bench serve --max-concurrency`, inference-perf's
//! `concurrent` load type, `blis observe --max-concurrency`): a request due
//! while every slot is taken waits, and is sent the moment a request in
//! flight ends. Its latency counts from that send, as those clients
//! measure it; the wait is the client's, not the server's.

use blis_engine::driver::Workload;
use blis_engine::request::{Request, RequestRecord};
use blis_engine::time::Micros;

use crate::RequestSource;
use crate::error::WorkloadError;

/// The bookkeeping of a concurrency cap.
///
/// Guarantee: with a limit of N, at most N requests sent through the gate
/// are unfinished at any time, and a request is sent at its due time or, if
/// it had to wait, at the end of the request whose slot it takes.
#[derive(Clone, Debug, Default)]
pub struct ConcurrencyGate {
    limit: Option<u32>,
    in_flight: u32,
    /// When the latest request in flight ended: a waiting request is sent then.
    freed_at: Micros,
}

impl ConcurrencyGate {
    /// A gate letting at most `limit` requests be in flight (`None`: no cap).
    pub fn new(limit: Option<u32>) -> ConcurrencyGate {
        ConcurrencyGate { limit, ..ConcurrencyGate::default() }
    }

    /// Changes the cap (a new inference-perf stage); requests in flight stay.
    pub fn set_limit(&mut self, limit: Option<u32>) {
        self.limit = limit;
    }

    /// When a request due at `due` is sent: `None` while every slot is
    /// taken, else `due` or, if a slot only freed later, that moment.
    ///
    /// The simulator asks again after every request ends, in time order, so
    /// a due time before the latest end can only belong to a request that
    /// waited for it.
    pub fn send_time(&self, due: Micros) -> Option<Micros> {
        match self.limit {
            Some(n) if self.in_flight >= n => None,
            Some(_) => Some(due.max(self.freed_at)),
            None => Some(due),
        }
    }

    /// A request was sent (at [`ConcurrencyGate::send_time`]).
    pub fn on_send(&mut self) {
        self.in_flight += 1;
    }

    /// Sends the request due at `due`, which `take` hands over, if a slot is
    /// free: its arrival becomes the send time ([`ConcurrencyGate::send_time`]).
    pub fn send(&mut self, due: Option<Micros>, take: impl FnOnce() -> Option<Request>) -> Option<Request> {
        let sent = self.send_time(due?)?;
        let mut request = take()?;
        request.arrival = sent;
        self.on_send();
        Some(request)
    }

    /// A request sent through the gate ended at `at`.
    pub fn on_finish(&mut self, at: Micros) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.freed_at = self.freed_at.max(at);
    }
}

/// A request source whose requests are sent through a [`ConcurrencyGate`]:
/// the arrival of a request that waited for a slot is the moment it got one.
pub struct ConcurrencyLimited {
    inner: Box<dyn RequestSource>,
    gate: ConcurrencyGate,
}

impl ConcurrencyLimited {
    /// `inner` with at most `limit` requests in flight.
    pub fn new(inner: Box<dyn RequestSource>, limit: u32) -> ConcurrencyLimited {
        ConcurrencyLimited { inner, gate: ConcurrencyGate::new(Some(limit)) }
    }
}

impl Workload for ConcurrencyLimited {
    fn peek_arrival(&mut self) -> Option<Micros> {
        let due = self.inner.peek_arrival()?;
        self.gate.send_time(due)
    }

    fn next_request(&mut self) -> Option<Request> {
        let due = self.inner.peek_arrival();
        let inner = &mut self.inner;
        self.gate.send(due, || inner.next_request())
    }

    fn on_finish(&mut self, record: &RequestRecord) {
        self.gate.on_finish(record.finished);
        self.inner.on_finish(record);
    }
}

impl RequestSource for ConcurrencyLimited {
    fn take_error(&mut self) -> Option<WorkloadError> {
        self.inner.take_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::request::{Outcome, RequestId, RequestMeta, TokenSeq};
    use proptest::prelude::*;

    /// Requests due at the given times.
    struct Due(std::collections::VecDeque<Micros>, u64);

    impl Workload for Due {
        fn peek_arrival(&mut self) -> Option<Micros> {
            self.0.front().copied()
        }
        fn next_request(&mut self) -> Option<Request> {
            let arrival = self.0.pop_front()?;
            self.1 += 1;
            Some(Request {
                id: RequestId(self.1 - 1),
                arrival,
                prompt: TokenSeq::synthetic(1, 10),
                max_output_tokens: 1,
                output_seed: 0,
                meta: RequestMeta::default(),
            })
        }
    }

    impl RequestSource for Due {
        fn take_error(&mut self) -> Option<WorkloadError> {
            None
        }
    }

    fn ended(r: &Request, at: Micros) -> RequestRecord {
        RequestRecord::unserved(r, Some(0), Outcome::Completed, at)
    }

    proptest! {
        /// Driven as a server with per-request service times: never more than
        /// `limit` in flight, nothing sent before it was due, a request that
        /// waited sent exactly when another ended, and none left behind.
        #[test]
        fn at_most_limit_in_flight_and_waiters_go_when_a_slot_frees(
            gaps in prop::collection::vec(0u64..2_000, 1..60),
            services in prop::collection::vec(1u64..5_000, 60),
            limit in 1u32..6,
        ) {
            let mut t = 0;
            let due: Vec<Micros> = gaps.iter().map(|g| { t += g; Micros(t) }).collect();
            let mut w = ConcurrencyLimited::new(Box::new(Due(due.iter().copied().collect(), 0)), limit);
            let mut running: std::collections::BTreeMap<(Micros, u64), Request> = Default::default();
            let mut ends = std::collections::BTreeSet::new();
            let mut sent = Vec::new();
            let mut now = Micros::ZERO;
            loop {
                let next_end = running.keys().next().copied();
                match (w.peek_arrival(), next_end) {
                    (Some(a), end) if end.is_none_or(|(e, _)| a <= e) => {
                        let r = w.next_request().unwrap();
                        prop_assert!(r.arrival >= now, "sent at {:?}, before the present {now:?}", r.arrival);
                        now = r.arrival;
                        prop_assert!(running.len() < limit as usize, "more than {limit} in flight");
                        running.insert((r.arrival + Micros(services[r.id.0 as usize]), r.id.0), r.clone());
                        sent.push(r);
                    }
                    (_, Some(key)) => {
                        let r = running.remove(&key).unwrap();
                        now = key.0;
                        ends.insert(key.0);
                        w.on_finish(&ended(&r, key.0));
                    }
                    (_, None) => break,
                }
            }
            prop_assert_eq!(sent.len(), due.len());
            for r in &sent {
                let was_due = due[r.id.0 as usize];
                prop_assert!(r.arrival >= was_due);
                prop_assert!(r.arrival == was_due || ends.contains(&r.arrival), "request {} sent at {:?}, neither due nor at an end", r.id.0, r.arrival);
            }
        }
    }

    #[test]
    fn no_limit_changes_nothing() {
        let g = ConcurrencyGate::new(None);
        assert_eq!(g.send_time(Micros(5)), Some(Micros(5)));
        let mut g = ConcurrencyGate::new(Some(1));
        let one = || Due([Micros(0)].into_iter().collect(), 0).next_request();
        assert!(g.send(Some(Micros(0)), one).is_some());
        assert_eq!(g.send_time(Micros(5)), None);
        g.on_finish(Micros(9));
        assert_eq!(g.send_time(Micros(5)), Some(Micros(9)));
        assert_eq!(g.send_time(Micros(12)), Some(Micros(12)));
        assert!(g.send(Some(Micros(12)), one).is_some());
        assert_eq!(g.send(Some(Micros(13)), one), None, "the one slot is taken");
        g.set_limit(None);
        assert_eq!(g.send(Some(Micros(20)), one).map(|r| r.arrival), Some(Micros(20)), "no cap: every request goes when due");
    }
}
