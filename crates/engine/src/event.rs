//! The event queue and the total order of simultaneous events.
//!
//! Events are ordered by `(time, class, sequence)`. The class order is written
//! down once, in [`EventClass`]; the sequence number is assigned at push time,
//! so two events of the same class at the same instant run in the order they
//! were scheduled. Nothing about the order depends on hashing or on the
//! payload, which is what makes a run reproducible bit for bit.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::Micros;

/// Which kind of event this is; decides the order of events at the same
/// instant (lower runs first). The order is the one in BLIS's cluster design:
/// control-plane events precede instance events, so a request routed at time
/// `t` is visible to the instance before the instance's own step at `t`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum EventClass {
    /// A request reaches the cluster (before admission).
    ClusterArrival = 0,
    /// An admission decision is applied.
    Admission = 1,
    /// A routing decision is applied.
    Routing = 2,
    /// A request reaches an instance, or enters its wait queue after the
    /// arrival-to-queue delay.
    InstanceArrival = 3,
    /// A scheduler step finishes (and the next one starts).
    StepCompletion = 4,
    /// A request leaves: completion side effects such as a client timeout or
    /// the release of a follow-up round.
    RequestCompletion = 5,
    /// A periodic refresh of the control plane's instance snapshots (a
    /// background event: it sees the state after everything else at its instant).
    SnapshotRefresh = 6,
    /// An autoscaler's chore: a metrics scrape, a scaling decision, a
    /// replica's lifecycle step (a background event, after everything else
    /// at its instant).
    ScalingTick = 7,
}

/// The ordering key of one event.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventKey {
    /// When the event fires.
    pub time: Micros,
    /// Tie-breaker between different kinds of simultaneous events.
    pub class: EventClass,
    /// Tie-breaker between simultaneous events of one class: push order.
    pub seq: u64,
}

struct Entry<P> {
    key: EventKey,
    payload: P,
}

impl<P> PartialEq for Entry<P> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<P> Eq for Entry<P> {}
impl<P> PartialOrd for Entry<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for Entry<P> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the smallest key.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// A min-priority queue of events keyed by [`EventKey`].
///
/// Guarantees: `pop` returns events in strictly increasing key order; keys are
/// unique because every push gets a fresh sequence number.
pub struct EventQueue<P> {
    heap: BinaryHeap<Entry<P>>,
    next_seq: u64,
}

impl<P> Default for EventQueue<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P> EventQueue<P> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0 }
    }

    /// Schedules `payload` at `time` with the given class; returns its key.
    pub fn push(&mut self, time: Micros, class: EventClass, payload: P) -> EventKey {
        let key = EventKey { time, class, seq: self.next_seq };
        self.next_seq += 1;
        self.heap.push(Entry { key, payload });
        key
    }

    /// The key of the next event, if any.
    pub fn peek_key(&self) -> Option<EventKey> {
        self.heap.peek().map(|e| e.key)
    }

    /// The next event, without removing it.
    pub fn peek(&self) -> Option<(EventKey, &P)> {
        self.heap.peek().map(|e| (e.key, &e.payload))
    }

    /// Removes and returns the next event.
    pub fn pop(&mut self) -> Option<(EventKey, P)> {
        self.heap.pop().map(|e| (e.key, e.payload))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_class_then_push_order() {
        let mut q = EventQueue::new();
        q.push(Micros(10), EventClass::StepCompletion, "step@10");
        q.push(Micros(10), EventClass::InstanceArrival, "arrival@10 first");
        q.push(Micros(5), EventClass::SnapshotRefresh, "refresh@5");
        q.push(Micros(10), EventClass::InstanceArrival, "arrival@10 second");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, p)| p)).collect();
        assert_eq!(order, ["refresh@5", "arrival@10 first", "arrival@10 second", "step@10"]);
    }
}
