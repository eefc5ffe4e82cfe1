//! `--otel-output`: a simulation's vLLM journey and step traces as OTLP/JSON
//! lines (one `ExportTraceServiceRequest` per line, as an OpenTelemetry
//! collector's `file` exporter writes them), with the names
//! [`blis_calibrate::fit::otel`] reads, so `blis fit --otel` fits from them as
//! from a real server's.

use std::collections::BTreeMap;
use std::io::Write;

use blis_engine::instance::{Observer, QueueChange, QueueEvent, StepEvent};
use blis_engine::latency::LatencyModel;
use blis_engine::request::{Outcome, RequestRecord};
use blis_engine::time::Micros;
use serde_json::{Value, json};

/// Spans per OTLP/JSON line the writer emits.
const SPANS_PER_LINE: usize = 256;

/// One attribute, OTLP/JSON-encoded (64-bit integers as strings).
fn attr(key: &str, value: impl Into<AttrValue>) -> Value {
    let v = match value.into() {
        AttrValue::Int(i) => json!({ "intValue": i.to_string() }),
        AttrValue::Double(d) => json!({ "doubleValue": d }),
        AttrValue::Str(s) => json!({ "stringValue": s }),
    };
    json!({ "key": key, "value": v })
}

/// The value kinds the writer emits.
enum AttrValue {
    Int(i64),
    Double(f64),
    Str(String),
}

impl From<u64> for AttrValue {
    fn from(v: u64) -> AttrValue {
        AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u32> for AttrValue {
    fn from(v: u32) -> AttrValue {
        AttrValue::Int(i64::from(v))
    }
}
impl From<f64> for AttrValue {
    fn from(v: f64) -> AttrValue {
        AttrValue::Double(v)
    }
}
impl From<&str> for AttrValue {
    fn from(v: &str) -> AttrValue {
        AttrValue::Str(v.to_string())
    }
}

fn ns(t: Micros) -> u64 {
    t.as_us().saturating_mul(1000)
}

fn event(name: &str, t: Micros, mut attributes: Vec<Value>) -> Value {
    attributes.push(attr("ts.monotonic", ns(t)));
    json!({ "timeUnixNano": ns(t).to_string(), "name": name, "attributes": attributes })
}

/// Writes a simulation's journey and step traces as OTLP/JSON lines.
/// Timestamps are simulated time (ns from the Unix epoch); span and trace
/// ids derive from the instance, request id and step number, so the file is
/// as deterministic as the simulation.
///
/// Each instance is its own OpenTelemetry resource, as each vLLM server of
/// a deployment exports its own: `service.instance.id` is the instance's
/// index, its steps are numbered from 0, and a request's journey belongs to
/// the instance that finished it. A journey's `HANDOFF_TO_CORE` is when
/// the request reached the engine's input queue
/// ([`RequestRecord::enqueued`]) and its `QUEUED` when the scheduler took it
/// in ([`RequestRecord::queued`]), as vLLM stamps them. Its first
/// `SCHEDULED` says `schedule.kind` `FIRST`; each preemption on that
/// instance adds a `PREEMPTED` and, once it runs again, a `SCHEDULED` of
/// kind `RESUME`, every event carrying the preemptions so far
/// (`num_preemptions`). Completed requests end with `FINISHED` of
/// `finish.status` `length` (BLIS generates every requested token); a
/// request the client gave up on after the scheduler took it in ends with
/// `finish.status` `aborted`, at the time it was aborted. Under
/// prefill/decode disaggregation the
/// resource also says its pool, as vLLM's `kv_role`
/// (`vllm.kv_role`: `kv_producer` for the prefill pool, `kv_consumer` for
/// the decode pool).
pub struct OtelWriter<W: Write> {
    out: W,
    error: Option<std::io::Error>,
    emission: Micros,
    per_token: Micros,
    model: String,
    /// Instances `0..prefill_instances` are a prefill pool.
    prefill_instances: Option<u32>,
    /// Steps written so far, per instance.
    steps: Vec<u64>,
    /// Spans not yet written: (instance, scope, span), in emission order.
    pending: Vec<(u32, Scope, Value)>,
    /// Requests in flight by (id, instance): whether they have run there,
    /// and their preemptions there (when, and when they resumed).
    in_flight: BTreeMap<(u64, u32), Lifecycle>,
}

/// What the writer remembers of a request on an instance until it ends.
#[derive(Default)]
struct Lifecycle {
    scheduled: bool,
    preemptions: Vec<(Micros, Option<Micros>)>,
}

/// The instrumentation scopes the writer emits, in the order a line lists them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Step,
    Api,
    Core,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Step => "vllm.scheduler.step",
            Scope::Api => "vllm.api",
            Scope::Core => "vllm.scheduler",
        }
    }
}

