//! vLLM's OpenTelemetry request-journey and step tracing, as OTLP/JSON
//! (what an OpenTelemetry collector's `file` exporter writes: one
//! `ExportTraceServiceRequest` per line), read to fit a latency model by
//! teacher forcing. `blis run --otel-output` writes the same names from a
//! simulation (the CLI's `output::otel`).
//!
//! The names are those of `latency-model-research.md` §1–2 (vLLM run with
//! `--enable-journey-tracing --step-tracing-enabled
//! --step-tracing-rich-subsample-rate 1.0`):
//!
//! * scope `vllm.scheduler.step`: one span per sampled step, with one
//!   `step.BATCH_SUMMARY` event (`step.id`, `step.ts_start_ns`,
//!   `step.ts_end_ns`, `step.duration_us`, `queue.running_depth`,
//!   `queue.waiting_depth`, `batch.num_prefill_reqs`,
//!   `batch.num_decode_reqs`, `batch.scheduled_tokens`,
//!   `batch.prefill_tokens`, `batch.decode_tokens`, `batch.num_preempted`,
//!   `kv.usage_gpu_ratio`, `kv.blocks_free_gpu`) and, in rich mode, one
//!   `step.REQUEST_SNAPSHOT` event per scheduled request
//!   (`request.id`, `request.num_prompt_tokens`, `request.num_computed_tokens`,
//!   `request.scheduled_tokens_this_step`, ...);
//! * scope `vllm.api`: one `llm_request` span per request with events
//!   `ARRIVED`, `HANDOFF_TO_CORE`, `FIRST_RESPONSE`, `DEPARTED`; scope
//!   `vllm.scheduler`: one `llm_core` span with `QUEUED`, `SCHEDULED`,
//!   `FIRST_TOKEN`, `FINISHED`; joined by the span attribute `request.id`.
//!   Every event carries `ts.monotonic` (ns).
//! * vLLM's own spelling of the journey events is read too (`api.` and
//!   `journey.` prefixes, `FIRST_RESPONSE_FROM_CORE`, `ts.monotonic` in
//!   seconds, dotted token counts; see [`Journey`]), and a request's two
//!   spans are joined by their trace id;
//! * each server is a resource (`service.instance.id`; `vllm.kv_role` for
//!   the pools of a disaggregated deployment); its steps and journeys are
//!   kept apart from other servers'.
//!
//! **Fitting.** β: every rich step after the first [`WARM_UP_STEPS`] is one
//! equation `β · f(batch) = step.duration_us`, the batch rebuilt exactly
//! from its snapshots,
//! solved by the same relative, prior-regularized non-negative least
//! squares as `blis fit`'s first stage. A step outside the rich subsample is
//! rebuilt from its counts by the research notes' fallback, its prefill
//! tokens spread by the cv² the rich steps show
//! ([`TracedStep::approximate_batch`]), and weighs half. α: every request whose journey is
//! complete gives two equations, its API-side time to first response and
//! to departure minus the engine-side time the simulated engine accounts for
//! (`FIRST_TOKEN − HANDOFF_TO_CORE`, `FINISHED − HANDOFF_TO_CORE`), and a
//! third, `HANDOFF_TO_CORE − ARRIVED`, for models that price the delay
//! before the engine apart. The engine side starts at the hand-off, not at
//! `QUEUED`: the wait between the two (the engine loop finishing its step,
//! under async scheduling the next one too) is simulated, not α's. A journey
//! without a hand-off is timed from `QUEUED`, and counted.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use blis_engine::latency::{BatchEntry, InstanceLoad, QueueingInput, StepBatch};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::{MAX_SPAN_S, Micros};
use blis_engine::warmup::MoeKernelCache;
use blis_physics::latency::FeatureBasis;
use serde_json::Value;

use crate::error::ExperimentError;
use crate::fit::optimize::LeastSquares;

/// Steps at the start of a trace left out of the fit (kernel compilation,
/// allocator warm-up), as `latency-model-research.md` prescribes.
pub const WARM_UP_STEPS: usize = 10;
/// One step of a trace: its measured duration and, when its snapshots
/// were sampled, its batch.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedStep {
    /// The server that ran it: its resource's `service.instance.id` (empty
    /// when the resource names none).
    pub instance: String,
    /// `step.id`, counted per server.
    pub id: u64,
    /// `step.ts_start_ns`, µs.
    pub start_us: u64,
    /// `step.duration_us`.
    pub duration_us: u64,
    /// Queue state after scheduling.
    pub load: InstanceLoad,
    /// `batch.num_preempted`.
    pub preempted: u32,
    /// The batch from `step.REQUEST_SNAPSHOT` (empty when not sampled).
    pub entries: Vec<BatchEntry>,
    /// The batch as `step.BATCH_SUMMARY` counts it.
    pub summary: BatchCounts,
}

/// A step's batch as its summary counts it (what a step outside the rich
/// subsample still says about itself).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BatchCounts {
    /// `batch.num_prefill_reqs`.
    pub prefill_reqs: u32,
    /// `batch.prefill_tokens`.
    pub prefill_tokens: u32,
    /// `batch.num_decode_reqs`.
    pub decode_reqs: u32,
    /// `kv.blocks_total_gpu`, where the summary has it.
    pub kv_blocks_total: Option<u32>,
}

