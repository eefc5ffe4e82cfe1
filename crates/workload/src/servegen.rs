//! Importing ServeGen data directories (spec section 15) as workload specs.
//!
//! A ServeGen directory holds, per client `i`, `chunk-i-trace.csv` and
//! `chunk-i-dataset.json`:
//!
//! * the trace CSV has no header; each row is one window (600 s in the
//!   published data): `start_s,rate,cv,pattern,shape,scale`, where `pattern`
//!   is `Gamma` or `Weibull` (fitted to the window's inter-arrival times,
//!   scipy parameterisation, scale in seconds) or empty for an idle window.
//!   A window lasts until the next row's start.
//! * the dataset JSON maps a window start (s, coarser windows) to fields
//!   (`input_tokens`, `output_tokens`; `reason_ratio` for reasoning;
//!   `text_tokens`, `image_tokens`, `image_count`, ... for multimodal), each
//!   a Python dict literal `"{value: probability, ...}"`. A trace window
//!   uses the last dataset window starting at or before it.
//!
//! Each client becomes a spec client whose lifecycle windows are its active
//! trace windows, each with the fitted process: the gap CV implied by the
//! fitted shape (gamma: 1/√shape; Weibull: √(Γ(1+2/k)/Γ(1+1/k)² − 1)) and a
//! `rate_scale` of rate_w / (the client's mean rate over the span). The
//! client's `rate_fraction` is its share of the span's requests, so with
//! `aggregate_rate` = the data's mean rate (the default) every client
//! sends at its recorded rate in every window, and a different
//! `aggregate_rate` scales all of them. Lengths are empirical distributions
//! that reference the dataset file (not copied), with a window override
//! wherever the dataset window changes.
//!
//! Assumptions (documented in docs/workloads.md): the fitted scale is not
//! used, since the rate already fixes it (ServeGen itself rescales gaps to
//! the window's target rate); rows whose pattern is empty or whose rate is
//! 0 are idle; the 4-column variant without shape/scale uses the `cv`
//! column.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::arrival::{gamma_cv, weibull_cv};
use crate::empirical::ServeGenDataset;
use crate::error::WorkloadError;
use crate::spec::{
    ArrivalSpec, Category, ClientSpec, DistKind, DistSpec, LifecycleSpec, MultimodalSpec, ProcessKind, ReasoningSpec, WindowSpec,
    WorkloadSpec,
};

/// Options of a conversion.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeGenOptions {
    /// Start of the imported span, seconds [default: 0].
    pub span_start_s: Option<u64>,
    /// End of the imported span, seconds [default: the end of the data].
    pub span_end_s: Option<u64>,
    /// `aggregate_rate` of the spec [default: the data's mean rate over the span].
    pub aggregate_rate: Option<f64>,
    /// Seed of the spec [default: 42].
    pub seed: Option<u64>,
}

/// One row of a ServeGen trace CSV.
#[derive(Clone, Debug, PartialEq)]
struct TraceRow {
    start_s: u64,
    rate: f64,
    cv: f64,
    pattern: Option<(ProcessKind, Option<f64>)>,
}

