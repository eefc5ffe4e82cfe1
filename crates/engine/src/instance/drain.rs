//! What an autoscaler does to a replica: take its requests back (a drain), and slow its steps while it warms up.

use crate::request::Request;
use crate::time::Micros;

use super::{Evict, Instance, Status};

impl Instance {
    /// Takes requests away from the instance (a replica that is being
    /// removed): they are appended to `out` as they arrived, keep no
    /// progress, leave no record here, and free their KV blocks now (a
    /// request in the step in flight frees them when the step ends). A
    /// request whose client already gave up stays, to time out here.
    pub fn evict(&mut self, which: Evict, now: Micros, out: &mut Vec<Request>) {
        self.advance_clock(now);
        for slot in 0..self.slots.len() as u32 {
            let live = &mut self.slots[slot as usize];
            if live.aborted {
                continue;
            }
            let take = match live.status {
                Status::Arriving | Status::Incoming | Status::Waiting | Status::Loading | Status::Landed => true,
                Status::Running => which == Evict::All,
                Status::Moved | Status::Free => false,
            };
            if !take {
                continue;
            }
            out.push(live.req.clone());
            match live.status {
                // Released when its hand-off, its load or its step completes.
                Status::Arriving | Status::Loading => {
                    live.status = Status::Moved;
                    live.aborted = true;
                }
                Status::Running if live.in_step => {
                    live.status = Status::Moved;
                    live.aborted = true;
                }
                Status::Incoming => {
                    self.incoming.retain(|&s| s != slot);
                    self.live_count -= 1;
                    self.release(slot);
                }
                Status::Landed => {
                    self.landed.retain(|&(s, _)| s != slot);
                    self.live_count -= 1;
                    self.release(slot);
                }
                Status::Waiting => {
                    let key = live.key;
                    let removed = self.waiting.remove(key, slot);
                    debug_assert!(removed, "waiting request missing from the queue");
                    self.live_count -= 1;
                    self.release(slot);
                }
                _ => {
                    self.running.retain(|&s| s != slot);
                    self.live_count -= 1;
                    self.release(slot);
                }
            }
        }
        self.discard_stale_timeouts();
    }

    /// Multiplies every later step time by `factor` (≥ 1: a replica warming
    /// up, slower until its kernels are compiled and its CUDA graphs captured).
    pub fn set_step_slowdown(&mut self, factor: f64) {
        self.step_slowdown = factor;
    }
}
