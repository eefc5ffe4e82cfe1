//! Instance snapshots: what the control plane sees of each instance, and how
//! stale it is (cluster-policy-plan §D.5.2).
//!
//! An [`InstanceSnapshot`] is an immutable value assembled at a decision
//! point. Its instance-reported fields follow a [`Refresh`] mode each:
//!
//! * `immediate`: read from the instance at every decision (a load balancer
//!   tracking connections);
//! * `periodic:<ms>`: re-read every interval, at simulated times `k·interval`
//!   (a Prometheus scrape): a background event of the gateway (see
//!   [`crate::gateway`]), whose class is last at its instant, so a refresh
//!   at `t` sees the state after every event at `t`. Background events never
//!   keep a run alive, and a refresh skips ahead to the last instant before
//!   the next event, since nothing changes in between;
//! * `on-demand`: re-read only when the control plane hears back from the
//!   instance, i.e. when one of its requests finishes (a load report
//!   piggy-backed on the response); frozen in between.
//!
//! The counts the router keeps itself (`in_flight`, `pending`) are always
//! current: the router knows what it dispatched.

use std::fmt;

use blis_engine::instance::Instance;
use blis_engine::time::Micros;
use serde::Serialize;

use crate::error::ConfigError;

/// What the control plane sees of one instance at a decision.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct InstanceSnapshot {
    /// Instance id.
    pub instance: u32,
    /// When the stalest field was read (equals the decision time when every field is immediate).
    pub timestamp: Micros,
    /// Requests in the wait queue (including those still in their arrival-to-queue delay).
    pub queue_depth: u32,
    /// Requests in the running batch.
    pub batch_size: u32,
    /// Fraction of usable KV blocks in use.
    pub kv_utilization: f64,
    /// Requests the router sent there that have not finished (always current).
    pub in_flight: u32,
    /// Requests the router sent there that have not arrived yet, i.e. still
    /// within the routing latency (always current).
    pub pending: u32,
    /// Requests the router sent there that `queue_depth` does not count yet:
    /// those sent since it was read, and those in transit when it was read
    /// (always current; `pending` when `queue_depth` is immediate). What
    /// vLLM's data-parallel load balancer adds to the waiting counts its
    /// coordinator last published.
    pub routed_unseen: u32,
}

impl InstanceSnapshot {
    /// Work the instance has or is about to get: queued + running + pending.
    pub fn effective_load(&self) -> u32 {
        self.queue_depth + self.batch_size + self.pending
    }
}

/// When an instance-reported snapshot field is re-read.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Refresh {
    /// At every decision.
    #[default]
    Immediate,
    /// Every interval (> 0), at multiples of the interval.
    Periodic(Micros),
    /// When one of the instance's requests finishes.
    OnDemand,
}

impl Refresh {
    /// Parses `immediate`, `on-demand` or `periodic:<ms>ms` (e.g. `periodic:100ms`).
    pub fn parse(text: &str) -> Result<Refresh, String> {
        let allowed = "allowed: immediate, on-demand, periodic:<N>ms (e.g. periodic:100ms)";
        match text.trim() {
            "immediate" => Ok(Refresh::Immediate),
            "on-demand" => Ok(Refresh::OnDemand),
            other => {
                let ms = other
                    .strip_prefix("periodic:")
                    .and_then(|v| v.trim().strip_suffix("ms"))
                    .ok_or_else(|| format!("`{other}`: {allowed}"))?;
                let interval =
                    ms.trim().parse::<f64>().ok().filter(|v| (0.001..=3_600_000.0).contains(v)).and_then(Micros::from_ms_f64).ok_or_else(
                        || format!("`{other}`: the interval must be a number of milliseconds in [0.001, 3600000] (up to an hour)"),
                    )?;
                Ok(Refresh::Periodic(interval))
            }
        }
    }
}

impl fmt::Display for Refresh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refresh::Immediate => f.write_str("immediate"),
            Refresh::OnDemand => f.write_str("on-demand"),
            Refresh::Periodic(t) => write!(f, "periodic:{}ms", t.as_ms_f64()),
        }
    }
}

impl Serialize for Refresh {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The instance-reported fields whose staleness is configurable.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// Requests in the wait queue.
    QueueDepth = 0,
    /// Requests in the running batch.
    BatchSize = 1,
    /// Fraction of KV blocks in use.
    KvUtilization = 2,
}

const FIELDS: [Field; 3] = [Field::QueueDepth, Field::BatchSize, Field::KvUtilization];

/// Refresh mode of every configurable snapshot field (default: all immediate).
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize)]
pub struct Observability {
    /// `queue_depth` (also what `predictive-slo` counts queued requests from).
    pub queue_depth: Refresh,
    /// `batch_size`.
    pub batch_size: Refresh,
    /// `kv_utilization`.
    pub kv_utilization: Refresh,
}