impl TracedStep {
    /// The batch of a step without snapshots, rebuilt from its counts by
    /// `latency-model-research.md`'s fallback. The prefill tokens are split
    /// over the prefill requests so that their mean is the step's and their
    /// spread is `prefill_cv2` (the squared coefficient of variation of a
    /// prefill request's tokens, [`OtelTrace::prefill_cv2`]): requests in
    /// pairs, one above the mean and one below, so that Σ tokens² — what
    /// prefill attention costs — is `(tokens² / n)·(1 + cv²)` (exactly, up to
    /// rounding, for an even `n`; an odd one leaves one request at the mean
    /// and spreads the pairs wider). The decode requests share the KV cache's
    /// used tokens, `kv.usage_gpu_ratio × blocks × block size`, in
    /// proportion `decode / running`; the blocks are `kv.blocks_total_gpu`,
    /// else `kv.blocks_free_gpu / (1 − usage)`. `None` when the counts are
    /// missing or inconsistent.
    pub fn approximate_batch(&self, block_size: u32, prefill_cv2: f64) -> Option<Vec<BatchEntry>> {
        let c = self.summary;
        if c.prefill_reqs + c.decode_reqs == 0 || (c.prefill_reqs == 0) != (c.prefill_tokens == 0) {
            return None;
        }
        let usage = self.load.kv_usage;
        let total_blocks = match c.kv_blocks_total {
            Some(total) if (0.0..=1.0).contains(&usage) => f64::from(total),
            None if (0.0..1.0).contains(&usage) => f64::from(self.load.kv_free_blocks) / (1.0 - usage),
            _ => return None,
        };
        let used_tokens = usage * total_blocks * f64::from(block_size);
        let decode_context = used_tokens * f64::from(c.decode_reqs) / f64::from(self.load.running.max(1)) / f64::from(c.decode_reqs.max(1));
        let context = decode_context.round().min(f64::from(u32::MAX - 1)) as u32;
        let mut entries = Vec::with_capacity((c.prefill_reqs + c.decode_reqs) as usize);
        let (n, paired) = (c.prefill_reqs, c.prefill_reqs / 2 * 2);
        let spread = if paired == 0 { 0.0 } else { (prefill_cv2.max(0.0) * f64::from(n) / f64::from(paired)).sqrt() };
        for i in 0..n {
            // Whole tokens: the first requests take the remainder.
            let t = c.prefill_tokens / n + u32::from(i < c.prefill_tokens % n);
            entries.push(BatchEntry { computed_tokens: 0, new_tokens: t, prompt_tokens: t.max(1) });
        }
        for pair in entries[..paired as usize].chunks_exact_mut(2) {
            // Each keeps at least one token; the pair keeps its sum.
            let shift = ((spread * f64::from(pair[1].new_tokens)).round() as u32).min(pair[1].new_tokens.saturating_sub(1));
            pair[0].new_tokens += shift;
            pair[1].new_tokens -= shift;
            for e in pair.iter_mut() {
                e.prompt_tokens = e.new_tokens.max(1);
            }
        }
        entries.extend((0..c.decode_reqs).map(|_| BatchEntry { computed_tokens: context.max(1), new_tokens: 1, prompt_tokens: 1 }));
        Some(entries)
    }
}

/// One request's journey, ns timestamps of the events that were recorded.
/// Event names are read without vLLM's `api.` and `journey.` prefixes, and
/// `FIRST_RESPONSE_FROM_CORE` as `FIRST_RESPONSE`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Journey {
    /// The server that reported it (its resource's `service.instance.id`).
    pub instance: String,
    /// `prefill_total_tokens` (or `prefill.total_tokens`, else the span's `gen_ai.usage.prompt_tokens`).
    pub prompt_tokens: u32,
    /// `decode_max_tokens` (or `decode.max_tokens`, else the span's
    /// `gen_ai.usage.completion_tokens`): what BLIS writes as the tokens
    /// generated, vLLM as the request's limit.
    pub output_tokens: u32,
    /// The largest `decode.done_tokens` of its events (0 when none says).
    pub done_tokens: u32,
    /// Event name → its monotonic time, ns: `ts.monotonic_ns`, else
    /// `ts.monotonic` or `event.ts.monotonic` (an integer is ns, a double
    /// seconds, as vLLM's `time.monotonic()` writes it). An event that
    /// recurs (`SCHEDULED` after each preemption) keeps its earliest time.
    pub events_ns: BTreeMap<String, u64>,
    /// Event name → the event's `timeUnixNano` (wall clock), ns, earliest
    /// like [`Journey::events_ns`].
    pub epoch_ns: BTreeMap<String, u64>,
    /// The `finish.status` its `FINISHED` event gives (`stopped`, `length`,
    /// `aborted`, ...), when one does.
    pub finish_status: Option<String>,
}

impl Journey {
    /// Whether it ended with its answer: its `FINISHED` says `stopped` or
    /// `length`, or says nothing (a trace without the attribute). An
    /// aborted request's times are not a served request's.
    pub fn served(&self) -> bool {
        self.finish_status.as_deref().is_none_or(|s| s == "stopped" || s == "length")
    }

    /// Tokens generated: `done_tokens` where an event counted them, else `output_tokens`.
    pub fn generated_tokens(&self) -> u32 {
        if self.done_tokens > 0 { self.done_tokens } else { self.output_tokens }
    }

    /// The times of `names`, µs, all from one clock: the monotonic one
    /// where every event has it, else the events' wall-clock times; `None`
    /// when neither clock has them all.
    fn times_us<const N: usize>(&self, names: [&str; N]) -> Option<[f64; N]> {
        let from = |clock: &BTreeMap<String, u64>| -> Option<[f64; N]> {
            let mut out = [0.0; N];
            for (o, n) in out.iter_mut().zip(names) {
                *o = *clock.get(n)? as f64 / 1e3;
            }
            Some(out)
        };
        from(&self.events_ns).or_else(|| from(&self.epoch_ns))
    }
}

/// A journey event's name without vLLM's scope prefixes (`api.ARRIVED`,
/// `journey.QUEUED`), `FIRST_RESPONSE_FROM_CORE` as `FIRST_RESPONSE`.
fn journey_event_name(name: &str) -> &str {
    let bare = name.strip_prefix("api.").or_else(|| name.strip_prefix("journey.")).unwrap_or(name);
    if bare == "FIRST_RESPONSE_FROM_CORE" { "FIRST_RESPONSE" } else { bare }
}

