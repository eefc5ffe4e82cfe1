//! The decision trace of `blis run --trace-output`: one JSON line per
//! admission and routing decision (under P/D, per prefill routing decision;
//! with autoscaling, per scaling decision and replica transition too), then
//! a summary line.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use blis_cluster::autoscale::ScaleTrace;
use blis_cluster::trace::{AdmissionTrace, CounterfactualReport, DecisionSink, RoutingTrace};
use blis_engine::request::Labels;
use serde::Serialize;

use crate::error::BadInput;
use crate::output::AtomicFile;

/// Writes one JSON line per decision (`--trace-output`), and a summary line at the end.
pub struct TraceWriter {
    file: AtomicFile,
    labels: Labels,
    admissions: u64,
    routings: u64,
    prefill_routings: u64,
    scalings: u64,
    error: Option<std::io::Error>,
}

impl TraceWriter {
    /// Opens the trace file (moved into place only by [`TraceWriter::finish`]).
    pub fn create(path: &Path, labels: Labels) -> Result<TraceWriter, BadInput> {
        Ok(TraceWriter {
            file: AtomicFile::create("trace-output", path)?,
            labels,
            admissions: 0,
            routings: 0,
            prefill_routings: 0,
            scalings: 0,
            error: None,
        })
    }

    /// One routing line of `kind` (`routing` or `prefill_routing`).
    fn routing_line(&mut self, kind: &'static str, d: &RoutingTrace<'_>) {
        let names = d.scores.components();
        let candidates = d
            .snapshots
            .iter()
            .enumerate()
            .map(|(i, s)| Candidate {
                instance: s.instance,
                score: d.scores.total(i),
                components: names.iter().enumerate().map(|(c, &n)| (n, d.scores.component(i, c))).collect(),
                queue_depth: s.queue_depth,
                batch_size: s.batch_size,
                kv_utilization: s.kv_utilization,
                in_flight: s.in_flight,
                pending: s.pending,
                routed_unseen: s.routed_unseen,
                snapshot_age_us: (d.time - s.timestamp).as_us(),
                estimated_ttft_ms: d.counterfactual.map(|cf| cf.estimated_ttft_ms[i]),
            })
            .collect();
        let line = RoutingLine {
            t_us: d.time.as_us(),
            kind,
            request: d.request.id.0,
            policy: d.policy,
            chosen: d.chosen,
            candidates,
            counterfactual: d.counterfactual.map(|cf| Counterfactual { top_k: cf.top_k, regret_ms: cf.regret_ms }),
        };
        self.line(&line);
    }

    fn line(&mut self, v: &impl Serialize) {
        if self.error.is_none() {
            let w = self.file.writer();
            self.error = serde_json::to_writer(&mut *w, v).map_err(std::io::Error::from).and_then(|()| w.write_all(b"\n")).err();
        }
    }

    /// Writes the summary line and moves the file into place.
    pub fn finish(mut self, counterfactual: Option<&CounterfactualReport>) -> anyhow::Result<()> {
        #[derive(Serialize)]
        struct Summary<'a> {
            kind: &'static str,
            admission_decisions: u64,
            routing_decisions: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            prefill_routing_decisions: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            scale_decisions: Option<u64>,
            counterfactual: Option<&'a CounterfactualReport>,
        }
        let summary = Summary {
            kind: "summary",
            admission_decisions: self.admissions,
            routing_decisions: self.routings,
            prefill_routing_decisions: (self.prefill_routings > 0).then_some(self.prefill_routings),
            scale_decisions: (self.scalings > 0).then_some(self.scalings),
            counterfactual,
        };
        self.line(&summary);
        if let Some(e) = self.error {
            return Err(e).context("writing --trace-output");
        }
        self.file.commit()
    }
}

#[derive(Serialize)]
struct AdmissionLine<'a> {
    t_us: u64,
    kind: &'static str,
    request: u64,
    tenant: String,
    slo_class: String,
    priority: f64,
    policy: &'a str,
    admitted: bool,
    reason: Option<&'static str>,
    /// Hold before routing (shaping admission); 0 when routed at once.
    delay_us: u64,
}

#[derive(Serialize)]
struct Candidate {
    instance: u32,
    /// The policy's total score; null when it does not score.
    score: Option<f64>,
    components: BTreeMap<&'static str, f64>,
    queue_depth: u32,
    batch_size: u32,
    kv_utilization: f64,
    in_flight: u32,
    pending: u32,
    routed_unseen: u32,
    snapshot_age_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_ttft_ms: Option<f64>,
}

#[derive(Serialize)]
struct Counterfactual<'a> {
    top_k: &'a [u32],
    regret_ms: f64,
}

#[derive(Serialize)]
struct RoutingLine<'a> {
    t_us: u64,
    kind: &'static str,
    request: u64,
    policy: &'a str,
    chosen: u32,
    candidates: Vec<Candidate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counterfactual: Option<Counterfactual<'a>>,
}

impl DecisionSink for TraceWriter {
    fn admission(&mut self, d: &AdmissionTrace<'_>) {
        self.admissions += 1;
        let m = &d.request.meta;
        let line = AdmissionLine {
            t_us: d.time.as_us(),
            kind: "admission",
            request: d.request.id.0,
            tenant: self.labels.tenant(m.tenant),
            slo_class: self.labels.slo_class(m.slo_class),
            priority: m.priority,
            policy: d.policy,
            admitted: d.rejected.is_none(),
            reason: d.rejected.map(|r| r.as_str()),
            delay_us: d.delay.as_us(),
        };
        self.line(&line);
    }

    fn routing(&mut self, d: &RoutingTrace<'_>) {
        self.routings += 1;
        self.routing_line("routing", d);
    }

    fn prefill_routing(&mut self, d: &RoutingTrace<'_>) {
        self.prefill_routings += 1;
        self.routing_line("prefill_routing", d);
    }

    fn scale(&mut self, e: &ScaleTrace<'_>) {
        #[derive(Serialize)]
        struct Line<T> {
            kind: &'static str,
            #[serde(flatten)]
            event: T,
        }
        match e {
            ScaleTrace::Decision(d) => {
                self.scalings += 1;
                self.line(&Line { kind: "scale", event: d });
            }
            ScaleTrace::Replica(r) => self.line(&Line { kind: "replica", event: r }),
        }
    }
}