fn parse_trace(path: &Path) -> Result<Vec<TraceRow>, WorkloadError> {
    let text = blis_data::textfile::read(path).map_err(|e| WorkloadError::read(path, e))?;
    let mut rows: Vec<TraceRow> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 4 && f.len() != 6 {
            return Err(WorkloadError::line(
                path,
                n,
                format!("expected 6 fields (start_s,rate,cv,pattern,shape,scale) or 4, got {}", f.len()),
            ));
        }
        let num = |k: usize, what: &str| -> Result<f64, WorkloadError> {
            f[k].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| WorkloadError::line(path, n, format!("{what} {:?} is not a finite number ≥ 0", f[k])))
        };
        let start_s: u64 = f[0].parse().map_err(|_| WorkloadError::line(path, n, format!("start {:?} is not whole seconds", f[0])))?;
        if rows.last().is_some_and(|r| r.start_s >= start_s) {
            return Err(WorkloadError::line(
                path,
                n,
                format!("start {start_s} is not after the previous row's; rows must be in time order"),
            ));
        }
        let rate = num(1, "rate")?;
        let cv = num(2, "cv")?;
        let pattern = match f[3] {
            "" => None,
            p => {
                let kind = match p {
                    "Gamma" => ProcessKind::Gamma,
                    "Weibull" => ProcessKind::Weibull,
                    other => {
                        return Err(WorkloadError::line(
                            path,
                            n,
                            format!("pattern {other:?} is unknown; allowed: Gamma, Weibull, or empty"),
                        ));
                    }
                };
                let shape = if f.len() == 6 { Some(num(4, "shape")?).filter(|s| *s > 0.0) } else { None };
                if f.len() == 6 {
                    // Not used (the rate fixes it), but a column that is no number is a broken file.
                    num(5, "scale")?;
                }
                Some((kind, shape))
            }
        };
        rows.push(TraceRow { start_s, rate, cv, pattern });
    }
    Ok(rows)
}

/// `target` relative to directory `base` when both are absolute, else `target`.
pub fn relative_path(target: &Path, base: &Path) -> PathBuf {
    if !(target.is_absolute() && base.is_absolute()) {
        return target.to_path_buf();
    }
    let t: Vec<Component> = target.components().collect();
    let b: Vec<Component> = base.components().collect();
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    if common == 0 {
        return target.to_path_buf();
    }
    let mut rel = PathBuf::new();
    for _ in common..b.len() {
        rel.push("..");
    }
    for c in &t[common..] {
        rel.push(c.as_os_str());
    }
    rel
}

fn empirical(file: &Path, field: &str, window: u64) -> DistSpec {
    DistSpec {
        kind: DistKind::Empirical,
        params: BTreeMap::new(),
        pdf: None,
        file: Some(file.to_path_buf()),
        field: Some(field.into()),
        window: Some(window),
    }
}

/// Clamps a CV into the range the spec accepts, noting when it had to.
fn accepted_cv(cv: f64, clamped: &mut u64) -> f64 {
    let c = cv.clamp(0.01, 100.0);
    if c != cv {
        *clamped += 1;
    }
    c
}