/// An event's monotonic time, ns (see [`Journey::events_ns`]).
fn monotonic_ns(attributes: Option<&Value>) -> Option<u64> {
    let value =
        |key: &str| attributes?.as_array()?.iter().find(|a| a.get("key").and_then(Value::as_str) == Some(key))?.get("value").cloned();
    let int = |v: &Value| v.get("intValue").and_then(|i| i.as_str().and_then(|s| s.parse::<u64>().ok()).or_else(|| i.as_u64()));
    if let Some(ns) = value("ts.monotonic_ns").as_ref().and_then(int) {
        return Some(ns);
    }
    let v = value("ts.monotonic").or_else(|| value("event.ts.monotonic"))?;
    int(&v)
        .or_else(|| v.get("doubleValue").and_then(Value::as_f64).filter(|s| s.is_finite() && *s >= 0.0).map(|s| (s * 1e9).round() as u64))
}

/// Everything read from an OTLP/JSON trace file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OtelTrace {
    /// Steps, by server (`service.instance.id`) and then `step.id`.
    pub steps: Vec<TracedStep>,
    /// Journeys, by `request.id`.
    pub journeys: BTreeMap<String, Journey>,
    /// The model the resource names (`gen_ai.request.model`), if any.
    pub model: Option<String>,
    /// Each server's disaggregation role, where its resource says one
    /// (`vllm.kv_role`: `kv_producer`, `kv_consumer`, ...), by `service.instance.id`.
    pub kv_roles: BTreeMap<String, String>,
}

/// An attribute list as key → JSON value (`intValue` strings parsed).
fn attributes(v: Option<&Value>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for a in v.and_then(Value::as_array).into_iter().flatten() {
        let (Some(k), Some(val)) = (a.get("key").and_then(Value::as_str), a.get("value")) else { continue };
        let n = val
            .get("intValue")
            .and_then(|i| i.as_str().and_then(|s| s.parse::<f64>().ok()).or_else(|| i.as_f64()))
            .or_else(|| val.get("doubleValue").and_then(Value::as_f64));
        if let Some(n) = n {
            out.insert(k.to_string(), n);
        }
    }
    out
}

/// A token count an attribute gives: a whole number in `[0, 2^30]`, the
/// longest sequence BLIS simulates; anything else is not read.
fn token_count(v: f64) -> Option<u32> {
    (v.fract() == 0.0 && (0.0..=f64::from(1u32 << 30)).contains(&v)).then_some(v as u32)
}

fn string_attribute(v: Option<&Value>, key: &str) -> Option<String> {
    v?.as_array()?.iter().find(|a| a.get("key").and_then(Value::as_str) == Some(key)).and_then(|a| {
        let val = a.get("value")?;
        val.get("stringValue")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| val.get("intValue").map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string)))
    })
}

fn time_ns(v: Option<&Value>) -> Option<u64> {
    let v = v?;
    v.as_str().and_then(|s| s.parse().ok()).or_else(|| v.as_u64())
}

impl OtelTrace {
    /// Reads an OTLP/JSON file to fit from ([`OtelTrace::load_requests`]),
    /// which must have step events.
    pub fn load(path: &Path) -> Result<OtelTrace, ExperimentError> {
        let trace = OtelTrace::load_requests(path)?;
        if trace.steps.is_empty() {
            let message = "no step.BATCH_SUMMARY event in scope vllm.scheduler.step (was vLLM run with --step-tracing-enabled?)".into();
            return Err(ExperimentError::Csv { path: path.to_path_buf(), line: 1, message });
        }
        Ok(trace)
    }

    /// Reads an OTLP/JSON file: one `{"resourceSpans": [...]}` document per
    /// line (blank lines skipped). Reads step events (scope
    /// `vllm.scheduler.step`), journeys (`vllm.api`, `vllm.scheduler`) and
    /// the per-request `llm_request` spans of vLLM's standard tracing
    /// (`vllm.llm_engine`, read as a journey with only `ARRIVED`,
    /// `FIRST_RESPONSE` and `DEPARTED`, on the wall clock); spans of other
    /// scopes are ignored. A file may have no steps.
    pub fn load_requests(path: &Path) -> Result<OtelTrace, ExperimentError> {
        let bad = |line: usize, message: String| ExperimentError::Csv { path: path.to_path_buf(), line, message };
        let file = blis_data::textfile::open(path)
            .map_err(|e| ExperimentError::File(blis_data::DataError::Io { path: path.to_path_buf(), message: e.to_string() }))?;
        let mut trace = OtelTrace::default();
        let mut steps: BTreeMap<(String, u64), TracedStep> = BTreeMap::new();
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| bad(i + 1, e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let doc: Value = serde_json::from_str(&line).map_err(|e| bad(i + 1, format!("not OTLP/JSON: {e}")))?;
            let resource_spans = doc
                .get("resourceSpans")
                .and_then(Value::as_array)
                .ok_or_else(|| bad(i + 1, "no `resourceSpans` array (expected an OTLP/JSON ExportTraceServiceRequest per line)".into()))?;
            for rs in resource_spans {
                let resource = rs.pointer("/resource/attributes");
                if trace.model.is_none() {
                    trace.model = string_attribute(resource, "gen_ai.request.model");
                }
                let instance = string_attribute(resource, "service.instance.id").unwrap_or_default();
                if let Some(role) = string_attribute(resource, "vllm.kv_role") {
                    trace.kv_roles.insert(instance.clone(), role);
                }
                for ss in rs.get("scopeSpans").and_then(Value::as_array).into_iter().flatten() {
                    let scope = ss.pointer("/scope/name").and_then(Value::as_str).unwrap_or_default();
                    for span in ss.get("spans").and_then(Value::as_array).into_iter().flatten() {
                        match scope {
                            "vllm.scheduler.step" => read_step(span, &instance, &mut steps).map_err(|m| bad(i + 1, m))?,
                            "vllm.api" | "vllm.scheduler" => read_journey(span, &instance, &mut trace.journeys),
                            "vllm.llm_engine" => read_request_span(span, &instance, &mut trace.journeys),
                            _ => {}
                        }
                    }
                }
            }
        }
        trace.steps = steps.into_values().collect();
        Ok(trace)
    }