impl<W: Write> OtelWriter<W> {
    /// A writer to `out` for a server of `model` timed by `latency` (its
    /// token emission delay and per-token overhead separate the API-side
    /// times from the core-side ones).
    pub fn new(out: W, model: &str, latency: &dyn LatencyModel) -> OtelWriter<W> {
        OtelWriter {
            out,
            error: None,
            emission: latency.token_emission_delay(),
            per_token: latency.output_token_overhead(),
            model: model.to_string(),
            prefill_instances: None,
            steps: Vec::new(),
            pending: Vec::new(),
            in_flight: BTreeMap::new(),
        }
    }

    /// The same writer for a disaggregated deployment whose instances
    /// `0..prefill_instances` are the prefill pool.
    pub fn with_prefill_pool(mut self, prefill_instances: u32) -> OtelWriter<W> {
        self.prefill_instances = Some(prefill_instances);
        self
    }

    fn resource(&self, instance: u32) -> Value {
        let mut attributes = vec![
            attr("service.name", "vllm"),
            attr("service.instance.id", instance.to_string().as_str()),
            attr("gen_ai.request.model", self.model.as_str()),
        ];
        if let Some(n) = self.prefill_instances {
            attributes.push(attr("vllm.kv_role", if instance < n { "kv_producer" } else { "kv_consumer" }));
        }
        json!({ "attributes": attributes })
    }

    fn flush_spans(&mut self, all: bool) {
        if self.error.is_some() || self.pending.is_empty() || (!all && self.pending.len() < SPANS_PER_LINE) {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        // Stable: spans keep their order within an instance and scope.
        pending.sort_by_key(|(instance, scope, _)| (*instance, *scope));
        let mut resources: Vec<Value> = Vec::new();
        for group in pending.chunk_by(|a, b| a.0 == b.0) {
            let scopes: Vec<Value> = group
                .chunk_by(|a, b| a.1 == b.1)
                .map(|spans| json!({ "scope": { "name": spans[0].1.name() }, "spans": spans.iter().map(|s| &s.2).collect::<Vec<_>>() }))
                .collect();
            resources.push(json!({ "resource": self.resource(group[0].0), "scopeSpans": scopes }));
        }
        let line = json!({ "resourceSpans": resources });
        self.error = serde_json::to_writer(&mut self.out, &line).map_err(std::io::Error::from).and_then(|()| writeln!(self.out)).err();
    }

    /// Writes what is pending and returns the output, or the first write error.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.flush_spans(true);
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.out),
        }
    }
}

impl<W: Write> Observer for OtelWriter<W> {
    fn observes_tokens(&self) -> bool {
        false
    }

