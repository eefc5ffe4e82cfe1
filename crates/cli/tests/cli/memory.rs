//! Memory as a budget: a large input costs a small multiple of its size
//! (issue 27). Peak memory is what `blis run` itself reports (the process's
//! VmHWM), so the figure is the child's alone.

use crate::{blis, scratch, stderr};

/// The "peak memory X MiB" of a `blis run` that succeeded.
fn peak_mib(args: &[&str]) -> f64 {
    let out = blis(args);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let tail = err.rsplit("peak memory ").next().unwrap_or_default();
    tail.split(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no peak memory in: {err}"))
}

/// Writes an empirical PDF of `text` into a scratch folder and returns its
/// size in MiB, the peak memory of a run whose prompt lengths come from it,
/// and the peak of the same run with constant lengths.
fn pdf_cost(name: &str, file: &str, text: String) -> (f64, f64, f64) {
    let dir = scratch(name);
    let pdf = dir.join(file);
    std::fs::write(&pdf, text).unwrap();
    let input_mib = std::fs::metadata(&pdf).unwrap().len() as f64 / (1 << 20) as f64;
    let spec = |input: &str| {
        format!(
            "aggregate_rate: 5\nnum_requests: 5\nclients:\n  - id: a\n    input_distribution: {input}\n    \
             output_distribution: {{type: constant, params: {{value: 4}}}}\n"
        )
    };
    std::fs::write(dir.join("big.yaml"), spec(&format!("{{type: empirical, file: {file}}}"))).unwrap();
    std::fs::write(dir.join("small.yaml"), spec("{type: constant, params: {value: 4}}")).unwrap();
    let run = |name: &str| {
        let path = dir.join(name);
        peak_mib(&[
            "run",
            "--model",
            "meta-llama/llama-3.1-8b-instruct",
            "--workload-spec",
            path.to_str().unwrap(),
            "--output",
            "/dev/null",
        ])
    };
    (input_mib, run("big.yaml"), run("small.yaml"))
}

/// Issue 27, defect 2: an empirical-distribution JSON referenced by a spec
/// took ~70 bytes of memory per input byte (80 MB → 5.7 GB), read through
/// the YAML loader. Now: at most 6× the file on top of a run without it.
#[test]
fn an_empirical_pdf_costs_at_most_six_times_its_size() {
    let body: Vec<String> = (1..=1_000_000).map(|i| format!("\"{i}\": {}", i % 13 + 1)).collect();
    let (input_mib, big, base) = pdf_cost("memory-pdf", "pdf.json", format!("{{{}}}", body.join(",")));
    assert!(input_mib > 10.0, "{input_mib} MiB");
    assert!(big - base <= 6.0 * input_mib, "{big:.1} MiB with a {input_mib:.1} MiB PDF, {base:.1} MiB without");
}

/// Issue 27, defect 2: a 16 MB policy YAML peaked at 1.58 GB (~100 bytes per
/// input byte, the YAML loader's event list). YAML is now streamed into its
/// target, and a document may have at most one node per 8 bytes beyond the
/// first 16 384 (`blis_data::yaml::node_budget`); the costliest accepted
/// document is a dense mapping (the parser tracks keys to refuse
/// duplicates). Here: an empirical PDF written as YAML at that density,
/// which must cost at most 12× the file.
#[test]
fn a_yaml_document_costs_at_most_twelve_times_its_size() {
    let text = (1..=400_000).map(|i| format!("{i}: {}.000000\n", i % 13 + 1)).collect::<String>();
    let (input_mib, big, base) = pdf_cost("memory-yaml", "pdf.yaml", text);
    assert!(input_mib > 6.0, "{input_mib} MiB");
    assert!(big - base <= 12.0 * input_mib, "{big:.1} MiB with a {input_mib:.1} MiB YAML PDF, {base:.1} MiB without");
}

/// A trace is streamed: replaying its first 100 requests holds, beyond the
/// rows being replayed, an index of 40 bytes per row (arrival, id, file
/// position: ids are checked unique, a recorded trace is replayed in
/// arrival order), ~0.4× a trace of ~100-byte rows, ~0.6× while the index
/// grows. Here: a 10× longer trace costs at most 0.75× its extra bytes.
#[test]
fn a_trace_costs_less_than_its_size() {
    let dir = scratch("memory-trace");
    let mib = |path: &std::path::Path| std::fs::metadata(path).unwrap().len() as f64 / (1 << 20) as f64;
    let peak = |rows: u32| {
        let csv = dir.join(format!("t{rows}.csv"));
        let out = blis(&[
            "workload",
            "generate",
            "--spec",
            "preset:chatbot",
            "--num-requests",
            &rows.to_string(),
            "--output",
            csv.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let peak = peak_mib(&[
            "run",
            "--model",
            "meta-llama/llama-3.1-8b-instruct",
            "--trace",
            csv.to_str().unwrap(),
            "--num-requests",
            "100",
            "--output",
            "/dev/null",
        ]);
        (peak, mib(&csv))
    };
    let ((small, small_mib), (big, big_mib)) = (peak(20_000), peak(200_000));
    assert!(big_mib > 15.0, "{big_mib} MiB");
    assert!(
        big - small <= 0.75 * (big_mib - small_mib),
        "{big:.1} MiB for {big_mib:.1} MiB of trace, {small:.1} MiB for {small_mib:.1} MiB"
    );
}

/// A HuggingFace `config.json` padded with a large unknown field (an
/// `id2label` table, a pasted tensor) cost ~9× its size through
/// `serde_json::Value`; fields are now read shallowly: at most 2× the file.
#[test]
fn a_padded_config_json_costs_at_most_twice_its_size() {
    let dir = scratch("memory-hf");
    let template =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/models/meta-llama/Llama-3.1-8B-Instruct.json")).unwrap();
    let junk: Vec<String> = (0..2_000_000).map(|i| (i % 1000).to_string()).collect();
    let padded = template.replacen('{', &format!("{{\"junk\": [{}],", junk.join(",")), 1);
    let (big, small) = (dir.join("big.json"), dir.join("small.json"));
    std::fs::write(&big, padded).unwrap();
    std::fs::write(&small, template).unwrap();
    let input_mib = std::fs::metadata(&big).unwrap().len() as f64 / (1 << 20) as f64;
    let run =
        |p: &std::path::Path| peak_mib(&["run", "--model-config", p.to_str().unwrap(), "--num-requests", "5", "--output", "/dev/null"]);
    let (with, without) = (run(&big), run(&small));
    assert!(input_mib > 5.0, "{input_mib} MiB");
    assert!(with - without <= 2.0 * input_mib, "{with:.1} MiB with a {input_mib:.1} MiB config.json, {without:.1} MiB without");
}
