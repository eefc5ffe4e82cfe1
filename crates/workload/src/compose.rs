//! Composing specs: the union of their clients, each keeping the absolute
//! rate, seed and id it had, so (with time-bounded specs) the composed
//! workload contains exactly the requests of its parts.
//!
//! * `aggregate_rate` is the sum of the parts' rates and each client's
//!   `rate_fraction` is its absolute rate, so normalised shares are unchanged;
//! * every client gets an explicit `seed` (its spec's, when it had none);
//! * a client id that is already taken becomes `<file stem>.<id>` (its
//!   requests then differ, since streams are keyed by id: a warning says so);
//! * the horizon is the longest horizon; if no part has one, `num_requests`
//!   is the sum of the parts';
//! * relative `file` paths are rewritten relative to the output directory;
//! * all parts must have the same category.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::error::WorkloadError;
use crate::plan::DEFAULT_SEED;
use crate::servegen::relative_path;
use crate::spec::{ClientSpec, DistSpec, LoadedSpec, WorkloadSpec};

fn dists_mut(c: &mut ClientSpec) -> Vec<&mut DistSpec> {
    let mut v: Vec<&mut DistSpec> = Vec::new();
    v.extend(c.input_distribution.as_mut());
    v.extend(c.output_distribution.as_mut());
    if let Some(l) = c.lifecycle.as_mut() {
        for w in &mut l.windows {
            v.extend(w.input_distribution.as_mut());
            v.extend(w.output_distribution.as_mut());
        }
    }
    if let Some(m) = c.multimodal.as_mut() {
        for d in [
            &mut m.text_distribution,
            &mut m.image_distribution,
            &mut m.image_count_distribution,
            &mut m.audio_distribution,
            &mut m.audio_count_distribution,
            &mut m.video_distribution,
            &mut m.video_count_distribution,
        ] {
            v.extend(d.as_mut());
        }
    }
    if let Some(r) = c.reasoning.as_mut() {
        v.extend(r.reason_ratio_distribution.as_mut());
    }
    v
}

/// Renamed clients named one by one in the warnings; the rest are counted.
pub const MAX_RENAME_WARNINGS: usize = 10;