impl Observability {
    /// The accepted field names.
    pub const FIELD_NAMES: [&'static str; 3] = ["queue-depth", "batch-size", "kv-utilization"];

    fn get(&self, f: Field) -> Refresh {
        match f {
            Field::QueueDepth => self.queue_depth,
            Field::BatchSize => self.batch_size,
            Field::KvUtilization => self.kv_utilization,
        }
    }

    /// Sets the mode of a field named `name` (`queue-depth` or `queue_depth`, ...)
    /// from `mode` text; `path` locates the value in errors.
    pub fn set(&mut self, name: &str, mode: &str, path: &str) -> Result<(), ConfigError> {
        let refresh = Refresh::parse(mode).map_err(|m| ConfigError::new(path, m))?;
        let slot = match name.replace('_', "-").as_str() {
            "queue-depth" => &mut self.queue_depth,
            "batch-size" => &mut self.batch_size,
            "kv-utilization" => &mut self.kv_utilization,
            _ => return Err(ConfigError::unknown(path, "snapshot field", name, &Self::FIELD_NAMES)),
        };
        *slot = refresh;
        Ok(())
    }

    /// Applies `field=mode,field=mode` overrides (the `--snapshot-refresh` syntax).
    /// Each field at most once, as `--routing-scorers` takes each scorer once.
    pub fn apply_overrides(&mut self, text: &str, path: &str) -> Result<(), ConfigError> {
        let mut seen: Vec<String> = Vec::new();
        for part in text.split(',') {
            let (name, mode) = part
                .split_once('=')
                .ok_or_else(|| ConfigError::new(path, format!("`{part}` is not FIELD=MODE (e.g. kv-utilization=periodic:100ms)")))?;
            let field = name.trim().replace('_', "-");
            if seen.contains(&field) {
                return Err(ConfigError::new(path, format!("{field} given twice; give each field once")));
            }
            self.set(name.trim(), mode, path)?;
            seen.push(field);
        }
        Ok(())
    }
}

/// The router's own bookkeeping per instance: always current.
#[derive(Clone, Debug, Default)]
pub(crate) struct Dispatched {
    /// Routed and not finished.
    pub in_flight: Vec<u32>,
    /// Routed and not yet delivered (within the routing latency).
    pub pending: Vec<u32>,
}

#[derive(Copy, Clone, Debug, Default)]
struct Readings {
    queue_depth: u32,
    /// Routed there and not counted by `queue_depth` ([`InstanceSnapshot::routed_unseen`]).
    routed_unseen: u32,
    batch_size: u32,
    kv_utilization: f64,
    as_of: [Micros; 3],
}

/// Cached readings, their refresh schedule, and the snapshot buffer handed
/// to policies.
pub(crate) struct SnapshotStore {
    modes: [Refresh; 3],
    cached: Vec<Readings>,
    // Priorities waiting at each instance, captured with queue_depth when it is not immediate.
    profiles: Vec<Vec<f64>>,
    view: Vec<InstanceSnapshot>,
}

impl SnapshotStore {
    /// Readings of idle instances at time 0.
    pub fn new(obs: Observability, instances: &[Instance]) -> SnapshotStore {
        let modes = FIELDS.map(|f| obs.get(f));
        let mut store = SnapshotStore {
            modes,
            cached: vec![Readings::default(); instances.len()],
            profiles: vec![Vec::new(); instances.len()],
            view: vec![InstanceSnapshot::default(); instances.len()],
        };
        for f in FIELDS {
            for (i, inst) in instances.iter().enumerate() {
                store.capture(f, i, inst, Micros::ZERO, 0);
            }
        }
        store
    }

    /// Reads field `f` of instance `i` as of `at`, when `pending` requests
    /// routed there are still in transit.
    fn capture(&mut self, f: Field, i: usize, inst: &Instance, at: Micros, pending: u32) {
        let r = &mut self.cached[i];
        r.as_of[f as usize] = at;
        match f {
            Field::QueueDepth => {
                r.queue_depth = inst.queue_depth();
                r.routed_unseen = pending;
                let p = &mut self.profiles[i];
                p.clear();
                p.extend(inst.waiting_priorities());
            }
            Field::BatchSize => r.batch_size = inst.batch_size(),
            Field::KvUtilization => r.kv_utilization = inst.kv().usage(),
        }
    }

    /// The fields refreshed periodically.
    pub fn periodic_fields(&self) -> impl Iterator<Item = Field> + '_ {
        FIELDS.into_iter().filter(|&f| matches!(self.modes[f as usize], Refresh::Periodic(_)))
    }

    /// The refresh interval of a periodic field.
    pub fn interval(&self, f: Field) -> Micros {
        match self.modes[f as usize] {
            Refresh::Periodic(iv) => iv,
            _ => Micros::MAX,
        }
    }

