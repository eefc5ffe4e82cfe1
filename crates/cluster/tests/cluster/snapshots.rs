//! Periodic snapshot refresh is a background event of the driver: a
//! decision at `t` sees the reading of the last refresh instant strictly
//! before `t` (a refresh at `t` itself runs after everything else at `t`),
//! and the refreshes never keep a run alive.

use blis_cluster::Cluster;
use blis_cluster::trace::{AdmissionTrace, DecisionSink, RoutingTrace};
use blis_engine::driver::IterWorkload;
use blis_engine::instance::Observer;
use blis_engine::request::RequestRecord;
use blis_engine::time::Micros;
use proptest::prelude::*;
use serde_json::json;

use crate::harness::{Load, bundle, config, instance, spec_blackbox};

/// (decision time, timestamp of each candidate's snapshot).
#[derive(Default)]
struct Ages(Vec<(Micros, Vec<Micros>)>);

impl DecisionSink for Ages {
    fn admission(&mut self, _d: &AdmissionTrace<'_>) {}
    fn routing(&mut self, d: &RoutingTrace<'_>) {
        self.0.push((d.time, d.snapshots.iter().map(|s| s.timestamp).collect()));
    }
}

/// Requests that ended, and when the last one did.
#[derive(Default)]
struct Ends(u64, Micros);

impl Observer for Ends {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.0 += 1;
        self.1 = self.1.max(r.finished);
    }
}

/// The reading a decision at `t` sees with refreshes every `interval`: the
/// last refresh instant before `t`, or the initial reading at 0.
fn expected_reading(t: Micros, interval: Micros) -> Micros {
    if t == Micros::ZERO { Micros::ZERO } else { Micros((t.0 - 1) / interval.0 * interval.0) }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_periodic_reading_is_the_last_refresh_before_the_decision(
        interval_us in prop_oneof![Just(1u64), 1u64..2_000, 2_000u64..200_000],
        n in 1u32..=4,
        routing_latency_us in prop_oneof![Just(0u64), 1u64..5_000],
        seed in 0u64..500,
        rate in prop_oneof![Just(5.0f64), Just(200.0)],
    ) {
        let (requests, labels) = Load { rate, requests: 60, prompt: 128, output: 8, prefix: 0, groups: 1, seed }.requests(None);
        let doc = json!({"routing": "least-loaded", "snapshots": {"kv_utilization": format!("periodic:{}ms", interval_us as f64 / 1e3)}});
        let mut cfg = config(n, instance(2000, 16, 1024), spec_blackbox(), bundle(doc), labels);
        cfg.routing_latency = Micros(routing_latency_us);
        let mut ages = Ages::default();
        let mut ends = Ends::default();
        let end = {
            let mut cluster = Cluster::traced(cfg, &mut ages).unwrap();
            cluster.run(&mut IterWorkload::new(requests.into_iter()), None, &mut ends)
        };
        prop_assert_eq!(ends.0, 60);
        prop_assert_eq!(ages.0.len(), 60);
        let interval = Micros(interval_us);
        for (t, stamps) in &ages.0 {
            // Only the KV field is periodic; the others are read at the decision.
            let want = expected_reading(*t, interval);
            prop_assert!(stamps.iter().all(|&s| s == want), "decision at {t}: {stamps:?}, expected {want}");
        }
        // The run ends with its last request (the blackbox model has no
        // completion overhead), not at some later refresh.
        prop_assert_eq!(end.end, ends.1);
    }
}
