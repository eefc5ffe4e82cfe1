//! Attention that reads only part of the context in some layers: sliding
//! windows (Mistral-7B-v0.1, Gemma, gpt-oss, Qwen with `use_sliding_window`)
//! and chunked local attention (Llama-4), read from `config.json`.
//!
//! A query at position q reads, besides itself, the `keys_before(q)` keys
//! before it: all q of them under full attention, the last W − 1 under a
//! window of W, and those of its own chunk (q mod C) under chunks of C. The
//! latency models' attention work (score FLOPs and KV reads) is a sum over
//! layers; [`AttentionMix`] gives, per batch entry, the mean over layers of
//! what local layers read relative to full ones, so that a model whose
//! layers are all full reads exactly what it did before.
//!
//! What the KV cache keeps of them is [`blis_engine::kv::KvGroups`]' business
//! (vLLM's hybrid KV cache manager; [`crate::hardware::kv_groups`]).

use serde_json::{Map, Value};

/// How a local-attention layer limits what a query reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttentionSpan {
    /// The last `window_tokens` positions, the query's own included.
    Sliding {
        /// W: positions read, at least 1.
        window_tokens: u32,
    },
    /// The positions of the query's own chunk of `chunk_tokens`, up to it.
    Chunked {
        /// C: positions per chunk, at least 1.
        chunk_tokens: u32,
    },
}

impl AttentionSpan {
    /// Keys before position `q` (0-based) that a query there reads.
    pub fn keys_before(self, q: u64) -> u64 {
        match self {
            AttentionSpan::Sliding { window_tokens } => q.min(u64::from(window_tokens) - 1),
            AttentionSpan::Chunked { chunk_tokens } => q % u64::from(chunk_tokens),
        }
    }

    /// Σ over positions `0..n` of the keys each reads, itself included:
    /// query·key pairs of a prompt of `n` tokens, in closed form.
    pub fn pairs_through(self, n: u64) -> f64 {
        let triangle = |k: u64| k as f64 * (k as f64 + 1.0) / 2.0;
        match self {
            AttentionSpan::Sliding { window_tokens } => {
                let w = u64::from(window_tokens);
                if n <= w { triangle(n) } else { triangle(w) + (n - w) as f64 * w as f64 }
            }
            AttentionSpan::Chunked { chunk_tokens } => {
                let c = u64::from(chunk_tokens);
                (n / c) as f64 * triangle(c) + triangle(n % c)
            }
        }
    }
}

impl std::fmt::Display for AttentionSpan {
    /// `sliding window of 4096` or `chunked attention of 8192`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttentionSpan::Sliding { window_tokens } => write!(f, "sliding window of {window_tokens}"),
            AttentionSpan::Chunked { chunk_tokens } => write!(f, "chunked attention of {chunk_tokens}"),
        }
    }
}

/// Some of a model's layers use local attention.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LocalAttention {
    /// What each of those layers reads.
    pub span: AttentionSpan,
    /// How many layers (at most the model's); the others attend to everything.
    pub layers: u32,
}