    /// A new instance in slot `i` (adding slots up to it): its readings as of `now`.
    pub fn reset(&mut self, i: usize, inst: &Instance, now: Micros) {
        if i >= self.cached.len() {
            self.cached.resize(i + 1, Readings::default());
            self.profiles.resize(i + 1, Vec::new());
            self.view.resize(i + 1, InstanceSnapshot::default());
        }
        for f in FIELDS {
            self.capture(f, i, inst, now, 0);
        }
    }

    /// Re-reads field `f` of every instance, as of `at` (`dispatched`: what
    /// the router has sent each).
    pub fn refresh(&mut self, f: Field, instances: &[Instance], at: Micros, dispatched: &Dispatched) {
        for (i, inst) in instances.iter().enumerate() {
            self.capture(f, i, inst, at, dispatched.pending[i]);
        }
    }

    /// Instance `i` answered (a request finished): refreshes its on-demand fields.
    pub fn on_report(&mut self, i: usize, inst: &Instance, now: Micros, dispatched: &Dispatched) {
        for f in FIELDS {
            if self.modes[f as usize] == Refresh::OnDemand {
                self.capture(f, i, inst, now, dispatched.pending[i]);
            }
        }
    }

    /// The router sent a request to instance `i`.
    pub fn on_routed(&mut self, i: usize) {
        self.cached[i].routed_unseen = self.cached[i].routed_unseen.saturating_add(1);
    }

    /// Assembles the snapshots of the `candidates` (instance ids) for a
    /// decision at `now`. O(candidates).
    pub fn assemble(&mut self, now: Micros, instances: &[Instance], candidates: &[u32], dispatched: &Dispatched) {
        self.view.clear();
        for &id in candidates {
            let i = id as usize;
            let inst = &instances[i];
            let r = &self.cached[i];
            let mut timestamp = now;
            let mut read = |f: Field| {
                let live = self.modes[f as usize] == Refresh::Immediate;
                if !live {
                    timestamp = timestamp.min(r.as_of[f as usize]);
                }
                live
            };
            let (queue_depth, routed_unseen) =
                if read(Field::QueueDepth) { (inst.queue_depth(), dispatched.pending[i]) } else { (r.queue_depth, r.routed_unseen) };
            let batch_size = if read(Field::BatchSize) { inst.batch_size() } else { r.batch_size };
            let kv_utilization = if read(Field::KvUtilization) { inst.kv().usage() } else { r.kv_utilization };
            self.view.push(InstanceSnapshot {
                instance: id,
                timestamp,
                queue_depth,
                batch_size,
                kv_utilization,
                in_flight: dispatched.in_flight[i],
                pending: dispatched.pending[i],
                routed_unseen,
            });
        }
    }

    /// The snapshots last assembled, one per candidate.
    pub fn view(&self) -> &[InstanceSnapshot] {
        &self.view
    }

    /// Waiting requests at instance `i` with priority ≥ `priority`, as stale
    /// as `queue_depth` (live when it is immediate). O(queue).
    pub fn queued_at_or_above(&self, i: usize, priority: f64, instances: &[Instance]) -> u32 {
        let count = |it: &mut dyn Iterator<Item = f64>| it.filter(|&p| p >= priority).count() as u32;
        if self.modes[Field::QueueDepth as usize] == Refresh::Immediate {
            count(&mut instances[i].waiting_priorities())
        } else {
            count(&mut self.profiles[i].iter().copied())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_modes_parse_and_print() {
        assert_eq!(Refresh::parse("immediate"), Ok(Refresh::Immediate));
        assert_eq!(Refresh::parse("on-demand"), Ok(Refresh::OnDemand));
        assert_eq!(Refresh::parse("periodic:100ms"), Ok(Refresh::Periodic(Micros(100_000))));
        assert_eq!(Refresh::parse("periodic:0.5ms").unwrap().to_string(), "periodic:0.5ms");
        for bad in ["periodic:0ms", "periodic:-1ms", "periodic:NaNms", "periodic:100", "sometimes"] {
            assert!(Refresh::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overrides_name_unknown_fields_and_bad_modes() {
        let mut o = Observability::default();
        o.apply_overrides("kv-utilization=periodic:100ms,queue_depth=on-demand", "--snapshot-refresh").unwrap();
        assert_eq!(
            (o.kv_utilization, o.queue_depth, o.batch_size),
            (Refresh::Periodic(Micros(100_000)), Refresh::OnDemand, Refresh::Immediate)
        );
        let e = o.apply_overrides("kv=immediate", "--snapshot-refresh").unwrap_err();
        assert!(e.message.contains("queue-depth, batch-size, kv-utilization"), "{e}");
        assert!(o.apply_overrides("kv-utilization", "--snapshot-refresh").is_err());
        let twice = o.apply_overrides("queue-depth=immediate,queue_depth=on-demand", "--snapshot-refresh").unwrap_err();
        assert!(twice.message.contains("queue-depth given twice"), "{}", twice.message);
    }
}