    /// Every request whose journey says when it arrived, as its client saw
    /// it, on the wall clock (`timeUnixNano`, which every OTLP event has),
    /// in order of arrival (then of its trace id).
    pub fn requests(&self) -> Vec<ClientView> {
        let mut out: Vec<ClientView> = self
            .journeys
            .values()
            .filter_map(|j| {
                let at = |name: &str| j.epoch_ns.get(name).map(|ns| ns / 1000);
                let arrival_us = at("ARRIVED")?;
                let done =
                    at("FIRST_RESPONSE").zip(at("DEPARTED")).filter(|(first, last)| j.served() && arrival_us <= *first && first <= last);
                Some(ClientView { arrival_us, done, prompt_tokens: j.prompt_tokens, output_tokens: j.generated_tokens() })
            })
            .collect();
        out.sort_by_key(|r| r.arrival_us);
        out
    }
}

/// One request as its client saw it ([`OtelTrace::requests`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientView {
    /// When it arrived, µs on the wall clock.
    pub arrival_us: u64,
    /// When its first response and its end left the server, µs; `None`
    /// when it did not complete (vLLM's `api.ABORTED`, or a journey cut
    /// short).
    pub done: Option<(u64, u64)>,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub output_tokens: u32,
}

/// Reads one `llm_request` span of vLLM's standard request tracing: it
/// starts when the request arrived and carries its latencies, seconds
/// (`gen_ai.latency.time_to_first_token`, `gen_ai.latency.e2e`), and token
/// counts (`gen_ai.usage.prompt_tokens`, `gen_ai.usage.completion_tokens`).
fn read_request_span(span: &Value, instance: &str, journeys: &mut BTreeMap<String, Journey>) {
    let a = attributes(span.get("attributes"));
    let (Some(start_ns), Some(&e2e_s)) = (time_ns(span.get("startTimeUnixNano")), a.get("gen_ai.latency.e2e")) else { return };
    let key = span
        .get("traceId")
        .and_then(Value::as_str)
        .map(|t| format!("trace:{t}"))
        .or_else(|| string_attribute(span.get("attributes"), "gen_ai.request.id"));
    let Some(key) = key else { return };
    let after = |s: f64| (s.is_finite() && s >= 0.0).then(|| start_ns + (s * 1e9).round() as u64);
    let j = journeys.entry(key).or_default();
    j.instance = instance.to_string();
    j.epoch_ns.insert("ARRIVED".into(), start_ns);
    for (name, seconds) in [("FIRST_RESPONSE", a.get("gen_ai.latency.time_to_first_token").copied()), ("DEPARTED", Some(e2e_s))] {
        if let Some(t) = seconds.and_then(after) {
            j.epoch_ns.insert(name.into(), t);
        }
    }
    j.prompt_tokens = a.get("gen_ai.usage.prompt_tokens").and_then(|&p| token_count(p)).unwrap_or(0);
    j.output_tokens = a.get("gen_ai.usage.completion_tokens").and_then(|&d| token_count(d)).unwrap_or(0);
}

impl TracedStep {
    fn new(instance: &str, id: u64) -> TracedStep {
        TracedStep {
            instance: instance.to_string(),
            id,
            start_us: 0,
            duration_us: 0,
            load: InstanceLoad::default(),
            preempted: 0,
            entries: Vec::new(),
            summary: BatchCounts::default(),
        }
    }
}

