//! `blis kernels` end to end, on a small profile tree written here.

use crate::{assert_refused, blis, scratch, stderr, stdout};

const HEADER: &str = "time_stats.attn_pre_proj.median,time_stats.attn_post_proj.median,time_stats.mlp_up_proj.median,time_stats.mlp_down_proj.median,n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,num_tokens,num_tensor_parallel_workers";

/// A profile tree of `gpus`: Llama-2-7B's shape, GEMM times that grow with
/// the tokens and are 3× longer on the A40, and an H100 all-reduce curve.
fn write_profiles(name: &str, gpus: &[&str]) -> std::path::PathBuf {
    let dir = scratch(name);
    for gpu in gpus {
        let model = dir.join("compute").join(gpu).join("meta-llama").join("Llama-2-7b-hf");
        std::fs::create_dir_all(&model).unwrap();
        let slow = if *gpu == "a40" { 3.0 } else { 1.0 };
        let mut csv = format!("{HEADER}\n");
        for tokens in [1u32, 16, 64, 256, 1024, 4096] {
            let t = slow * (0.01 + 2e-4 * f64::from(tokens));
            csv += &format!("{t},{},{},{},32,32,4096,11008,True,{tokens},1\n", t / 3.0, t * 2.7, t * 1.35);
        }
        std::fs::write(model.join("mlp.csv"), csv).unwrap();
    }
    let net = dir.join("network").join("h100_dgx");
    std::fs::create_dir_all(&net).unwrap();
    let mut ar = String::from("time_stats.all_reduce.median,num_workers,size,devices_per_node\n");
    for k in 10..28 {
        ar += &format!("{},2,{},2\n", 0.02 + f64::from(1u32 << k) * 2.0 / 4e8, 1u32 << k);
    }
    std::fs::write(net.join("all_reduce.csv"), ar).unwrap();
    // A box of PCIe cards bridged in pairs: a pair on its bridge (15 µs + bus bytes at 390 GB/s of its 600), the
    // 4-GPU rings across PCIe (60 µs + bus bytes at 96 GB/s).
    let bridged = dir.join("network").join("h100_pairwise_nvlink");
    std::fs::create_dir_all(&bridged).unwrap();
    let mut ar = String::from("time_stats.all_reduce.median,num_workers,size,devices_per_node\n");
    for k in 10..28 {
        let bytes = f64::from(1u32 << k) * 2.0;
        ar += &format!("{},4,{},4\n{},2,{},2\n", 0.06 + bytes * 1.5 / 9.6e7, 1u32 << k, 0.015 + bytes / 3.9e8, 1u32 << k);
    }
    std::fs::write(bridged.join("all_reduce.csv"), ar).unwrap();
    dir
}

