//! Never panic on user input: every shipped spec, with random numbers in it
//! replaced by hostile values (negative, zero, huge, NaN, infinite, wrong
//! type), either fails to parse or plan with an error, or plans and
//! generates requests.

use std::path::Path;

use blis_workload::builtin::BUILTINS;
use blis_workload::spec::parse;
use proptest::prelude::*;

const EXAMPLES: [&str; 3] = [
    include_str!("../../../../examples/language.yaml"),
    include_str!("../../../../examples/multimodal.yaml"),
    include_str!("../../../../examples/reasoning.yaml"),
];

const HOSTILE: [&str; 16] = [
    "-1",
    "0",
    "1",
    "0.5",
    "-0.0",
    "1e308",
    "-1e308",
    "1e-300",
    ".nan",
    ".inf",
    "-.inf",
    "4294967296",
    "18446744073709551616",
    "abc",
    "[]",
    "{}",
];

/// Byte ranges of the numeric literals of a YAML text (outside comments).
fn numbers(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let code = line.split('#').next().unwrap_or("");
        let b = code.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let starts = b[i].is_ascii_digit() && (i == 0 || matches!(b[i - 1], b' ' | b'[' | b',' | b':' | b'-' | b'{'));
            if starts {
                let start = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
                let mut j = i;
                while j < b.len() && (b[j].is_ascii_digit() || matches!(b[j], b'.' | b'e' | b'E' | b'+' | b'_')) {
                    j += 1;
                }
                if j == b.len() || matches!(b[j], b' ' | b',' | b']' | b'}' | b'\n' | b'\r') {
                    out.push((offset + start, offset + j));
                }
                i = j;
            } else {
                i += 1;
            }
        }
        offset += line.len();
    }
    out
}

fn shipped_specs() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.yaml).chain(EXAMPLES).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn hostile_numbers_in_shipped_specs_never_panic(
        which in 0usize..12,
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..HOSTILE.len()), 1..4),
    ) {
        let specs = shipped_specs();
        let mut text = specs[which % specs.len()].to_string();
        for (at, value) in edits {
            let spots = numbers(&text);
            prop_assume!(!spots.is_empty());
            let (start, end) = spots[at.index(spots.len())];
            text.replace_range(start..end, HOSTILE[value]);
        }
        if let Ok(loaded) = parse(&text, "mutated.yaml", Path::new("."))
            && let Ok(plan) = loaded.plan()
        {
            // A valid plan generates requests (at most 300 looked at).
            for r in plan.generator().take(300) {
                prop_assert!(r.request.max_output_tokens >= 1, "{text}");
            }
        }
    }
}

#[test]
fn the_number_finder_sees_the_literals_of_a_spec() {
    let text = "aggregate_rate: 2.5\nclients: # 7 here is a comment\n  - {mean: -3, list: [1, 2e3]}\n  id: a1\n";
    let found: Vec<&str> = numbers(text).iter().map(|&(s, e)| &text[s..e]).collect();
    assert_eq!(found, ["2.5", "-3", "1", "2e3"]);
    assert!(shipped_specs().iter().all(|s| numbers(s).len() >= 5), "every shipped spec has numbers to mutate");
}
