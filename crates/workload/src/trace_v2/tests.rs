//! Tests of trace writing and replay.

use std::fs::File;
use std::path::{Path, PathBuf};

use blis_engine::driver::Workload;
use blis_engine::request::{Request, TokenRun};
use blis_engine::time::Micros;

use super::*;
use crate::RequestSource;
use crate::content::ClientContent;
use crate::plan::Plan;
use crate::spec::parse;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("blis-trace-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn trace_prefixes_and_paths() {
    assert_eq!(trace_csv(Path::new("traces/run1")), Path::new("traces/run1.csv"));
    assert_eq!(trace_csv(Path::new("traces/run1.csv")), Path::new("traces/run1.csv"));
    assert_eq!(header_path(&trace_csv(Path::new("traces/run1"))), Path::new("traces/run1.header.yaml"));
}

fn write_trace(plan: &Plan, path: &Path) {
    let mut w = TraceWriter::new(File::create(path).unwrap()).unwrap();
    for g in plan.generator() {
        w.write(plan, &g, None).unwrap();
    }
    w.finish().unwrap();
    std::fs::write(header_path(path), TraceHeader::generated(plan, "spec.yaml").to_yaml()).unwrap();
}

fn replay_all(path: &Path) -> (Vec<Request>, ReplayInfo) {
    let (mut r, info) = TraceReplay::open(path, None).unwrap();
    let mut out = Vec::new();
    while let Some(req) = r.next_request() {
        out.push(req);
    }
    assert!(r.take_error().is_none());
    (out, info)
}

const SPEC: &str = "seed: 9\ncategory: reasoning\naggregate_rate: 40\nnum_requests: 3000\nclients:
  - id: chat
    tenant_id: t1
    slo_class: interactive
    rate_fraction: 2
    arrival: {process: gamma, cv: 2}
    prefix_group: sys
    prefix_length: 300
    input_distribution: {type: lognormal, params: {mu: 5, sigma: 1}}
    output_distribution: {type: exponential, params: {mean: 100}}
    reasoning:
      reason_ratio_distribution: {type: empirical, pdf: {0.1: 0.5, 0.85: 0.5}}
      multi_turn: {max_rounds: 3, think_time_us: 1000}
  - id: batch, with comma
    tenant_id: t2
    slo_class: batch
    streaming: false
    input_distribution: {type: gaussian, params: {mean: 700, std_dev: 100}}
    output_distribution: {type: constant, params: {value: 64}}
";

#[test]
fn spec_to_trace_to_replay_gives_identical_requests() {
    let dir = scratch("roundtrip");
    let plan = parse(SPEC, "spec.yaml", Path::new(".")).unwrap().plan().unwrap();
    let path = dir.join("requests.csv");
    write_trace(&plan, &path);
    let generated: Vec<Request> = plan.generator().map(|g| g.request).collect();
    let (replayed, info) = replay_all(&path);
    assert_eq!(replayed.len(), 3000);
    assert_eq!(info.requests, 3000);
    assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    assert_eq!(info.labels, plan.labels);
    assert_eq!(generated, replayed);
}

