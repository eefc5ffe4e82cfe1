//! Client timeouts: a request whose client gave up (its deadline, or `abandon`) is aborted wherever it is.

use crate::request::{Outcome, RequestId};
use crate::time::Micros;

use super::{Instance, Observer, Status};

impl Instance {
    /// Drops the client deadlines at the head of `timeouts` whose request
    /// already ended (or was already aborted), which
    /// [`Instance::on_timeout`] would ignore: the next event is always one
    /// that does something, so an idle instance has no event, and a finished
    /// request's deadline cannot move the clock (or the end of a run) past
    /// the last thing that happened. Amortised O(log n) per request.
    pub(super) fn discard_stale_timeouts(&mut self) {
        while let Some((_, &(slot, id))) = self.timeouts.peek() {
            let live = self.slots.get(slot as usize).is_some_and(|l| l.id == id && !l.aborted);
            if live {
                break;
            }
            self.timeouts.pop();
        }
    }

    /// The client gave up on request `id` at `now` (for example it closed the
    /// connection): the server aborts it as it would at a client timeout. A
    /// request inside the step in flight is released when the step ends.
    /// Unknown or already finished ids are ignored. O(requests on the instance).
    pub fn abandon(&mut self, id: RequestId, now: Micros, obs: &mut dyn Observer) {
        self.advance_clock(now);
        if let Some(slot) = self.slots.iter().position(|l| l.id == id && !l.aborted) {
            self.on_timeout(slot as u32, id, obs);
        }
        self.discard_stale_timeouts();
    }

    pub(super) fn on_timeout(&mut self, slot: u32, id: RequestId, obs: &mut dyn Observer) {
        let Some(live) = self.slots.get_mut(slot as usize) else { return };
        // A finished request's slot is marked aborted until reused; a reused slot has another id.
        if live.id != id || live.aborted {
            return;
        }
        match live.status {
            Status::Arriving | Status::Loading => live.aborted = true,
            Status::Incoming => {
                self.incoming.retain(|&s| s != slot);
                self.finish(slot, Outcome::TimedOut, obs);
            }
            Status::Landed => {
                self.landed.retain(|&(s, _)| s != slot);
                self.finish(slot, Outcome::TimedOut, obs);
                self.resume();
            }
            Status::Waiting => {
                let key = live.key;
                let removed = self.waiting.remove(key, slot);
                debug_assert!(removed, "waiting request missing from the queue");
                self.finish(slot, Outcome::TimedOut, obs);
                self.resume();
            }
            Status::Running if live.in_step => live.aborted = true,
            Status::Running => {
                self.running.retain(|&s| s != slot);
                self.finish(slot, Outcome::TimedOut, obs);
                self.resume();
            }
            // Gone already (an aborted slot returned above).
            Status::Moved | Status::Free => {}
        }
    }
}
