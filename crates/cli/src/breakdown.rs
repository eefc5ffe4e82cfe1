//! Per-group metrics of a run: per client and load stage (engine
//! [`Breakdown`]s; per tenant and per SLO class, with SLO attainment, are in
//! the cluster report), and client-perspective latencies when the workload
//! gives clients a network model. A dimension is measured only when the
//! workload has more than one value of it (one group would repeat the
//! overall numbers, at the memory cost of another copy of the samples).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use blis_engine::instance::Observer;
use blis_engine::metrics::{Breakdown, Distribution, GroupBy, GroupSummary};
use blis_engine::request::Labels;
use blis_engine::time::US_PER_MS;
use blis_workload::network::{ClientLatency, ClientSamples};
use serde::Serialize;

/// The breakdowns a run collects.
pub struct GroupObservers {
    groups: Vec<(&'static str, Breakdown)>,
}

impl GroupObservers {
    /// Breakdowns for the dimensions of `labels` with more than one value,
    /// plus stages when the workload has `stages` > 1.
    pub fn new(labels: &Labels, stages: u32) -> GroupObservers {
        let mut groups = Vec::new();
        for (name, by, n) in [
            ("client", GroupBy::Client, labels.clients.len()),
            ("stage", GroupBy::Stage, stages as usize),
        ] {
            if n > 1 {
                groups.push((name, Breakdown::new(by)));
            }
        }
        GroupObservers { groups }
    }

    /// The observers to fan callbacks out to.
    pub fn observers(&mut self) -> impl Iterator<Item = &mut dyn Observer> {
        self.groups.iter_mut().map(|(_, b)| b as &mut dyn Observer)
    }

    /// The report section: dimension → group name → summary.
    pub fn report(&self, labels: &Labels) -> BTreeMap<&'static str, BTreeMap<String, GroupSummary>> {
        self.groups.iter().map(|(name, b)| (*name, b.summaries(labels))).collect()
    }
}

/// Client-perspective latencies of one group, ms.
#[derive(Clone, Debug, Serialize)]
pub struct ClientLatencyMs {
    /// TTFT as the client sees it (streaming clients).
    pub ttft: Distribution,
    /// End-to-end latency as the client sees it.
    pub e2e: Distribution,
}

impl ClientLatencyMs {
    fn of(s: &ClientSamples) -> ClientLatencyMs {
        ClientLatencyMs { ttft: s.ttft_us.summary(US_PER_MS), e2e: s.e2e_us.summary(US_PER_MS) }
    }
}

/// Client-perspective latencies (server-side latency plus the clients'
/// network model), overall and per client.
#[derive(Clone, Debug, Serialize)]
pub struct ClientLatencyReport {
    /// All requests from clients with a network model.
    #[serde(flatten)]
    pub overall: ClientLatencyMs,
    /// Per client.
    pub by_client: BTreeMap<String, ClientLatencyMs>,
}

impl ClientLatencyReport {
    /// The report of a collector.
    pub fn of(c: &ClientLatency, labels: &Labels) -> ClientLatencyReport {
        ClientLatencyReport {
            overall: ClientLatencyMs::of(&c.overall),
            by_client: c.by_client.iter().map(|(&i, s)| (labels.client(i), ClientLatencyMs::of(s))).collect(),
        }
    }
}

/// Table rows for the client-perspective latencies, in the latency block's format.
pub fn client_latency_rows(out: &mut String, c: &ClientLatencyReport, row: fn(&mut String, &str, &Distribution)) {
    row(out, "TTFT (client, network)", &c.overall.ttft);
    row(out, "E2E (client, network)", &c.overall.e2e);
}

/// The per-group tables (failed = dropped, timed out or rejected).
pub fn table(breakdowns: &BTreeMap<&'static str, BTreeMap<String, GroupSummary>>) -> String {
    let mut out = String::new();
    for (dimension, groups) in breakdowns {
        let _ = writeln!(out, "{:-^84}", format!(" By {} ", dimension.replace('_', " ")));
        let _ = writeln!(out, "{:<20}{:>10}{:>10}{:>11}{:>11}{:>11}{:>11}", "", "completed", "failed", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99");
        for (name, g) in groups {
            let short: String = name.chars().take(19).collect();
            let l = &g.latency_ms;
            let failed = g.dropped + g.timed_out + g.rejected;
            let cell = crate::report::stat_cell;
            let _ = writeln!(
                out,
                "{short:<20}{:>10}{failed:>10}{:>11}{:>11}{:>11}{:>11}",
                g.completed,
                cell(&l.ttft, l.ttft.p50),
                cell(&l.ttft, l.ttft.p99),
                cell(&l.e2e, l.e2e.p50),
                cell(&l.e2e, l.e2e.p99)
            );
        }
    }
    out
}
