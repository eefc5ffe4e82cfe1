//! Anomaly detection (cluster-policy-plan §D.8): failure modes a policy
//! should suppress, counted while the simulation runs.
//!
//! * **Priority inversion**: a request starts (leaves an instance's wait
//!   queue to run) while a request of a *more urgent SLO class* waits in the
//!   same queue. Urgency is intrinsic to the class ([`crate::slo`]), not the
//!   priority a policy assigned, so a policy that inverts priorities is
//!   caught. Requests a step admits together are judged against the queue
//!   the step leaves behind, so admitting both of two requests is never an
//!   inversion.
//! * **Head-of-line blocking**: a request is delivered to an instance whose
//!   wait queue is non-empty (it must wait behind others) while another
//!   instance has an empty wait queue and a free batch seat: a wait the
//!   routing decision could have avoided. Judged on the instances' true
//!   state, not the router's snapshots.
//!
//! Cost: O(urgency levels) per started request, O(instances) per delivery;
//! no allocation once the tables have grown to the run's size.

use blis_engine::instance::{Instance, QueueChange, QueueEvent};
use blis_engine::request::RequestRecord;
use rustc_hash::FxHashMap;

use crate::slo::SloClasses;

/// Counts priority inversions and head-of-line blocking events.
pub(crate) struct AnomalyDetector {
    classes: SloClasses,
    levels: usize,
    // waiting[instance · levels + urgency]: requests waiting per urgency rank.
    waiting: Vec<u32>,
    waiting_ids: FxHashMap<u64, (u32, u16)>,
    started: Vec<(u32, u16)>,
    pub priority_inversions: u64,
    pub hol_blocking_events: u64,
}

impl AnomalyDetector {
    pub fn new(classes: SloClasses, instances: usize) -> AnomalyDetector {
        let levels = usize::from(classes.levels());
        AnomalyDetector {
            classes,
            levels,
            waiting: vec![0; instances * levels],
            waiting_ids: FxHashMap::default(),
            started: Vec::new(),
            priority_inversions: 0,
            hol_blocking_events: 0,
        }
    }

    fn slot(&self, instance: u32, rank: u16) -> usize {
        instance as usize * self.levels + usize::from(rank)
    }

    /// Tracks the wait queues (not needed, and skipped, when every class is
    /// equally urgent: no inversion is possible).
    pub fn on_queue(&mut self, e: &QueueEvent) {
        if self.levels == 1 {
            return;
        }
        let rank = self.classes.urgency(e.meta.slo_class);
        let slot = self.slot(e.instance, rank);
        match e.change {
            QueueChange::Enqueued => {
                self.waiting[slot] += 1;
                self.waiting_ids.insert(e.id.0, (e.instance, rank));
            }
            QueueChange::Scheduled => {
                self.waiting[slot] -= 1;
                self.waiting_ids.remove(&e.id.0);
                self.started.push((e.instance, rank));
            }
        }
    }

    /// A request ended; if it ended while waiting (client timeout), it leaves the queue.
    pub fn on_finish(&mut self, r: &RequestRecord) {
        self.on_evict(r.id);
    }

    /// Judges the requests started by the event just processed against the
    /// queues it left behind.
    pub fn settle(&mut self) {
        for k in 0..self.started.len() {
            let (instance, rank) = self.started[k];
            let base = instance as usize * self.levels;
            if self.waiting[base..base + usize::from(rank)].iter().any(|&n| n > 0) {
                self.priority_inversions += 1;
            }
        }
        self.started.clear();
    }

    /// A request is about to be delivered to `target`; `candidates` are
    /// the instances it could have gone to.
    pub fn on_deliver(&mut self, target: usize, instances: &[Instance], candidates: &[u32]) {
        if instances[target].queue_depth() == 0 {
            return;
        }
        let idle = |inst: &Instance| inst.queue_depth() == 0 && inst.batch_size() < inst.config().scheduler.max_num_seqs;
        if candidates.iter().any(|&j| j as usize != target && idle(&instances[j as usize])) {
            self.hol_blocking_events += 1;
        }
    }

    /// Makes room for instance slots up to `instances`.
    pub fn ensure(&mut self, instances: usize) {
        if instances * self.levels > self.waiting.len() {
            self.waiting.resize(instances * self.levels, 0);
        }
    }

    /// A waiting request was taken away from its instance (a drain): it
    /// leaves that queue.
    pub fn on_evict(&mut self, id: blis_engine::request::RequestId) {
        if let Some((instance, rank)) = self.waiting_ids.remove(&id.0) {
            let slot = self.slot(instance, rank);
            self.waiting[slot] -= 1;
        }
    }
}