/// Composes `parts` into one spec whose relative paths resolve from
/// `out_dir` (an absolute directory). Returns the spec and warnings (a
/// line per renamed client up to [`MAX_RENAME_WARNINGS`], then a count).
pub fn compose(parts: &[LoadedSpec], out_dir: &Path) -> Result<(WorkloadSpec, Vec<String>), WorkloadError> {
    let Some(first) = parts.first() else {
        return Err(WorkloadError::spec("compose", ".", "nothing to compose: give at least one --from"));
    };
    let mut warnings = Vec::new();
    let mut out = WorkloadSpec {
        version: Some("1".into()),
        seed: Some(first.spec.seed.unwrap_or(DEFAULT_SEED)),
        category: first.spec.category,
        description: Some(format!("composed from {}", parts.iter().map(|p| p.source_name.as_str()).collect::<Vec<_>>().join(", "))),
        ..WorkloadSpec::default()
    };
    let mut total_rate = 0.0;
    let mut horizon: Option<u64> = None;
    let mut num_requests: Option<u64> = Some(0);
    // Ids taken so far, and the next suffix to try after each renamed base:
    // composing one file many times stays linear in its clients.
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut next_suffix: BTreeMap<String, u64> = BTreeMap::new();
    let mut renamed = 0usize;
    for part in parts {
        // Only valid parts are composed, so the sums below are meaningful.
        part.plan()?;
        let s = &part.spec;
        if s.category.unwrap_or_default() != first.spec.category.unwrap_or_default() {
            return Err(WorkloadError::spec(
                &part.source_name,
                "category",
                format!(
                    "is {} but {} is {}; only specs of one category compose",
                    s.category.unwrap_or_default().as_str(),
                    first.source_name,
                    first.spec.category.unwrap_or_default().as_str()
                ),
            ));
        }
        let rate = s.aggregate_rate.unwrap_or(0.0);
        total_rate += rate;
        horizon = match (horizon, s.horizon) {
            (a, None) => a,
            (None, b) => b,
            (Some(a), Some(b)) => Some(a.max(b)),
        };
        num_requests = num_requests.zip(s.num_requests).map(|(a, b)| a + b);
        let fractions: f64 = s.clients.iter().map(|c| c.rate_fraction.unwrap_or(1.0)).sum();
        let stem = Path::new(&part.source_name).file_stem().map_or_else(|| part.source_name.clone(), |x| x.to_string_lossy().into_owned());
        for c in &s.clients {
            let mut c = c.clone();
            c.rate_fraction = Some(rate * c.rate_fraction.unwrap_or(1.0) / fractions);
            c.seed = Some(c.seed.unwrap_or(s.seed.unwrap_or(DEFAULT_SEED)));
            if taken.contains(&c.id) {
                // `stem.id`, else `stem.id.2`, `stem.id.3`, …: the same file
                // composed three times still gets distinct ids.
                let base = format!("{stem}.{}", c.id);
                let new_id = match taken.contains(&base) {
                    false => base,
                    true => {
                        let n = next_suffix.entry(base.clone()).or_insert(2);
                        while taken.contains(&format!("{base}.{n}")) {
                            *n += 1;
                        }
                        format!("{base}.{n}")
                    }
                };
                renamed += 1;
                if renamed <= MAX_RENAME_WARNINGS {
                    warnings.push(format!(
                        "{}: client {:?} renamed {new_id:?} (the id is taken); its requests differ from the original's",
                        part.source_name, c.id
                    ));
                }
                c.id = new_id;
            }
            for d in dists_mut(&mut c) {
                if let Some(f) = d.file.as_mut()
                    && f.is_relative()
                {
                    let abs = std::path::absolute(part.base_dir.join(&*f)).unwrap_or_else(|_| part.base_dir.join(&*f));
                    *f = relative_path(&abs, out_dir);
                }
            }
            taken.insert(c.id.clone());
            out.clients.push(c);
        }
    }
    if renamed > MAX_RENAME_WARNINGS {
        warnings.push(format!("{} more clients renamed the same way", renamed - MAX_RENAME_WARNINGS));
    }
    let mixed = parts.iter().any(|p| p.spec.horizon.is_some()) && parts.iter().any(|p| p.spec.horizon.is_none());
    if mixed {
        warnings.push("some parts are bounded by num_requests and others by horizon: the composition runs to the longest horizon".into());
    }
    out.aggregate_rate = Some(total_rate);
    out.horizon = horizon;
    out.num_requests = if horizon.is_some() { None } else { num_requests };
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;
    use crate::spec::parse;

    fn spec(name: &str, text: &str, base: &Path) -> LoadedSpec {
        parse(text, name, base).unwrap()
    }

    fn client_requests(plan: &Plan, id: &str) -> Vec<(u64, u32, u32)> {
        plan.generator()
            .filter(|r| plan.labels.clients[r.request.meta.client as usize] == id)
            .map(|r| (r.request.arrival.as_us(), r.request.prompt_tokens(), r.request.max_output_tokens))
            .collect()
    }

    #[test]
    fn composition_keeps_every_clients_requests() {
        let root = std::env::temp_dir().join(format!("blis-compose-test-{}", std::process::id()));
        let specs = root.join("specs");
        std::fs::create_dir_all(&specs).unwrap();
        std::fs::write(specs.join("lens.json"), "{\"100\": 0.5, \"200\": 0.5}").unwrap();
        let a = spec(
            "a.yaml",
            "seed: 1\naggregate_rate: 20\nhorizon: 60000000\nclients:\n  - {id: x, rate_fraction: 3, input_distribution: {type: lognormal, params: {mu: 5, sigma: 1}}, output_distribution: {type: exponential, params: {mean: 50}}}\n  - {id: y, input_distribution: {type: constant, params: {value: 9}}, output_distribution: {type: constant, params: {value: 3}}}\n",
            &specs,
        );
        let b = spec(
            "b.yaml",
            "seed: 2\naggregate_rate: 5\nhorizon: 30000000\nclients:\n  - {id: x, arrival: {process: gamma, cv: 2}, input_distribution: {type: empirical, file: lens.json}, output_distribution: {type: constant, params: {value: 3}}}\n",
            &specs,
        );
        let out = root.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let (c, warnings) = compose(&[a.clone(), b], &out).unwrap();
        assert_eq!(c.aggregate_rate, Some(25.0));
        assert_eq!(c.horizon, Some(60_000_000));
        assert_eq!(c.clients.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["x", "y", "b.x"]);
        assert_eq!(c.clients.iter().map(|c| c.rate_fraction.unwrap()).collect::<Vec<_>>(), [15.0, 5.0, 5.0]);
        assert_eq!(c.clients[2].input_distribution.as_ref().unwrap().file.as_deref(), Some(Path::new("../specs/lens.json")));
        assert_eq!(warnings.len(), 1);
        // Clients x and y of a send the same requests alone and composed.
        let composed = LoadedSpec { spec: c, source_name: "c".into(), base_dir: out };
        let (alone, together) = (a.plan().unwrap(), composed.plan().unwrap());
        for id in ["x", "y"] {
            let want = client_requests(&alone, id);
            assert!(want.len() > 100);
            assert_eq!(want, client_requests(&together, id), "client {id}");
        }
        assert!(client_requests(&together, "b.x").iter().all(|r| [100, 200].contains(&r.1)));
    }

    /// The same spec composed three times: every copy of client x keeps a
    /// distinct id, and the composition plans.
    #[test]
    fn ids_taken_twice_get_numbered() {
        let a = spec(
            "a.yaml",
            "aggregate_rate: 1\nnum_requests: 1\nclients: [{id: x, input_distribution: {type: constant, params: {value: 1}}, output_distribution: {type: constant, params: {value: 1}}}]\n",
            Path::new("."),
        );
        let (c, warnings) = compose(&[a.clone(), a.clone(), a.clone()], Path::new(".")).unwrap();
        assert_eq!(c.clients.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["x", "a.x", "a.x.2"]);
        assert_eq!(warnings.len(), 2);
        LoadedSpec { spec: c, source_name: "c".into(), base_dir: ".".into() }.plan().unwrap();
        // Past ten renames, the rest are counted.
        let (c, warnings) = compose(&vec![a; 25], Path::new(".")).unwrap();
        assert_eq!(c.clients.len(), 25);
        assert_eq!(warnings.len(), MAX_RENAME_WARNINGS + 1);
        assert_eq!(warnings.last().unwrap(), "14 more clients renamed the same way");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Renaming matches the rule written in one brute-force scan per
        /// candidate (`a.ID`, else the first free `a.ID.N`, N from 2), for
        /// ids that clash with earlier renames too, and every id is distinct.
        #[test]
        fn renamed_ids_are_the_first_free_and_distinct(parts in proptest::collection::vec(proptest::sample::subsequence(vec!["x", "y", "a.x", "a.x.2", "a.x.3", "a.y"], 1..=3), 1..8)) {
            let specs: Vec<LoadedSpec> = parts.iter().map(|ids| {
                let clients: Vec<String> = ids.iter().map(|id| format!("{{id: {id:?}, input_distribution: {{type: constant, params: {{value: 1}}}}, output_distribution: {{type: constant, params: {{value: 1}}}}}}")).collect();
                spec("a.yaml", &format!("aggregate_rate: 1\nnum_requests: 1\nclients: [{}]\n", clients.join(", ")), Path::new("."))
            }).collect();
            let (c, _) = compose(&specs, Path::new(".")).unwrap();
            let mut want: Vec<String> = Vec::new();
            for id in parts.iter().flatten() {
                let taken = |x: &str| want.iter().any(|w| w == x);
                let base = format!("a.{id}");
                let new_id = match taken(id) {
                    false => id.to_string(),
                    true => std::iter::once(base.clone()).chain((2u64..).map(|n| format!("{base}.{n}"))).find(|x| !taken(x)).unwrap(),
                };
                want.push(new_id);
            }
            proptest::prop_assert_eq!(c.clients.iter().map(|c| c.id.clone()).collect::<Vec<_>>(), want.clone());
            proptest::prop_assert_eq!(want.iter().collect::<BTreeSet<_>>().len(), want.len());
        }
    }

    #[test]
    fn categories_must_match() {
        let a = spec(
            "a.yaml",
            "aggregate_rate: 1\nnum_requests: 1\nclients: [{id: x, input_distribution: {type: constant, params: {value: 1}}, output_distribution: {type: constant, params: {value: 1}}}]\n",
            Path::new("."),
        );
        let b = spec(
            "b.yaml",
            "category: reasoning\naggregate_rate: 1\nnum_requests: 1\nclients: [{id: y, input_distribution: {type: constant, params: {value: 1}}, output_distribution: {type: constant, params: {value: 1}}}]\n",
            Path::new("."),
        );
        let e = compose(&[a, b], Path::new("/out")).unwrap_err().to_string();
        assert!(e.starts_with("b.yaml: category: is reasoning but a.yaml is language"), "{e}");
    }
}
