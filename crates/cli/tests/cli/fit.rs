//! `blis fit` end to end.

use blis_data::coefficients::CoefficientSet;

use crate::experiment_dir::{TempDir, blis, stderr, write_experiment};

#[test]
fn fits_a_loadable_deterministic_coefficient_file_with_provenance() {
    let tmp = TempDir::new("fit");
    write_experiment(&tmp.0, "exp-a", true);
    write_experiment(&tmp.0, "exp-b", false);
    let run = |name: &str| {
        let out_path = tmp.0.join(name);
        let out = blis(&[
            "fit",
            tmp.0.to_str().unwrap(),
            "--latency-model",
            "unified-5",
            "--rounds",
            "2",
            "--refine-evals",
            "8",
            "--fitted-at",
            "2026-01-01",
            "-o",
            out_path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        std::fs::read_to_string(out_path).unwrap()
    };
    let (a, b) = (run("a.yaml"), run("b.yaml"));
    assert_eq!(a, b, "same command, same coefficients");
    let set = CoefficientSet::parse(&a, std::path::Path::new("a.yaml")).unwrap();
    assert_eq!((set.latency_model.as_str(), set.alpha.len(), set.beta.len()), ("unified-5", 3, 5));
    assert_eq!(set.provenance.fitted_on, ["exp-a", "exp-b"]);
    assert_eq!(set.provenance.fitted_at.as_deref(), Some("2026-01-01"));
    assert!(set.provenance.command.as_deref().is_some_and(|c| c.starts_with("blis fit")));
    assert!(set.provenance.train_errors.contains_key("e2e_mean_ms"));
    // The file drives validate.
    let out = blis(&["validate", tmp.0.to_str().unwrap(), "-q", "--coefficients", tmp.0.join("a.yaml").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn holding_out_the_only_model_is_refused() {
    let tmp = TempDir::new("fit-holdout");
    write_experiment(&tmp.0, "exp", false);
    let out = blis(&["fit", tmp.0.to_str().unwrap(), "--holdout-model", "Llama-2-7b-hf", "--refine-evals", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no active experiment left"), "{}", stderr(&out));
    let out = blis(&["fit", tmp.0.to_str().unwrap(), "--holdout-model", "gpt-9", "--refine-evals", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("gpt-9"));
}

/// An experiment whose every request the simulated server refuses (prompts
/// of 60 tokens, a 32-token context) gives the fit nothing to learn from:
/// refused, and no coefficient file is written.
#[test]
fn an_experiment_the_server_refuses_entirely_is_not_fitted() {
    let tmp = TempDir::new("fit-refused");
    let dir = write_experiment(&tmp.0, "exp", false);
    let facts = dir.join("server-facts.yaml");
    let text = std::fs::read_to_string(&facts).unwrap();
    std::fs::write(&facts, format!("{text}max_model_len: 32\nmax_num_batched_tokens: 128\n")).unwrap();
    let out_file = tmp.0.join("out.yaml");
    let out = blis(&["fit", tmp.0.to_str().unwrap(), "--refine-evals", "0", "--output", out_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("ran no step for it"), "{}", stderr(&out));
    assert!(!out_file.exists());
}

/// A model BLIS does not bundle can be fitted from its config.json; the
/// provenance command says so, so it regenerates the file.
#[test]
fn fits_an_unbundled_model_and_records_its_config_in_the_command() {
    let tmp = TempDir::new("fit-definitions");
    let dir = write_experiment(&tmp.0, "exp", true);
    let cfg = dir.join("exp-config.yaml");
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("meta-llama/Llama-2-7b-hf", "acme/private-7b")).unwrap();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/models/meta-llama/Llama-2-7b-hf.json");
    let out_path = tmp.0.join("c.yaml");
    let args = ["fit", dir.to_str().unwrap(), "--latency-model", "blackbox", "--rounds", "1", "--refine-evals", "0", "-o", out_path.to_str().unwrap()];
    let refused = blis(&args);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let out = blis(&[&args[..], &["--model-config", config]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let set = CoefficientSet::parse(&std::fs::read_to_string(&out_path).unwrap(), &out_path).unwrap();
    assert!(set.provenance.command.as_deref().is_some_and(|c| c.ends_with(&format!("--model-config {config}"))), "{:?}", set.provenance.command);
}