fn read_step(span: &Value, instance: &str, steps: &mut BTreeMap<(String, u64), TracedStep>) -> Result<(), String> {
    for e in span.get("events").and_then(Value::as_array).into_iter().flatten() {
        let a = attributes(e.get("attributes"));
        let field = |k: &str| a.get(k).copied();
        let count = |k: &str| field(k).filter(|v| v.is_finite() && *v >= 0.0 && *v <= f64::from(u32::MAX)).map(|v| v as u32);
        let Some(id) = field("step.id").or_else(|| attributes(span.get("attributes")).get("step.id").copied()) else {
            return Err("a step event without `step.id`".into());
        };
        let id = id as u64;
        match e.get("name").and_then(Value::as_str) {
            Some("step.BATCH_SUMMARY") => {
                // A step takes some time, and no longer than the simulated clock spans.
                let duration_us =
                    field("step.duration_us").filter(|d| *d > 0.0 && *d <= Micros::MAX_SPAN.as_us() as f64).ok_or_else(|| {
                        format!(
                            "step {id}: `step.duration_us` missing or not in (0, {MAX_SPAN_S:e} s] (in µs: at most {})",
                            Micros::MAX_SPAN.as_us()
                        )
                    })?;
                let start_ns =
                    field("step.ts_start_ns").or_else(|| time_ns(span.get("startTimeUnixNano")).map(|t| t as f64)).unwrap_or_default();
                let s = steps.entry((instance.to_string(), id)).or_insert_with(|| TracedStep::new(instance, id));
                s.start_us = (start_ns / 1e3) as u64;
                s.summary = BatchCounts {
                    prefill_reqs: count("batch.num_prefill_reqs").unwrap_or_default(),
                    prefill_tokens: count("batch.prefill_tokens").unwrap_or_default(),
                    decode_reqs: count("batch.num_decode_reqs").unwrap_or_default(),
                    kv_blocks_total: count("kv.blocks_total_gpu"),
                };
                s.duration_us = duration_us as u64;
                s.preempted = count("batch.num_preempted").unwrap_or_default();
                s.load = InstanceLoad {
                    running: count("queue.running_depth").unwrap_or_default(),
                    waiting: count("queue.waiting_depth").unwrap_or_default(),
                    kv_usage: field("kv.usage_gpu_ratio").unwrap_or_default(),
                    kv_free_blocks: count("kv.blocks_free_gpu").unwrap_or_default(),
                    preemption_ema: 0.0,
                };
            }
            Some("step.REQUEST_SNAPSHOT") => {
                let (Some(prompt_tokens), Some(computed_tokens), Some(new_tokens)) =
                    (count("request.num_prompt_tokens"), count("request.num_computed_tokens"), count("request.scheduled_tokens_this_step"))
                else {
                    return Err(format!(
                        "step {id}: a step.REQUEST_SNAPSHOT needs request.num_prompt_tokens, request.num_computed_tokens and request.scheduled_tokens_this_step"
                    ));
                };
                let s = steps.entry((instance.to_string(), id)).or_insert_with(|| TracedStep::new(instance, id));
                // vLLM snapshots every running request; one given no tokens this step is not in its batch.
                if new_tokens > 0 {
                    s.entries.push(BatchEntry { computed_tokens, new_tokens, prompt_tokens });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads one `llm_request` or `llm_core` span into the journey of its
/// request. The API and core spans of one request share a trace id (vLLM
/// propagates the context from one to the other), which joins them; a span
/// without one is joined by its `request.id` (or `gen_ai.request.id`).
fn read_journey(span: &Value, instance: &str, journeys: &mut BTreeMap<String, Journey>) {
    let span_attributes = span.get("attributes");
    let trace_id = span.get("traceId").and_then(Value::as_str).filter(|t| !t.is_empty()).map(|t| format!("trace:{t}"));
    let Some(id) = trace_id
        .or_else(|| string_attribute(span_attributes, "request.id"))
        .or_else(|| string_attribute(span_attributes, "gen_ai.request.id"))
    else {
        return;
    };
    let j = journeys.entry(id).or_default();
    j.instance = instance.to_string();
    let usage = attributes(span_attributes);
    if let Some(p) = usage.get("gen_ai.usage.prompt_tokens").and_then(|&p| token_count(p)) {
        j.prompt_tokens = p;
    }
    if let Some(d) = usage.get("gen_ai.usage.completion_tokens").and_then(|&d| token_count(d)) {
        j.output_tokens = d;
    }
    for e in span.get("events").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = e.get("name").and_then(Value::as_str).map(journey_event_name) else { continue };
        // An event that recurs keeps its first time: a preempted request is
        // SCHEDULED again when it resumes, but α ends at its first scheduling.
        let earliest = |clock: &mut BTreeMap<String, u64>, t: u64| {
            let first = clock.entry(name.to_string()).or_insert(t);
            *first = (*first).min(t);
        };
        if let Some(t) = monotonic_ns(e.get("attributes")) {
            earliest(&mut j.events_ns, t);
        }
        if let Some(t) = time_ns(e.get("timeUnixNano")) {
            earliest(&mut j.epoch_ns, t);
        }
        let a = attributes(e.get("attributes"));
        if let Some(p) = a.get("prefill_total_tokens").or_else(|| a.get("prefill.total_tokens")).and_then(|&p| token_count(p)) {
            j.prompt_tokens = p;
        }
        if let Some(d) = a.get("decode_max_tokens").or_else(|| a.get("decode.max_tokens")).and_then(|&d| token_count(d)) {
            j.output_tokens = d;
        }
        if let Some(d) = a.get("decode.done_tokens").or_else(|| a.get("decode_done_tokens")).and_then(|&d| token_count(d)) {
            j.done_tokens = j.done_tokens.max(d);
        }
        if name == "FINISHED" {
            j.finish_status = string_attribute(e.get("attributes"), "finish.status").or(j.finish_status.take());
        }
    }
}

impl OtelTrace {
    /// The servers the trace has steps of (`service.instance.id`; one empty
    /// name for resources that name none), in order.
    pub fn instances(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.steps.iter().map(|s| s.instance.as_str()).collect();
        names.dedup();
        names
    }

    /// Keeps only the steps and journeys of server `instance`; false (and
    /// the trace unchanged) when it has no step of that server.
    pub fn retain_instance(&mut self, instance: &str) -> bool {
        if !self.steps.iter().any(|s| s.instance == instance) {
            return false;
        }
        self.steps.retain(|s| s.instance == instance);
        self.journeys.retain(|_, j| j.instance == instance);
        self.kv_roles.retain(|i, _| i == instance);
        true
    }

    /// The squared coefficient of variation, Var/mean², of the tokens a
    /// prefill request schedules in a step, over every prefill entry of the
    /// steps with snapshots (vLLM's rich subsample); `None` with fewer than
    /// two. What [`TracedStep::approximate_batch`] spreads the other steps'
    /// prefill tokens by (`latency-model-research.md`, the cv² correction).
    pub fn prefill_cv2(&self) -> Option<f64> {
        let tokens = || self.steps.iter().flat_map(|s| &s.entries).filter(|e| !e.is_decode()).map(|e| f64::from(e.new_tokens));
        let n = tokens().count();
        if n < 2 {
            return None;
        }
        let mean = tokens().sum::<f64>() / n as f64;
        let variance = tokens().map(|t| (t - mean).powi(2)).sum::<f64>() / n as f64;
        (mean > 0.0).then(|| variance / (mean * mean))
    }
}

/// What a teacher-forced fit found.
#[derive(Clone, Debug, PartialEq)]
pub struct StepFit {
    /// The coefficients, α then β.
    pub alpha: Vec<f64>,
    /// β.
    pub beta: Vec<f64>,
    /// Steps fitted.
    pub steps_used: usize,
    /// Steps without snapshots, fitted from their counts (half weight).
    pub steps_approximated: usize,
    /// Steps without snapshots whose counts could not rebuild a batch (left out).
    pub steps_without_batch: usize,
    /// Steps of a MoE server that compiled a kernel on first use (left out).
    pub steps_compiling: usize,
    /// The prefill cv² the rebuilt steps were spread by; `None` when the
    /// trace had no snapshots to estimate it from (then 0).
    pub prefill_cv2: Option<f64>,
    /// Requests whose journey gave α equations.
    pub journeys_used: usize,
    /// Of those, journeys without `HANDOFF_TO_CORE`, timed from `QUEUED`
    /// instead: their α equations include the wait for the engine's loop
    /// to take the request in, which the simulated engine adds again.
    pub journeys_without_handoff: usize,
    /// Mean absolute percentage error of the fitted step times.
    pub step_mape: f64,
}

/// Weight of a step rebuilt from its counts, against one with snapshots.
pub const APPROXIMATED_WEIGHT: f64 = 0.5;

/// Fits `basis`'s α and β on `trace`; `priors` per coefficient (α then β),
/// `prior_weight` their weight against the equations. `server` is the
/// traced server's configuration: its block size rebuilds the batches of
/// steps without snapshots ([`TracedStep::approximate_batch`]), and a MoE
/// server's steps that would have compiled a fused-MoE kernel had it started
/// cold ([`MoeKernelCache`]) are left out, their time being the compiler's.
pub fn fit_steps(
    trace: &OtelTrace,
    basis: &dyn FeatureBasis,
    priors: &[(f64, f64)],
    prior_weight: f64,
    server: &InstanceConfig,
) -> Result<StepFit, String> {
    let (na, nb) = (basis.alpha_names().len(), basis.beta_names().len());
    let mut f = vec![0.0; nb];
    // (features / duration, weight), the scaled target being 1.
    let mut rows: Vec<(Vec<f64>, f64)> = Vec::new();
    let (mut approximated, mut without) = (0, 0);
    let mut rebuilt;
    let prefill_cv2 = trace.prefill_cv2();
    let block_size = server.block_size;
    let cold = server
        .moe_kernel_warmup
        .map(|w| MoeKernelCache::after_startup(w, server.scheduler.max_num_seqs, server.scheduler.max_num_batched_tokens));
    let mut compiling = 0;
    // Each server warms up: its first steps are left out, and so are the
    // steps that compile a kernel.
    let mut kept = Vec::with_capacity(trace.steps.len());
    for server_steps in trace.steps.chunk_by(|a, b| a.instance == b.instance) {
        let mut kernels = cold;
        for (i, s) in server_steps.iter().enumerate() {
            let tokens = if s.entries.is_empty() {
                u64::from(s.summary.prefill_tokens) + u64::from(s.summary.decode_reqs)
            } else {
                s.entries.iter().map(|e| u64::from(e.new_tokens)).sum()
            };
            let compiles = kernels.as_mut().is_some_and(|k| k.launch(tokens) > Micros::ZERO);
            if i < WARM_UP_STEPS {
                continue;
            }
            if compiles {
                compiling += 1;
                continue;
            }
            kept.push(s);
        }
    }
    for s in kept {
        if s.duration_us == 0 {
            continue;
        }
        let (entries, weight) = if !s.entries.is_empty() {
            (&s.entries, 1.0)
        } else if let Some(e) = s.approximate_batch(block_size, prefill_cv2.unwrap_or(0.0)) {
            approximated += 1;
            rebuilt = e;
            (&rebuilt, APPROXIMATED_WEIGHT)
        } else {
            without += 1;
            continue;
        };
        basis.step_features(&StepBatch { entries, load: s.load, preempted: s.preempted }, &mut f);
        let w = 1.0 / s.duration_us as f64;
        rows.push((f.iter().map(|v| v * w).collect(), weight));
    }
    if rows.is_empty() {
        return Err(format!(
            "no step after the first {WARM_UP_STEPS} has step.REQUEST_SNAPSHOT events or batch counts to rebuild one from ({without} without): \
             run vLLM with --step-tracing-enabled"
        ));
    }
    let total_weight: f64 = rows.iter().map(|r| r.1).sum();
    let mut beta_rows: Vec<(Vec<f64>, f64)> = rows
        .iter()
        .map(|(a, w)| {
            let scale = (w / total_weight).sqrt();
            (a.iter().map(|v| v * scale).collect(), scale)
        })
        .collect();
    for (i, (mean, scale)) in priors[na..].iter().enumerate() {
        let w = prior_weight.sqrt() / scale;
        let mut a = vec![0.0; nb];
        a[i] = w;
        beta_rows.push((a, mean * w));
    }
    let beta = LeastSquares::new(&beta_rows, nb).nnls();
    let step_mape = 100.0 * rows.iter().map(|(a, _)| (a.iter().zip(&beta).map(|(x, b)| x * b).sum::<f64>() - 1.0).abs()).sum::<f64>()
        / rows.len() as f64;

    // α: API-side time not spent in the core's steps.
    let mut u_ttft = vec![0.0; na];
    let mut u_e2e = vec![0.0; na];
    let mut u_queue = vec![0.0; na];
    let mut alpha_rows: Vec<(Vec<f64>, f64)> = Vec::new();
    let (mut used, mut without_handoff) = (0usize, 0usize);
    // The queue state a request arrived to: the last step its server started by then.
    let mut loads: BTreeMap<&str, Vec<(f64, InstanceLoad)>> = BTreeMap::new();
    for s in &trace.steps {
        loads.entry(s.instance.as_str()).or_default().push((s.start_us as f64, s.load));
    }
    for server in loads.values_mut() {
        server.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    for j in trace.journeys.values() {
        // The request reaches the engine at its hand-off; from there on the
        // simulated engine times it, its wait for the engine loop to take it
        // into the scheduler (`QUEUED`) included. A journey without one is
        // timed from `QUEUED`, which puts that wait in α.
        if !j.served() {
            continue;
        }
        const TIMES: [&str; 6] = ["ARRIVED", "HANDOFF_TO_CORE", "FIRST_TOKEN", "FINISHED", "FIRST_RESPONSE", "DEPARTED"];
        let times = j.times_us(TIMES).or_else(|| {
            let mut from_queued = TIMES;
            from_queued[1] = "QUEUED";
            let t = j.times_us(from_queued);
            without_handoff += usize::from(t.is_some());
            t
        });
        let Some([arrived, entered, first_token, finished, first_response, departed]) = times else {
            continue;
        };
        let server = loads.get(j.instance.as_str()).map_or(&[][..], Vec::as_slice);
        let started = server.partition_point(|(start, _)| *start <= arrived);
        let load = if started == 0 { InstanceLoad::default() } else { server[started - 1].1 };
        let input = QueueingInput { prompt_tokens: j.prompt_tokens, prefix_hit_tokens: 0, load };
        basis.alpha_features(&input, j.generated_tokens(), &mut u_ttft, &mut u_e2e);
        if basis.alpha_queueing_features(&input, &mut u_queue) {
            alpha_rows.push((u_queue.clone(), entered - arrived));
        }
        let ttft_rest = (first_response - arrived) - (first_token - entered);
        let e2e_rest = (departed - arrived) - (finished - entered);
        alpha_rows.push((u_ttft.clone(), ttft_rest));
        alpha_rows.push((u_e2e.clone(), e2e_rest));
        used += 1;
    }
    let alpha = if alpha_rows.is_empty() {
        priors[..na].iter().map(|p| p.0).collect()
    } else {
        // Absolute least squares in µs: the residual times are small and may be zero.
        let n = alpha_rows.len() as f64;
        let mut rows: Vec<(Vec<f64>, f64)> =
            alpha_rows.into_iter().map(|(a, t)| (a.iter().map(|v| v / n.sqrt()).collect(), t / n.sqrt())).collect();
        for (i, (mean, scale)) in priors[..na].iter().enumerate() {
            let w = prior_weight.sqrt() / scale;
            let mut a = vec![0.0; na];
            a[i] = w;
            rows.push((a, mean * w));
        }
        LeastSquares::new(&rows, na).nnls()
    };
    Ok(StepFit {
        alpha,
        beta,
        steps_used: rows.len(),
        steps_approximated: approximated,
        steps_without_batch: without,
        steps_compiling: compiling,
        prefill_cv2,
        journeys_used: used,
        journeys_without_handoff: without_handoff,
        step_mape,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One vLLM-style line: a step with its summary and two snapshots
    /// (integers as OTLP/JSON strings, an attribute BLIS does not read), a
    /// request's API and core spans, and a span of a scope that is ignored.
    const LINE: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"m/x"}}]},"scopeSpans":[
        {"scope":{"name":"vllm.scheduler.step"},"spans":[{"startTimeUnixNano":"5000","events":[
          {"name":"step.BATCH_SUMMARY","timeUnixNano":"9000","attributes":[{"key":"step.id","value":{"intValue":"7"}},{"key":"step.duration_us","value":{"intValue":"1234"}},
            {"key":"step.ts_start_ns","value":{"intValue":"4000000"}},{"key":"queue.running_depth","value":{"intValue":"2"}},{"key":"queue.waiting_depth","value":{"intValue":"3"}},
            {"key":"kv.usage_gpu_ratio","value":{"doubleValue":0.25}},{"key":"batch.num_preempted","value":{"intValue":"1"}},{"key":"vendor.extra","value":{"boolValue":true}}]},
          {"name":"step.REQUEST_SNAPSHOT","attributes":[{"key":"step.id","value":{"intValue":"7"}},{"key":"request.num_prompt_tokens","value":{"intValue":"100"}},
            {"key":"request.num_computed_tokens","value":{"intValue":"0"}},{"key":"request.scheduled_tokens_this_step","value":{"intValue":"64"}}]},
          {"name":"step.REQUEST_SNAPSHOT","attributes":[{"key":"step.id","value":{"intValue":"7"}},{"key":"request.num_prompt_tokens","value":{"intValue":"10"}},
            {"key":"request.num_computed_tokens","value":{"intValue":"40"}},{"key":"request.scheduled_tokens_this_step","value":{"intValue":"1"}}]}]}]},
        {"scope":{"name":"vllm.api"},"spans":[{"attributes":[{"key":"request.id","value":{"stringValue":"cmpl-1"}}],"events":[
          {"name":"ARRIVED","timeUnixNano":"1000","attributes":[{"key":"prefill_total_tokens","value":{"intValue":"100"}}]},
          {"name":"DEPARTED","timeUnixNano":"99000","attributes":[{"key":"ts.monotonic","value":{"intValue":"98000"}},{"key":"decode_max_tokens","value":{"intValue":"5"}}]}]}]},
        {"scope":{"name":"vllm.scheduler"},"spans":[{"attributes":[{"key":"request.id","value":{"stringValue":"cmpl-1"}}],"events":[{"name":"QUEUED","timeUnixNano":"3000"},
          {"name":"SCHEDULED","timeUnixNano":"8000"},{"name":"PREEMPTED","timeUnixNano":"7000"},{"name":"SCHEDULED","timeUnixNano":"5000"}]}]},
        {"scope":{"name":"http.server"},"spans":[{"events":[{"name":"step.BATCH_SUMMARY"}]}]}]}]}"#;

    /// Two prefill requests share 101 tokens (51 + 50); three decode
    /// requests of five running share the KV cache's used tokens: half of
    /// 2000 blocks (1000 free at usage 0.5) of 16 tokens, over 5 requests.
    #[test]
    fn a_step_without_snapshots_is_rebuilt_from_its_counts() {
        let mut s = TracedStep::new("", 3);
        s.summary = BatchCounts { prefill_reqs: 2, prefill_tokens: 101, decode_reqs: 3, kv_blocks_total: None };
        s.load = InstanceLoad { running: 5, waiting: 0, kv_usage: 0.5, kv_free_blocks: 1000, preemption_ema: 0.0 };
        let decode = BatchEntry { computed_tokens: 3200, new_tokens: 1, prompt_tokens: 1 };
        let prefill = |t| BatchEntry { computed_tokens: 0, new_tokens: t, prompt_tokens: t };
        assert_eq!(s.approximate_batch(16, 0.0).unwrap(), [prefill(51), prefill(50), decode, decode, decode]);
        // cv² = 0.25: the pair moves half its mean apart (±25), keeping its sum.
        assert_eq!(s.approximate_batch(16, 0.25).unwrap(), [prefill(76), prefill(25), decode, decode, decode]);
        assert_eq!(s.approximate_batch(16, 9.0).unwrap()[..2], [prefill(100), prefill(1)], "every request keeps a token");
        for broken in [BatchCounts { prefill_reqs: 0, prefill_tokens: 5, decode_reqs: 1, kv_blocks_total: None }, BatchCounts::default()] {
            s.summary = broken;
            assert_eq!(s.approximate_batch(16, 0.0), None, "{broken:?}");
        }
        s.summary = BatchCounts { prefill_reqs: 0, prefill_tokens: 0, decode_reqs: 1, kv_blocks_total: None };
        s.load.kv_usage = 1.0;
        assert_eq!(s.approximate_batch(16, 0.0), None, "a full cache says nothing of its size");
        // Unless the summary gives the cache's size (kv.blocks_total_gpu): 500 blocks of 16 tokens, full, over 5 running.
        s.summary.kv_blocks_total = Some(500);
        assert_eq!(s.approximate_batch(16, 0.0).unwrap(), [BatchEntry { computed_tokens: 1600, new_tokens: 1, prompt_tokens: 1 }]);
    }

    /// Σ tokens² of the rebuilt prefill requests is (tokens²/n)·(1 + cv²),
    /// up to rounding, for even and odd request counts; cv² is estimated
    /// from the prefill entries of the steps with snapshots.
    #[test]
    fn rebuilt_prefills_carry_the_spread_the_snapshots_show() {
        for (n, tokens) in [(2u32, 4000u32), (4, 8000), (5, 10000), (8, 2048)] {
            let mut s = TracedStep::new("", 1);
            s.summary = BatchCounts { prefill_reqs: n, prefill_tokens: tokens, decode_reqs: 0, kv_blocks_total: None };
            s.load = InstanceLoad { running: n, kv_usage: 0.1, kv_free_blocks: 900, ..InstanceLoad::default() };
            for cv2 in [0.0, 0.1, 0.4] {
                let e = s.approximate_batch(16, cv2).unwrap();
                assert_eq!(e.iter().map(|e| e.new_tokens).sum::<u32>(), tokens);
                let squares: f64 = e.iter().map(|e| f64::from(e.new_tokens).powi(2)).sum();
                let want = f64::from(tokens).powi(2) / f64::from(n) * (1.0 + cv2);
                assert!((squares / want - 1.0).abs() < 1e-3, "n {n}, cv² {cv2}: {squares} vs {want}");
            }
        }
        let mut trace = OtelTrace::default();
        assert_eq!(trace.prefill_cv2(), None);
        let mut rich = TracedStep::new("", 2);
        // Prefill chunks of 100 and 300 tokens (mean 200, variance 10 000), and a decode that does not count.
        rich.entries = vec![
            BatchEntry { computed_tokens: 0, new_tokens: 100, prompt_tokens: 100 },
            BatchEntry { computed_tokens: 0, new_tokens: 300, prompt_tokens: 500 },
            BatchEntry { computed_tokens: 900, new_tokens: 1, prompt_tokens: 20 },
        ];
        trace.steps.push(rich);
        assert_eq!(trace.prefill_cv2(), Some(0.25));
    }

    #[test]
    fn reads_vllm_step_and_journey_events() {
        let dir = std::env::temp_dir().join(format!("blis-otel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, format!("{}\n\n", LINE.replace('\n', ""))).unwrap();
        let t = OtelTrace::load(&path).unwrap();
        assert_eq!(t.model.as_deref(), Some("m/x"));
        assert_eq!(t.steps.len(), 1);
        let s = &t.steps[0];
        assert_eq!((s.id, s.start_us, s.duration_us, s.preempted), (7, 4000, 1234, 1));
        assert_eq!((s.load.running, s.load.waiting, s.load.kv_usage), (2, 3, 0.25));
        assert_eq!(
            s.entries,
            [
                BatchEntry { computed_tokens: 0, new_tokens: 64, prompt_tokens: 100 },
                BatchEntry { computed_tokens: 40, new_tokens: 1, prompt_tokens: 10 }
            ]
        );
        let j = &t.journeys["cmpl-1"];
        assert_eq!((j.prompt_tokens, j.output_tokens), (100, 5));
        assert_eq!(j.events_ns.iter().map(|(k, v)| (k.as_str(), *v)).collect::<Vec<_>>(), [("DEPARTED", 98000)], "ts.monotonic is ns");
        assert_eq!(
            j.epoch_ns.iter().map(|(k, v)| (k.as_str(), *v)).collect::<Vec<_>>(),
            [("ARRIVED", 1000), ("DEPARTED", 99000), ("PREEMPTED", 7000), ("QUEUED", 3000), ("SCHEDULED", 5000)],
            "a request SCHEDULED again after a preemption keeps its first scheduling, in whatever order the events come"
        );
        assert_eq!(
            j.times_us(["ARRIVED", "QUEUED"]),
            Some([1.0, 3.0]),
            "one clock for all: the wall clock when the monotonic one lacks an event"
        );
        assert_eq!(j.times_us(["DEPARTED"]), Some([98.0]), "the monotonic clock where it has them all");
        // One step is within the warm-up: nothing to fit, said plainly.
        let given = blis_scenario::knobs::KnobValues { model: Some("Llama-2-7b-hf".into()), ..Default::default() };
        let s = blis_scenario::Scenario::from_values(&given, Vec::new()).resolve().unwrap().primary().server.clone();
        let basis = blis_physics::latency::ModelKind::Blackbox.basis(&s.model, &s.gpu, s.tp, &s.instance).unwrap();
        let err = fit_steps(&t, basis.as_ref(), &[(0.0, 1.0); 6], 1e-3, &s.instance).unwrap_err();
        assert!(err.contains("no step after the first 10"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Fuzzing: durations of 0 or i64::MAX µs were read, and fitted to a
    /// 100 % step-time error or blamed on missing snapshots. A step takes
    /// some time and at most the simulated clock's span: the file, line and
    /// field are named.
    #[test]
    fn impossible_step_durations_are_refused_naming_the_line() {
        let dir = std::env::temp_dir().join(format!("blis-otel-duration-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        for duration in ["0", "9223372036854775807", "100000000000001", "-5"] {
            let line = LINE.replace('\n', "").replace(r#"{"intValue":"1234"}"#, &format!(r#"{{"intValue":"{duration}"}}"#));
            std::fs::write(&path, format!("\n{line}\n")).unwrap();
            let e = OtelTrace::load(&path).unwrap_err().to_string();
            assert!(e.contains("t.jsonl:2: step 7: `step.duration_us`") && e.contains("(0, 1e8 s]"), "{duration}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