impl LocalAttention {
    /// The local layers of a `config.json` object (`obj`: the language
    /// model's, `num_layers` of them; `architecture`: `architectures[0]`),
    /// by the first rule that applies:
    ///
    /// 1. `layer_types` (`sliding_attention`, `chunked_attention`, …, one per
    ///    layer) with `sliding_window` or `attention_chunk_size`;
    /// 2. `attention_chunk_size` (Llama-4): the layers that use rotary
    ///    embeddings, `no_rope_layers[i] = 1`, or without that list every
    ///    layer but each `no_rope_layer_interval`-th (default 4);
    /// 3. `sliding_window` unless `use_sliding_window: false`: every
    ///    `sliding_window_pattern`-th layer is full (Gemma-2 alternates,
    ///    2), else the layers from `max_window_layers` on (Qwen), else all.
    ///
    /// `None` when every layer attends to everything, a span is absent,
    /// null, zero or not a whole number (as before BLIS read any of these).
    pub fn from_config(obj: &Map<String, Value>, num_layers: u32, architecture: &str) -> Option<LocalAttention> {
        let count = |key: &str| obj.get(key).and_then(Value::as_u64).filter(|&n| n > 0).and_then(|n| u32::try_from(n).ok());
        let sliding = count("sliding_window").filter(|_| obj.get("use_sliding_window").and_then(Value::as_bool) != Some(false));
        let sliding = sliding.map(|window_tokens| AttentionSpan::Sliding { window_tokens });
        let chunked = count("attention_chunk_size").map(|chunk_tokens| AttentionSpan::Chunked { chunk_tokens });
        let every_but = |period: u32| num_layers - num_layers / period;
        let (span, layers) = if let Some(types) = obj.get("layer_types").and_then(Value::as_array) {
            let of = |kind: &str| types.iter().filter(|t| t.as_str() == Some(kind)).count() as u32;
            match (sliding, chunked) {
                (Some(s), _) if of("sliding_attention") > 0 => (s, of("sliding_attention")),
                (_, Some(c)) if of("chunked_attention") > 0 => (c, of("chunked_attention")),
                _ => return None,
            }
        } else if let Some(c) = chunked {
            let with_rope = obj.get("no_rope_layers").and_then(Value::as_array).filter(|l| !l.is_empty());
            let layers = match with_rope {
                Some(list) => list.iter().filter(|v| v.as_u64().is_some_and(|n| n != 0)).count() as u32,
                None => every_but(count("no_rope_layer_interval").unwrap_or(4)),
            };
            (c, layers)
        } else if let Some(s) = sliding {
            let pattern = count("sliding_window_pattern").or_else(|| architecture.starts_with("Gemma2").then_some(2));
            let layers = match (pattern, count("max_window_layers")) {
                (Some(p), _) => every_but(p),
                (None, Some(full)) => num_layers.saturating_sub(full),
                (None, None) => num_layers,
            };
            (s, layers)
        } else {
            return None;
        };
        let layers = layers.min(num_layers);
        (layers > 0).then_some(LocalAttention { span, layers })
    }
}

/// A model's layers blended: what one entry of a step reads, averaged over
/// layers, relative to full attention. With no local layer the blend is
/// the identity, to the last bit.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct AttentionMix {
    span: AttentionSpan,
    /// Share of the layers that are local, in (0, 1].
    local_fraction: f64,
}

impl AttentionMix {
    /// The blend of `local` among `num_layers` layers.
    pub fn new(local: LocalAttention, num_layers: u32) -> AttentionMix {
        AttentionMix { span: local.span, local_fraction: f64::from(local.layers.min(num_layers)) / f64::from(num_layers.max(1)) }
    }

    /// The cached tokens a decode with `computed` tokens before it reads,
    /// averaged over layers: `computed` in full layers, fewer in local ones.
    pub fn decode_context(&self, computed: u32) -> f64 {
        let full = f64::from(computed);
        full + self.local_fraction * (self.span.keys_before(u64::from(computed)) as f64 - full)
    }