#[test]
fn reports_the_fit_held_out_gpus_and_all_reduce_and_writes_json() {
    let dir = write_profiles("kernels-ok", &["a40", "h100"]);
    let json = dir.join("k.json");
    let out = blis(&["kernels", dir.to_str().unwrap(), "--json", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("GEMM (QKV, O, MLP up, MLP down) on 48 measurements, 2 GPUs"), "{text}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let held: Vec<&str> = report["gemm_leave_one_gpu_out"].as_array().unwrap().iter().map(|h| h["gpu"].as_str().unwrap()).collect();
    assert_eq!(held, ["a40", "h100"]);
    assert!(report["gemm"]["compute_efficiency"].as_f64().unwrap() > 0.0);
    let ar = report["all_reduce"].as_array().unwrap();
    let curves: Vec<(&str, &str, u64)> =
        ar.iter().map(|c| (c["gpu"].as_str().unwrap(), c["link"].as_str().unwrap(), c["workers"].as_u64().unwrap())).collect();
    assert_eq!(
        curves,
        [("h100", "NvLink", 2), ("h100-pcie", "NvLink", 2), ("h100-pcie", "Pcie", 4)],
        "the bridged box's GPUs are the PCIe cards"
    );
    for c in ar {
        assert!(c["interpolation"]["median_abs"].as_f64().unwrap() < 0.05 && c["model"]["p90_abs"].as_f64().unwrap() < 1e-6, "{c}");
    }
    // The curves were made as latency + bus bytes at a share of the H100 SXM's 900 GB/s NVLink, the H100 PCIe
    // card's 600 GB/s bridge and its 128 GB/s PCIe.
    let fits: Vec<(&str, f64, f64)> = report["all_reduce_fits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["link"].as_str().unwrap(),
                f["efficiency"]["bus_efficiency"].as_f64().unwrap(),
                f["efficiency"]["latency_us"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(fits.len(), 3);
    for ((link, efficiency, latency), want) in
        fits.iter().zip([("NvLink", 400.0 / 900.0, 20.0), ("NvLink", 390.0 / 600.0, 15.0), ("Pcie", 96.0 / 128.0, 60.0)])
    {
        assert!(*link == want.0 && (efficiency - want.1).abs() < 1e-6 && (latency - want.2).abs() < 1e-6, "{fits:?}");
    }
    assert!(text.contains("h100-pcie  PCIe") && text.contains("0.750") && text.contains("0.650"), "{text}");
    // The PCIe ring, measured on the cards only, is also the SXM board's figure past its NVLink domain.
    assert_eq!(report["efficiencies"]["h100"]["allreduce_pcie"]["latency_us"].as_f64().map(|l| (l - 60.0).abs() < 1e-6), Some(true));
    // The layer check: the terms fitted on the profiles and the bundled trained-physics sets, per GPU and regime.
    assert!(text.contains("Trained-physics layer terms fitted on the profiles (all GPUs)"), "{text}");
    let sets: Vec<&String> = report["layer_checks"].as_object().unwrap().keys().collect();
    assert_eq!(sets, ["kernel-fit", "trained-physics-h100", "trained-physics-published"]);
    let checks = report["layer_checks"]["trained-physics-h100"][1].as_array().unwrap();
    let rows: Vec<(&str, &str, bool)> =
        checks.iter().map(|c| (c["gpu"].as_str().unwrap(), c["regime"].as_str().unwrap(), c["scaling"].is_object())).collect();
    assert_eq!(rows, [("a40", "decode", true), ("a40", "prefill", true), ("h100", "decode", false), ("h100", "prefill", false)]);
    assert_eq!(report["layers_leave_one_gpu_out"].as_array().unwrap().len(), 2);
    // Each GPU's own efficiencies, and the sets carried from the H100 by them (measured, and as if unprofiled).
    assert!(text.contains("Each GPU's kernels alone"), "{text}");
    let a40 = &report["efficiencies"]["a40"];
    assert!(a40["gemm_memory"].as_f64().unwrap() > 0.0 && a40["layer_overhead_us"].as_f64().unwrap() > 0.0, "{a40}");
    for set in ["trained-physics-h100", "trained-physics-published"] {
        let (measured, unprofiled) = (&report["carried"][set][0], &report["carried"][set][1]);
        let gpus = |checks: &serde_json::Value| {
            checks
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["scaling"].is_object())
                .map(|c| c["gpu"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(gpus(measured), ["a40", "a40"], "{set}");
        assert_eq!(gpus(unprofiled), ["a40", "a40"], "{set}");
    }
    // A set of another model has no layer terms to check.
    let out = blis(&["kernels", dir.to_str().unwrap(), "--coefficients", "unified-5-h100"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--coefficients unified-5-h100: a unified-5 set"), "{}", stderr(&out));
}

#[test]
fn bad_profile_trees_are_refused_in_one_line() {
    let missing = scratch("kernels-missing").join("nope");
    assert_refused(&blis(&["kernels", missing.to_str().unwrap()]), "missing dir", "not a directory");
    let unknown = write_profiles("kernels-unknown", &["b200x"]);
    assert_refused(&blis(&["kernels", unknown.to_str().unwrap()]), "unknown GPU", "no bundled GPU spec for `b200x`");
    let bad = write_profiles("kernels-bad", &["h100"]);
    let csv = bad.join("compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv");
    std::fs::write(&csv, format!("{HEADER}\n0.1,0.1,0.1,0.1,32,32,4096,11008,True,-5,1\n")).unwrap();
    assert_refused(
        &blis(&["kernels", bad.to_str().unwrap()]),
        "negative tokens",
        "row 1: column `num_tokens`: `-5` is not a whole number from 1 to 16777216",
    );
}

/// Fuzzing: a set with a NaN β printed rows of `NaN%` where `blis validate`
/// refuses it, and sets with β = 1e300 or all zero (which validate takes)
/// printed `NaN%` where an error cannot be computed. The first is refused
/// as validate refuses it; the others print "—" there.
#[test]
fn sets_that_time_nothing_print_no_nan() {
    let dir = write_profiles("kernels-nan", &["a40", "h100"]);
    let bundled =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/coefficients/trained-physics-h100.yaml")).unwrap();
    let beta = |each: &str| {
        let (head, rest) = bundled.split_once("beta:\n").unwrap();
        let provenance = &rest[rest.find("provenance:").unwrap()..];
        format!("{head}beta:\n{}{provenance}", format!("- {each}\n").repeat(12))
    };
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let nan = write("beta_nan.yaml", beta(".nan"));
    assert_refused(
        &blis(&["kernels", dir.to_str().unwrap(), "--coefficients", &nan]),
        "NaN β",
        "beta_nan.yaml: trained-physics beta coefficient 0 (prefill_compute) = NaN is not a finite number",
    );
    for (name, each) in [("huge.yaml", "1e300"), ("zero.yaml", "0.0")] {
        let path = write(name, beta(each));
        let out = blis(&["kernels", dir.to_str().unwrap(), "--coefficients", &path]);
        assert!(out.status.success(), "{each}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(!text.contains("NaN") && !text.contains("inf"), "{each}: {text}");
        assert!(text.lines().any(|l| l.contains(name) && l.contains('—')), "{each}: {text}");
    }
}