    fn on_step(&mut self, step: &StepEvent<'_>) {
        let (b, end) = (&step.batch, step.start + step.duration);
        let t = b.totals();
        let instance = step.instance as usize;
        if self.steps.len() <= instance {
            self.steps.resize(instance + 1, 0);
        }
        let id = self.steps[instance];
        self.steps[instance] += 1;
        let mut events = vec![event(
            "step.BATCH_SUMMARY",
            end,
            vec![
                attr("step.id", id),
                attr("step.ts_start_ns", ns(step.start)),
                attr("step.ts_end_ns", ns(end)),
                attr("step.duration_us", step.duration.as_us()),
                attr("queue.running_depth", b.load.running),
                attr("queue.waiting_depth", b.load.waiting),
                attr("batch.num_prefill_reqs", t.num_prefill),
                attr("batch.num_decode_reqs", t.num_decode),
                attr("batch.scheduled_tokens", t.prefill_tokens + u64::from(t.num_decode)),
                attr("batch.prefill_tokens", t.prefill_tokens),
                attr("batch.decode_tokens", t.num_decode),
                attr("batch.num_preempted", b.preempted),
                attr("kv.usage_gpu_ratio", b.load.kv_usage),
                attr("kv.blocks_free_gpu", b.load.kv_free_blocks),
            ],
        )];
        for (e, request) in b.entries.iter().zip(step.requests) {
            events.push(event(
                "step.REQUEST_SNAPSHOT",
                end,
                vec![
                    attr("step.id", id),
                    attr("request.id", request.0),
                    attr("request.phase", if e.is_decode() { "DECODE" } else { "PREFILL" }),
                    attr("request.num_prompt_tokens", e.prompt_tokens),
                    attr("request.num_computed_tokens", e.computed_tokens),
                    attr("request.scheduled_tokens_this_step", e.new_tokens),
                ],
            ));
        }
        // Trace ids: a step's has the top bit set, the instance in bits
        // 64–95 and the step below; a request's is its id.
        let trace_id = u128::from(id) | (u128::from(step.instance) << 64) | (1u128 << 127);
        self.pending.push((
            step.instance,
            Scope::Step,
            json!({
            "traceId": format!("{trace_id:032x}"),
            "spanId": format!("{:016x}", id),
            "name": "scheduler_step",
            "startTimeUnixNano": ns(step.start).to_string(),
            "endTimeUnixNano": ns(end).to_string(),
            "attributes": [attr("step.id", id)],
            "events": events,
            }),
        ));
        self.flush_spans(false);
    }

    fn on_queue(&mut self, q: &QueueEvent) {
        let life = self.in_flight.entry((q.id.0, q.instance)).or_default();
        match q.change {
            QueueChange::Enqueued if life.scheduled => life.preemptions.push((q.time, None)),
            QueueChange::Enqueued => {}
            QueueChange::Scheduled => {
                if let Some((_, resumed @ None)) = life.preemptions.last_mut() {
                    *resumed = Some(q.time);
                }
                life.scheduled = true;
            }
        }
    }