    /// A prefill chunk's attention work, of `new` tokens after `computed`,
    /// averaged over layers, relative to full attention's: 1 while the
    /// chunk lies within one window or chunk from the start, less after.
    pub fn prefill_scale(&self, computed: u32, new: u32) -> f64 {
        if new == 0 {
            return 1.0;
        }
        let (start, end) = (u64::from(computed), u64::from(computed) + u64::from(new));
        let local = self.span.pairs_through(end) - self.span.pairs_through(start);
        let full = f64::from(new) * (f64::from(computed) + (f64::from(new) + 1.0) / 2.0);
        1.0 + self.local_fraction * (local / full - 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn local(text: &str, layers: u32, architecture: &str) -> Option<LocalAttention> {
        let obj: Map<String, Value> = serde_json::from_str(text).unwrap();
        LocalAttention::from_config(&obj, layers, architecture)
    }

    #[test]
    fn configs_say_which_layers_are_local() {
        let chunked = |c| AttentionSpan::Chunked { chunk_tokens: c };
        let sliding = |w| AttentionSpan::Sliding { window_tokens: w };
        // Llama-4 Scout: chunks of 8192 in the 36 of 48 layers with rotary embeddings.
        assert_eq!(
            local(r#"{"attention_chunk_size": 8192, "no_rope_layers": []}"#, 48, "Llama4"),
            Some(LocalAttention { span: chunked(8192), layers: 36 })
        );
        assert_eq!(local(r#"{"attention_chunk_size": 8192, "no_rope_layers": [1, 1, 0, 1]}"#, 4, "Llama4").unwrap().layers, 3);
        // Mistral-7B-v0.1: every layer slides over 4096.
        assert_eq!(
            local(r#"{"sliding_window": 4096}"#, 32, "MistralForCausalLM"),
            Some(LocalAttention { span: sliding(4096), layers: 32 })
        );
        // Qwen: off unless asked; from max_window_layers on when asked.
        assert_eq!(local(r#"{"sliding_window": 131072, "use_sliding_window": false, "max_window_layers": 28}"#, 28, "Qwen2"), None);
        assert_eq!(
            local(r#"{"sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 20}"#, 28, "Qwen2").unwrap().layers,
            8
        );
        // Gemma-2 alternates; Gemma-3 states its pattern; gpt-oss lists its layers.
        assert_eq!(local(r#"{"sliding_window": 4096}"#, 42, "Gemma2ForCausalLM").unwrap().layers, 21);
        assert_eq!(local(r#"{"sliding_window": 1024, "sliding_window_pattern": 6}"#, 62, "Gemma3ForCausalLM").unwrap().layers, 52);
        let types =
            r#"{"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}"#;
        assert_eq!(local(types, 4, "GptOssForCausalLM"), Some(LocalAttention { span: sliding(128), layers: 2 }));
        // Nothing local: absent, null, zero, or listed layers without a span.
        for text in [r#"{}"#, r#"{"sliding_window": null}"#, r#"{"sliding_window": 0}"#, r#"{"layer_types": ["sliding_attention"]}"#] {
            assert_eq!(local(text, 4, "X"), None, "{text}");
        }
    }

    /// Brute force: Σ over positions of the keys each reads, itself included.
    fn brute_pairs(span: AttentionSpan, start: u64, end: u64) -> f64 {
        (start..end).map(|q| span.keys_before(q) as f64 + 1.0).sum()
    }

    fn span() -> impl Strategy<Value = AttentionSpan> {
        prop_oneof![
            (1u32..64).prop_map(|window_tokens| AttentionSpan::Sliding { window_tokens }),
            (1u32..64).prop_map(|chunk_tokens| AttentionSpan::Chunked { chunk_tokens }),
        ]
    }

    proptest! {
        #[test]
        fn closed_forms_match_a_brute_force_count(span in span(), start in 0u64..300, len in 0u64..300) {
            let closed = span.pairs_through(start + len) - span.pairs_through(start);
            prop_assert_eq!(closed, brute_pairs(span, start, start + len));
            prop_assert!(span.keys_before(start) <= start);
        }

        /// All layers local: the blend is exactly the local count; none
        /// past the first window or chunk reads more than full attention.
        #[test]
        fn an_all_local_model_reads_its_span_and_never_more(span in span(), computed in 0u32..300, new in 1u32..300) {
            let mix = AttentionMix::new(LocalAttention { span, layers: 8 }, 8);
            prop_assert_eq!(mix.decode_context(computed), span.keys_before(u64::from(computed)) as f64);
            let full = brute_pairs(AttentionSpan::Sliding { window_tokens: u32::MAX }, u64::from(computed), u64::from(computed + new));
            let expected = brute_pairs(span, u64::from(computed), u64::from(computed + new)) / full;
            prop_assert!((mix.prefill_scale(computed, new) - expected).abs() < 1e-12);
            prop_assert!(mix.prefill_scale(computed, new) <= 1.0 + 1e-12);
        }

        /// A quarter of the layers local: a quarter of the way from full to local.
        #[test]
        fn a_partly_local_model_blends_by_its_layers(span in span(), computed in 0u32..300, new in 1u32..300) {
            let (all, quarter) = (AttentionMix::new(LocalAttention { span, layers: 4 }, 4), AttentionMix::new(LocalAttention { span, layers: 1 }, 4));
            let c = f64::from(computed);
            prop_assert!((quarter.decode_context(computed) - (0.75 * c + 0.25 * all.decode_context(computed))).abs() < 1e-9);
            prop_assert!((quarter.prefill_scale(computed, new) - (0.75 + 0.25 * all.prefill_scale(computed, new))).abs() < 1e-12);
        }
    }
}
