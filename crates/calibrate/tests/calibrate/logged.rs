//! Server facts read from a vLLM log, reproduced on a model whose KV cache
//! vLLM groups.

use std::path::PathBuf;

use blis_calibrate::experiment::Experiment;
use blis_calibrate::validate::reproduce::{Definitions, Setup};

use crate::{GENERAL, copy_experiment};

/// A logged KV cache size stands for a gpt-oss server's whole block pool:
/// its two groups (full attention and a 128-token window) share the pool,
/// and vLLM logs the pool over what one request of `max_model_len` holds
/// in both (or, before mid-2026, over the two groups). The pool is
/// simulated, not one group's share; a block count set by hand is kept.
#[test]
fn a_grouped_caches_logged_size_is_simulated_as_its_whole_pool() {
    let gpt_oss = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../physics/tests/fixtures/gpt-oss-20b.json");
    let defs = Definitions { model: Some(gpt_oss), ..Definitions::default() };
    // 4 096 tokens in 2 048-token chunks: 256 full blocks and ⌈2 175 / 16⌉ + 1 = 137 in the window.
    let (pool, per_request) = (20_000u64, 256 + 137);
    let blocks_of = |facts: &str| {
        let copy = copy_experiment(GENERAL, "grouped-log", |rel, text| {
            Some((rel.into(), if rel == "server-facts.yaml" { text.replacen("num_gpu_blocks: 7462\n", facts, 1) } else { text }))
        });
        let setup = Setup::of(&Experiment::load(&copy.dir).unwrap(), &defs).unwrap();
        assert!(setup.server.instance.hybrid_kv.is_some(), "gpt-oss's KV cache is grouped");
        setup.server.instance.num_gpu_blocks
    };
    let concurrency = pool as f64 / f64::from(per_request);
    let tokens = (concurrency * 4096.0) as u64;
    let one_group = blis_calibrate::experiment::facts::one_group_blocks(tokens, 16, Some(4096));
    let logged = format!("num_gpu_blocks: {one_group}\nkv_cache_tokens: {tokens}\nmax_concurrency: {:.2}\n", concurrency);
    assert_eq!(blocks_of(&logged), pool);
    let older = format!("num_gpu_blocks: {}\nkv_cache_tokens: {}\nmax_concurrency: {:.2}\n", pool / 2, pool / 2 * 16, concurrency);
    assert_eq!(blocks_of(&older), pool);
    let by_hand = format!("num_gpu_blocks: 15000\nkv_cache_tokens: {tokens}\nmax_concurrency: {:.2}\n", concurrency);
    assert_eq!(blocks_of(&by_hand), 15_000);
}