    fn on_finish(&mut self, r: &RequestRecord) {
        let id = r.id.0;
        let instance = r.instance.unwrap_or(0);
        let mut preemptions = Vec::new();
        while let Some((&(held, on), _)) = self.in_flight.range((id, 0)..=(id, u32::MAX)).next() {
            let life = self.in_flight.remove(&(held, on)).unwrap_or_default();
            if on == instance {
                preemptions = life.preemptions;
            }
        }
        let status = match r.outcome {
            Outcome::Completed => "length",
            Outcome::TimedOut => "aborted",
            Outcome::Dropped(_) | Outcome::Rejected(_) => return,
        };
        let (Some(handoff), Some(queued)) = (r.enqueued, r.queued) else { return };
        let done = status == "length";
        if done && (r.first_scheduled.is_none() || r.first_token.is_none() || r.last_token.is_none()) {
            return;
        }
        let core_first = r.first_token.map(|first| first - self.emission - self.per_token);
        let core_end = match r.last_token.filter(|_| done) {
            Some(last) => last - self.emission - Micros(self.per_token.0.saturating_mul(u64::from(r.output_tokens))),
            None => r.finished,
        };
        let trace_id = format!("{id:032x}");
        let progress = |phase: &str, preempted: usize| {
            vec![
                attr("phase", phase),
                attr("prefill_total_tokens", r.input_tokens),
                attr("decode_max_tokens", r.output_tokens),
                attr("num_preemptions", preempted as u64),
            ]
        };
        let with = |mut attributes: Vec<Value>, key: &str, value: &str| {
            attributes.push(attr(key, value));
            attributes
        };
        let preempted_by = |t: Micros| preemptions.iter().take_while(|(p, _)| *p <= t).count();
        let mut core = vec![(queued, event("QUEUED", queued, progress("WAITING", 0)))];
        if let Some(scheduled) = r.first_scheduled {
            core.push((scheduled, event("SCHEDULED", scheduled, with(progress("PREFILL", 0), "schedule.kind", "FIRST"))));
        }
        for (i, &(at, resumed)) in preemptions.iter().enumerate() {
            core.push((at, event("PREEMPTED", at, progress("WAITING", i + 1))));
            if let Some(resumed) = resumed {
                core.push((resumed, event("SCHEDULED", resumed, with(progress("PREFILL", i + 1), "schedule.kind", "RESUME"))));
            }
        }
        if let Some(t) = core_first {
            core.push((t, event("FIRST_TOKEN", t, progress("DECODE", preempted_by(t)))));
        }
        let phase = if core_first.is_some() { "DECODE" } else { "WAITING" };
        core.push((core_end, event("FINISHED", core_end, with(progress(phase, preemptions.len()), "finish.status", status))));
        // Stable: events at one time keep the order above.
        core.sort_by_key(|(t, _)| *t);
        let span = |name: &str, span_id: u64, start: Micros, end: Micros, events: Vec<Value>| {
            json!({
                "traceId": trace_id,
                "spanId": format!("{span_id:016x}"),
                "name": name,
                "startTimeUnixNano": ns(start).to_string(),
                "endTimeUnixNano": ns(end).to_string(),
                "attributes": [attr("request.id", id)],
                "events": events,
            })
        };
        let all = preemptions.len();
        let mut api = vec![event("ARRIVED", r.arrival, progress("WAITING", 0)), event("HANDOFF_TO_CORE", handoff, progress("WAITING", 0))];
        if let Some(first) = r.first_token {
            api.push(event("FIRST_RESPONSE", first, progress("DECODE", core_first.map_or(all, preempted_by))));
        }
        api.push(event("DEPARTED", r.finished, progress(phase, all)));
        self.pending.push((instance, Scope::Api, span("llm_request", 2 * id, r.arrival, r.finished, api)));
        self.pending.push((
            instance,
            Scope::Core,
            span("llm_core", 2 * id + 1, queued, core_end, core.into_iter().map(|(_, e)| e).collect()),
        ));
        self.flush_spans(false);
    }
}

#[cfg(test)]
mod tests {
    use blis_calibrate::fit::otel::{OtelTrace, WARM_UP_STEPS, fit_steps};
    use blis_engine::latency::{BatchEntry, InstanceLoad};

    use super::*;