/// Converts the ServeGen directory `dir` into a spec whose file references
/// are relative to `spec_dir` (the directory the spec will be written to).
/// Returns the spec and warnings.
pub fn convert(dir: &Path, spec_dir: &Path, opts: &ServeGenOptions) -> Result<(WorkloadSpec, Vec<String>), WorkloadError> {
    let entries = std::fs::read_dir(dir).map_err(|e| WorkloadError::read(dir, e))?;
    let mut ids: Vec<u64> = Vec::new();
    for e in entries {
        let name = e.map_err(|e| WorkloadError::read(dir, e))?.file_name();
        let name = name.to_string_lossy();
        if let Some(id) = name.strip_prefix("chunk-").and_then(|r| r.strip_suffix("-trace.csv")).and_then(|i| i.parse().ok()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    let dir_name = dir.display().to_string();
    if ids.is_empty() {
        return Err(WorkloadError::spec(
            dir_name,
            ".",
            "no chunk-<id>-trace.csv files; expected a ServeGen data directory such as data/language/m-large",
        ));
    }

    let mut traces = Vec::new();
    for &id in &ids {
        let trace_path = dir.join(format!("chunk-{id}-trace.csv"));
        let rows = parse_trace(&trace_path)?;
        let dataset_path = dir.join(format!("chunk-{id}-dataset.json"));
        if !dataset_path.exists() {
            return Err(WorkloadError::spec(
                dir_name,
                format!("chunk-{id}"),
                format!("{} has no matching chunk-{id}-dataset.json", trace_path.display()),
            ));
        }
        traces.push((id, rows, dataset_path));
    }
    let data_end = traces
        .iter()
        .filter_map(|(_, rows, _)| {
            let last = rows.last()?;
            let width = rows.len().checked_sub(2).map_or(600, |i| last.start_s - rows[i].start_s);
            Some(last.start_s + width)
        })
        .max()
        .unwrap_or(0);
    let span_start = opts.span_start_s.unwrap_or(0);
    let span_end = opts.span_end_s.unwrap_or(data_end).min(data_end);
    if span_end <= span_start {
        return Err(WorkloadError::spec(
            dir_name,
            "span",
            format!("empty span [{span_start}, {span_end}) s; the data covers [0, {data_end}) s"),
        ));
    }
    let span_s = (span_end - span_start) as f64;

    struct Window {
        start_s: u64,
        end_s: u64,
        rate: f64,
        process: ProcessKind,
        cv: f64,
        dataset_window: u64,
    }
    /// A chunk that is active in the span: its windows there and the requests they carry.
    struct Chunk {
        id: u64,
        windows: Vec<Window>,
        dataset_path: PathBuf,
        dataset: ServeGenDataset,
        requests: f64,
    }
    let mut clients: Vec<Chunk> = Vec::new();
    let mut category: Option<(Category, u64)> = None;
    let mut clamped = 0u64;
    for (id, rows, dataset_path) in traces {
        let dataset = ServeGenDataset::load(&dataset_path)?;
        let Some(&first_window) = dataset.windows.keys().next() else { continue };
        let fields = &dataset.windows[&first_window];
        let this = if fields.contains_key("text_tokens") {
            Category::Multimodal
        } else if fields.contains_key("reason_ratio") {
            Category::Reasoning
        } else {
            Category::Language
        };
        match category {
            None => category = Some((this, id)),
            Some((c, other)) if c != this => {
                return Err(WorkloadError::spec(
                    dir_name,
                    format!("chunk-{id}"),
                    format!("is {} data but chunk-{other} is {}", this.as_str(), c.as_str()),
                ));
            }
            Some(_) => {}
        }
        let mut windows = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let end = rows.get(i + 1).map_or(data_end, |n| n.start_s);
            let (start, end) = (r.start_s.max(span_start), end.min(span_end));
            let Some((process, shape)) = r.pattern else { continue };
            if r.rate <= 0.0 || start >= end {
                continue;
            }
            let cv = match (process, shape) {
                (ProcessKind::Gamma, Some(k)) => gamma_cv(k),
                (ProcessKind::Weibull, Some(k)) => weibull_cv(k),
                _ => r.cv,
            };
            let cv = accepted_cv(cv, &mut clamped);
            let dataset_window = dataset.window_at(r.start_s).unwrap_or(first_window);
            windows.push(Window { start_s: start, end_s: end, rate: r.rate, process, cv, dataset_window });
        }
        let requests: f64 = windows.iter().map(|w| w.rate * (w.end_s - w.start_s) as f64).sum();
        if requests > 0.0 {
            clients.push(Chunk { id, windows, dataset_path, dataset, requests });
        }
    }
    if clients.is_empty() {
        return Err(WorkloadError::spec(dir_name, "span", format!("no client is active in [{span_start}, {span_end}) s")));
    }
    let category = category.map_or(Category::Language, |c| c.0);
    let total: f64 = clients.iter().map(|c| c.requests).sum();
    let mut specs = Vec::new();
    for Chunk { id, windows, dataset_path, dataset, requests } in clients {
        let file = relative_path(&std::path::absolute(&dataset_path).unwrap_or(dataset_path.clone()), spec_dir);
        let mean_rate = requests / span_s;
        let base_window = windows[0].dataset_window;
        let fields = &dataset.windows[&base_window];
        let text_field = if category == Category::Multimodal { "text_tokens" } else { "input_tokens" };
        let mut client = ClientSpec {
            id: format!("chunk-{id}"),
            rate_fraction: Some(requests / total),
            arrival: Some(ArrivalSpec { process: Some(windows[0].process), cv: Some(windows[0].cv), bursty: None, diurnal: None }),
            output_distribution: Some(empirical(&file, "output_tokens", base_window)),
            ..ClientSpec::default()
        };
        match category {
            Category::Multimodal => {
                let d = |f: &str| fields.contains_key(f).then(|| empirical(&file, f, base_window));
                client.multimodal = Some(MultimodalSpec {
                    text_distribution: d("text_tokens"),
                    image_distribution: d("image_tokens"),
                    image_count_distribution: d("image_count"),
                    audio_distribution: d("audio_tokens"),
                    audio_count_distribution: d("audio_count"),
                    video_distribution: d("video_tokens"),
                    video_count_distribution: d("video_count"),
                });
            }
            Category::Reasoning => {
                client.input_distribution = Some(empirical(&file, text_field, base_window));
                client.reasoning = Some(ReasoningSpec {
                    reason_ratio_distribution: Some(empirical(&file, "reason_ratio", base_window)),
                    multi_turn: None,
                });
            }
            Category::Language => client.input_distribution = Some(empirical(&file, text_field, base_window)),
        }
        let lifecycle = windows
            .iter()
            .map(|w| {
                let other_data = w.dataset_window != base_window;
                WindowSpec {
                    start_us: (w.start_s - span_start) * 1_000_000,
                    end_us: (w.end_s - span_start) * 1_000_000,
                    rate_scale: Some(w.rate / mean_rate),
                    arrival: Some(ArrivalSpec { process: Some(w.process), cv: Some(w.cv), bursty: None, diurnal: None }),
                    input_distribution: other_data.then(|| empirical(&file, text_field, w.dataset_window)),
                    output_distribution: other_data.then(|| empirical(&file, "output_tokens", w.dataset_window)),
                }
            })
            .collect();
        client.lifecycle = Some(LifecycleSpec { windows: lifecycle });
        specs.push(client);
    }
    let mut warnings = Vec::new();
    if clamped > 0 {
        warnings.push(format!("{dir_name}: {clamped} windows had a gap CV outside [0.01, 100]; clamped"));
    }
    let spec = WorkloadSpec {
        version: Some("1".into()),
        seed: Some(opts.seed.unwrap_or(crate::plan::DEFAULT_SEED)),
        category: Some(category),
        description: Some(format!("ServeGen data {dir_name}, span [{span_start}, {span_end}) s, {} clients", specs.len())),
        aggregate_rate: Some(opts.aggregate_rate.unwrap_or(total / span_s)),
        num_requests: None,
        horizon: Some((span_end - span_start) * 1_000_000),
        clients: specs,
    };
    Ok((spec, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse, to_yaml};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-servegen-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Two clients in ServeGen's format: chunk-3 is active in windows 0 and
    /// 1200 (Weibull, then Gamma, with a dataset change at 1200), chunk-7 in
    /// window 600 only; window 1800 is the last.
    fn write_language_dir(dir: &Path) {
        std::fs::write(
            dir.join("chunk-3-trace.csv"),
            "0,2.0,2.1,Weibull,0.6,0.5\n600,0,0,,0,0\n1200,1.0,2.1,Gamma,0.25,4.0\n1800,0,0,,0,0\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("chunk-3-dataset.json"),
            r#"{"0": {"input_tokens": "{100: 0.5, 300: 0.5}", "output_tokens": "{20: 1.0}"}, "1200": {"input_tokens": "{1000: 1.0}", "output_tokens": "{50: 0.25, 70: 0.75}"}}"#,
        )
        .unwrap();
        std::fs::write(dir.join("chunk-7-trace.csv"), "0,0,0,,0,0\n600,3.0,1.0,Gamma,1.0,0.33\n1200,0,0,,0,0\n1800,0,0,,0,0\n").unwrap();
        std::fs::write(
            dir.join("chunk-7-dataset.json"),
            r#"{"0": {"input_tokens": "{}", "output_tokens": "{}"}, "600": {"input_tokens": "{8: 1.0}", "output_tokens": "{9: 1.0}"}}"#,
        )
        .unwrap();
    }

    #[test]
    fn a_language_directory_imports_as_windowed_clients() {
        let dir = scratch("language");
        write_language_dir(&dir);
        let (spec, warnings) = convert(&dir, &dir, &ServeGenOptions::default()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(spec.category, Some(Category::Language));
        // Requests: chunk-3 2·600 + 1·600 = 1800, chunk-7 3·600 = 1800, over 2400 s.
        assert_eq!(spec.aggregate_rate, Some(3600.0 / 2400.0));
        assert_eq!(spec.horizon, Some(2_400_000_000));
        let c3 = &spec.clients[0];
        assert_eq!((c3.id.as_str(), c3.rate_fraction), ("chunk-3", Some(0.5)));
        let w = &c3.lifecycle.as_ref().unwrap().windows;
        assert_eq!(w.iter().map(|w| (w.start_us, w.end_us)).collect::<Vec<_>>(), [(0, 600_000_000), (1_200_000_000, 1_800_000_000)]);
        // Mean rate of chunk-3 over the span is 0.75/s: scales 2/0.75 and 1/0.75.
        assert!((w[0].rate_scale.unwrap() - 2.0 / 0.75).abs() < 1e-12);
        assert!((w[1].arrival.as_ref().unwrap().cv.unwrap() - 2.0).abs() < 1e-12, "gamma cv = 1/sqrt(shape)");
        assert!((w[0].arrival.as_ref().unwrap().cv.unwrap() - weibull_cv(0.6)).abs() < 1e-12);
        assert!(w[0].input_distribution.is_none() && w[1].input_distribution.as_ref().unwrap().window == Some(1200));
        assert_eq!(c3.input_distribution.as_ref().unwrap().file.as_deref(), Some(Path::new("chunk-3-dataset.json")));

        // The spec plans and generates each window's recorded rate and lengths.
        let written = dir.join("w.yaml");
        std::fs::write(&written, to_yaml(&spec)).unwrap();
        let plan = crate::spec::load(written.to_str().unwrap()).unwrap().plan().unwrap();
        let reqs: Vec<_> = plan.generator().collect();
        let in_window = |c: u32, a: u64, b: u64| {
            reqs.iter().filter(|r| r.request.meta.client == c && (a..b).contains(&r.request.arrival.as_us())).count()
        };
        // Expected 1200, 600 and 1800. A renewal process's count over n
        // expected arrivals has sd ≈ √n·CV: 61 (CV 1.76), 49 (CV 2) and 42
        // (CV 1), so 30% is more than 3.5 sd in every window.
        for (c, a, b, want) in
            [(0, 0, 600_000_000, 1200.0), (0, 1_200_000_000, 1_800_000_000, 600.0), (1, 600_000_000, 1_200_000_000, 1800.0)]
        {
            let got = in_window(c, a, b) as f64;
            assert!((got / want - 1.0).abs() < 0.3, "client {c} window {a}: {got} vs {want}");
        }
        assert_eq!(in_window(0, 600_000_000, 1_200_000_000) + in_window(1, 0, 600_000_000), 0, "idle windows stay idle");
        for r in &reqs {
            let (t, input, output) = (r.request.arrival.as_us(), r.request.prompt_tokens(), r.request.max_output_tokens);
            match (r.request.meta.client, t < 1_200_000_000) {
                (0, true) => assert!([100, 300].contains(&input) && output == 20),
                (0, false) => assert!(input == 1000 && [50, 70].contains(&output)),
                _ => assert_eq!((input, output), (8, 9)),
            }
        }
    }

    #[test]
    fn reasoning_and_multimodal_directories_set_their_sections() {
        let dir = scratch("reason");
        std::fs::write(dir.join("chunk-0-trace.csv"), "0,1.0,1.0,Gamma,1.0,1.0\n600,1.0,1.0,Gamma,1.0,1.0\n").unwrap();
        std::fs::write(dir.join("chunk-0-dataset.json"), r#"{"0": {"input_tokens": "{10: 1.0}", "output_tokens": "{100: 1.0}", "reason_ratio": "{0: 0.5, 1: 0.0, 2: 0.0, 3: 0.0, 4: 0.5}"}}"#).unwrap();
        let (spec, _) =
            convert(&dir, &dir, &ServeGenOptions { aggregate_rate: Some(5.0), span_end_s: Some(600), ..Default::default() }).unwrap();
        assert_eq!(spec.category, Some(Category::Reasoning));
        assert_eq!((spec.aggregate_rate, spec.horizon), (Some(5.0), Some(600_000_000)));
        let text = to_yaml(&spec);
        let plan = parse(&text, "w", &dir).unwrap().plan().unwrap();
        let ratios: Vec<f64> = plan.generator().take(200).map(|r| r.reason_ratio).collect();
        assert!(ratios.iter().all(|&r| r == 0.0 || r == 1.0), "integer ratio bins map to key / largest key");
        assert!(ratios.contains(&0.0) && ratios.contains(&1.0));

        let mm = scratch("mm");
        std::fs::write(mm.join("chunk-0-trace.csv"), "0,1.0,1.0,Weibull,1.0,1.0\n600,0,0,,0,0\n").unwrap();
        std::fs::write(
            mm.join("chunk-0-dataset.json"),
            r#"{"0": {"text_tokens": "{5: 1.0}", "image_tokens": "{100: 1.0}", "image_count": "{2: 1.0}", "output_tokens": "{7: 1.0}"}}"#,
        )
        .unwrap();
        let (spec, _) = convert(&mm, &mm, &ServeGenOptions::default()).unwrap();
        let plan = parse(&to_yaml(&spec), "w", &mm).unwrap().plan().unwrap();
        let r = plan.generator().next().unwrap();
        assert_eq!((r.request.prompt_tokens(), r.text_tokens, r.modality_tokens), (205, 5, [200, 0, 0]));
    }

    #[test]
    fn bad_directories_are_rejected_clearly() {
        let dir = scratch("bad");
        assert!(convert(&dir, &dir, &ServeGenOptions::default()).unwrap_err().to_string().contains("no chunk-<id>-trace.csv"));
        std::fs::write(dir.join("chunk-1-trace.csv"), "0,1.0,1.0,Poisson,1,1\n").unwrap();
        std::fs::write(dir.join("chunk-1-dataset.json"), r#"{"0": {"input_tokens": "{1: 1.0}", "output_tokens": "{1: 1.0}"}}"#).unwrap();
        let e = convert(&dir, &dir, &ServeGenOptions::default()).unwrap_err().to_string();
        assert!(e.contains("chunk-1-trace.csv:1:") && e.contains("Gamma, Weibull"), "{e}");
        std::fs::remove_file(dir.join("chunk-1-dataset.json")).unwrap();
        std::fs::write(dir.join("chunk-1-trace.csv"), "0,1.0,1.0,Gamma,1,abc\n").unwrap();
        let e = convert(&dir, &dir, &ServeGenOptions::default()).unwrap_err().to_string();
        assert!(e.contains("chunk-1-trace.csv:1:") && e.contains("scale \"abc\" is not a finite number ≥ 0"), "{e}");
        std::fs::write(dir.join("chunk-1-trace.csv"), "0,1.0,1.0,Gamma,1,1\n").unwrap();
        assert!(convert(&dir, &dir, &ServeGenOptions::default()).unwrap_err().to_string().contains("no matching chunk-1-dataset.json"));
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative_path(Path::new("/a/b/c.json"), Path::new("/a/d")), Path::new("../b/c.json"));
        assert_eq!(relative_path(Path::new("/a/b/c.json"), Path::new("/a/b")), Path::new("c.json"));
        assert_eq!(relative_path(Path::new("x.json"), Path::new("/a")), Path::new("x.json"));
    }
}