#[test]
fn sessions_are_rebuilt_from_their_rows() {
    // A recorded session: round 1 re-sends round 0's prompt and answer.
    let dir = scratch("sessions");
    let path = dir.join("t.csv");
    let mut w = csv::Writer::from_path(&path).unwrap();
    w.write_record(COLUMNS).unwrap();
    for (id, round, input, output, ratio, t) in [(0, 0, 100, 40, "0.25", 0), (1, 1, 100 + 30 + 20, 10, "0", 5000)] {
        w.write_record([
            &id.to_string(),
            "c",
            "t",
            "s",
            "sess",
            &round.to_string(),
            "",
            "true",
            &input.to_string(),
            &output.to_string(),
            &input.to_string(),
            "0",
            "0",
            "0",
            ratio,
            &t.to_string(),
            "",
            "",
            "",
            "",
            "ok",
            "",
        ])
        .unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let (reqs, info) = replay_all(&path);
    assert!(info.warnings.is_empty());
    let c = ClientContent::new("c");
    assert_eq!(reqs[1].prompt.runs()[..reqs[0].prompt.runs().len()], reqs[0].prompt.runs()[..]);
    assert_eq!(reqs[1].prompt.runs()[1], TokenRun::Synthetic { seed: c.output_seed(0, 0), offset: 10, len: 30 });
    assert_eq!(reqs[1].meta.session, Some((0, 1)));
}

/// Recorded traces are written in completion order; replay sorts them
/// by arrival (send time) and keeps the rows' request ids.
#[test]
fn recorded_traces_replay_in_send_order_with_their_ids() {
    let dir = scratch("recorded");
    let plan = parse(SPEC, "spec.yaml", Path::new(".")).unwrap().plan().unwrap();
    let path = dir.join("run.csv");
    let start = 1_700_000_000_000_000u64;
    let generated: Vec<_> = plan.generator().take(20).collect();
    let mut w = TraceWriter::new(File::create(&path).unwrap()).unwrap();
    // Completion order: reversed; real sends 500 µs after the plan.
    for g in generated.iter().rev() {
        let send = start + g.request.arrival.as_us() + 500;
        let o = Observed {
            input_tokens: g.request.prompt_tokens(),
            output_tokens: g.request.max_output_tokens,
            send_time_us: send,
            first_chunk_time_us: Some(send + 10),
            last_chunk_time_us: Some(send + 20),
            num_chunks: u64::from(g.request.max_output_tokens),
            status: Status::Ok,
            error_message: "",
        };
        w.write(&plan, g, Some(&o)).unwrap();
    }
    w.finish().unwrap();
    let mut header = TraceHeader::generated(&plan, "spec.yaml");
    header.mode = Some("real".into());
    header.load_generator = Some(serde_json::json!({"start_unix_us": start}));
    std::fs::write(header_path(&path), header.to_yaml()).unwrap();
    let (reqs, info) = replay_all(&path);
    assert_eq!(info.requests, 20);
    for (r, g) in reqs.iter().zip(&generated) {
        assert_eq!(r.id, g.request.id);
        assert_eq!(r.arrival, g.request.arrival + Micros(500));
        assert_eq!(r.prompt, g.request.prompt);
    }
    // The recorded server time scale must be one a server can run at.
    header.server = Some(serde_json::json!({"time-scale": -5.0}));
    std::fs::write(header_path(&path), header.to_yaml()).unwrap();
    let e = TraceReplay::open(&path, None).err().expect("refused").to_string();
    assert!(e.contains("server.time-scale: -5.0: must be a number in (0, 1e6]"), "{e}");
}

#[test]
fn bad_rows_name_file_line_and_column() {
    let dir = scratch("bad");
    let plan = parse(SPEC, "spec.yaml", Path::new(".")).unwrap().plan().unwrap();
    let good = dir.join("good.csv");
    write_trace(&plan, &good);
    let text = std::fs::read_to_string(&good).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let case = |name: &str, lines: &[String]| -> String {
        let p = dir.join(name);
        std::fs::write(&p, lines.join("\n")).unwrap();
        match TraceReplay::open(&p, None) {
            Ok(_) => panic!("{name} accepted"),
            Err(e) => e.to_string(),
        }
    };
    let mut bad = lines.clone();
    bad[3] = bad[3].replacen(",ok,", ",maybe,", 1);
    let e = case("status.csv", &bad);
    assert!(e.contains("status.csv:4:") && e.contains("column status"), "{e}");
    let mut bad = lines.clone();
    bad[0] = bad[0].replacen("status", "num_chunks", 1);
    let e = case("twice.csv", &bad);
    assert!(e.contains("twice.csv:1:") && e.contains("column \"num_chunks\" is given twice"), "{e}");
    let mut bad = lines.clone();
    bad[0] = bad[0].replace("num_chunks", "chunks");
    let e = case("column.csv", &bad);
    assert!(e.contains("column.csv:1:") && e.contains("unknown column \"chunks\""), "{e}");
    // Line 6 reuses line 3's request id (ids are the first column).
    let mut bad = lines.clone();
    let id_of_3 = bad[2].split(',').next().unwrap().to_string();
    let rest_of_6 = bad[5].split_once(',').unwrap().1.to_string();
    bad[5] = format!("{id_of_3},{rest_of_6}");
    let e = case("dup.csv", &bad);
    assert!(e.contains("dup.csv:6:") && e.contains(&format!("request_id {id_of_3} is also on line 3")), "{e}");
    // An arrival where the µs clock would saturate.
    let column = lines[0].split(',').position(|c| c == "arrival_time_us").unwrap();
    let mut bad = lines.clone();
    let row = csv::ReaderBuilder::new().has_headers(false).from_reader(bad[1].as_bytes()).records().next().unwrap().unwrap();
    let mut cells: Vec<&str> = row.iter().collect();
    cells[column] = "18446744073709551615";
    let mut out = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b' ')).from_writer(Vec::new());
    out.write_record(&cells).unwrap();
    bad[1] = String::from_utf8(out.into_inner().unwrap()).unwrap().trim_end().to_string();
    let e = case("late.csv", &bad);
    assert!(e.contains("late.csv:2:") && e.contains("after the latest allowed, 100000000000000 µs"), "{e}");
    lines[2] = lines[2].replacen(",ok,", ",error,", 1);
    let p = dir.join("skips.csv");
    std::fs::write(&p, lines.join("\n")).unwrap();
    let (_, info) = TraceReplay::open(&p, Some(10)).unwrap();
    assert_eq!(info.requests, 10);
    assert!(info.warnings.iter().any(|w| w.contains("1 rows with status error")), "{:?}", info.warnings);
}

/// A header's version, unit, mode and server section are checked when it
/// is read: a mode or server section BLIS cannot use is refused by field.
#[test]
fn bad_headers_name_the_field() {
    let dir = scratch("bad-header");
    let case = |name: &str, text: &str| -> String {
        let p = dir.join(format!("{name}.header.yaml"));
        std::fs::write(&p, text).unwrap();
        TraceHeader::load(&p).map(|_| String::new()).unwrap_or_else(|e| e.to_string())
    };
    assert_eq!(case("ok", "trace_version: 2\nmode: real\nserver: {max-num-seqs: 8}\n"), "");
    for (name, text, needle) in [
        ("version", "trace_version: 3\n", "trace_version"),
        ("unit", "trace_version: 2\ntime_unit: seconds\n", "allowed: microseconds"),
        ("mode", "trace_version: 2\nmode: fake\n", "\"fake\" is not a mode; allowed: real, generated"),
        ("server", "trace_version: 2\nserver: [1, 2, 3]\n", "server"),
    ] {
        let e = case(name, text);
        assert!(e.contains(needle), "{name}: {e}");
    }
}