    /// Each snapshot names its request, as journeys do, and the writer's
    /// own output reads back with the same batch.
    #[test]
    fn snapshots_name_their_requests() {
        use blis_engine::instance::{Observer, StepEvent};
        use blis_engine::request::RequestId;
        let latency = blis_engine::latency::Blackbox { alpha: [0.0; 3], beta: [100.0, 1.0, 1.0] };
        let mut w = OtelWriter::new(Vec::new(), "m/x", &latency);
        let entries = [
            BatchEntry { computed_tokens: 0, new_tokens: 64, prompt_tokens: 100 },
            BatchEntry { computed_tokens: 40, new_tokens: 1, prompt_tokens: 10 },
        ];
        let batch = blis_engine::latency::StepBatch {
            entries: &entries,
            load: InstanceLoad { running: 2, ..InstanceLoad::default() },
            preempted: 0,
        };
        w.on_step(&StepEvent { instance: 0, start: Micros(10), duration: Micros(500), batch, requests: &[RequestId(5), RequestId(9)] });
        let text = String::from_utf8(w.finish().unwrap()).unwrap();
        let doc: Value = serde_json::from_str(text.trim()).unwrap();
        let events = &doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["events"];
        let ids: Vec<String> = events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "step.REQUEST_SNAPSHOT")
            .map(|e| {
                let attributes = e["attributes"].as_array().unwrap();
                let id = attributes.iter().find(|a| a["key"] == "request.id").unwrap();
                id["value"]["intValue"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(ids, ["5", "9"]);
        let dir = std::env::temp_dir().join(format!("blis-otel-ids-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(OtelTrace::load(&path).unwrap().steps[0].entries, entries);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Each instance of a cluster is its own resource, numbering its own
    /// steps from 0 and warming up on its own; the pools of a disaggregated
    /// deployment say their role; a trace can be cut down to one server.
    #[test]
    fn each_instance_is_its_own_server() {
        use blis_engine::instance::{Observer, StepEvent};
        use blis_engine::request::RequestId;
        let latency = blis_engine::latency::Blackbox { alpha: [0.0; 3], beta: [100.0, 1.0, 1.0] };
        let mut w = OtelWriter::new(Vec::new(), "m/x", &latency).with_prefill_pool(1);
        let entries = [BatchEntry { computed_tokens: 40, new_tokens: 1, prompt_tokens: 10 }];
        let batch = blis_engine::latency::StepBatch {
            entries: &entries,
            load: InstanceLoad { running: 1, ..InstanceLoad::default() },
            preempted: 0,
        };
        // Instance 0 runs 12 steps, instance 2 runs 15, interleaved in time; instance 1 none.
        for k in 0..15u64 {
            for instance in [0, 2] {
                if instance == 0 && k >= 12 {
                    continue;
                }
                let start = Micros(1000 * k + u64::from(instance));
                w.on_step(&StepEvent { instance, start, duration: Micros(500), batch, requests: &[RequestId(k)] });
            }
        }
        let text = String::from_utf8(w.finish().unwrap()).unwrap();
        let dir = std::env::temp_dir().join(format!("blis-otel-instances-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, &text).unwrap();
        let mut trace = OtelTrace::load(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(trace.instances(), ["0", "2"]);
        let ids = |server: &str| trace.steps.iter().filter(|s| s.instance == server).map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids("0"), (0..12).collect::<Vec<_>>());
        assert_eq!(ids("2"), (0..15).collect::<Vec<_>>());
        assert_eq!(
            trace.kv_roles.iter().map(|(i, r)| (i.as_str(), r.as_str())).collect::<Vec<_>>(),
            [("0", "kv_producer"), ("2", "kv_consumer")]
        );
        let given = blis_scenario::knobs::KnobValues { model: Some("Llama-2-7b-hf".into()), ..Default::default() };
        let s = blis_scenario::Scenario::from_values(&given, Vec::new()).resolve().unwrap().primary().server.clone();
        let basis = blis_physics::latency::ModelKind::Blackbox.basis(&s.model, &s.gpu, s.tp, &s.instance).unwrap();
        let fitted = |t: &OtelTrace| fit_steps(t, basis.as_ref(), &[(0.0, 1.0); 6], 1e-3, &s.instance).unwrap().steps_used;
        assert_eq!(fitted(&trace), (12 - WARM_UP_STEPS) + (15 - WARM_UP_STEPS), "each server's first steps are its warm-up");
        assert!(!trace.retain_instance("1"), "no steps of instance 1");
        assert_eq!(trace.instances().len(), 2, "a failed cut leaves the trace whole");
        assert!(trace.retain_instance("2"));
        assert_eq!((trace.instances(), fitted(&trace)), (vec!["2"], 15 - WARM_UP_STEPS));
        assert_eq!(trace.kv_roles.len(), 1);
    }
}
