//! A tokenizer approximation for servers that have no real tokenizer: text
//! is split on whitespace and each word becomes `ceil(bytes / 4)` tokens (the
//! usual ~4 bytes per BPE token of English text). Ids are hashes of the word
//! pieces, so equal text gives equal ids and the simulated prefix cache hits
//! on repeated prompts exactly as a real server's would.

use blis_engine::request::{TokenRun, TokenSeq};
use blis_engine::rng::mix64;

/// Bytes per token of the approximation.
pub const BYTES_PER_TOKEN: usize = 4;

/// Approximate token ids of `text`.
pub fn approximate_token_ids(text: &str) -> Vec<u32> {
    let mut ids = Vec::with_capacity(text.len() / BYTES_PER_TOKEN + 1);
    for word in text.split_whitespace() {
        for piece in word.as_bytes().chunks(BYTES_PER_TOKEN) {
            let mut h = 0x746f_6b65_6e00_u64;
            for &b in piece {
                h = mix64(h ^ u64::from(b));
            }
            ids.push((h >> 32) as u32);
        }
    }
    ids
}

const WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he", "this", "are",
    "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
];

/// Text of generated token `index` of the output stream `seed`: a short
/// English word with a leading space, deterministic in `(seed, index)`.
pub fn output_token_text(seed: u64, index: u32) -> &'static str {
    let w = WORDS[(mix64(seed ^ u64::from(index).rotate_left(40)) % WORDS.len() as u64) as usize];
    // Every word is stored once; the leading space is added by the caller's formatter.
    w
}

/// Smallest token id [`prompt_token_ids`] emits (skips special tokens).
pub const MIN_SYNTHETIC_ID: u32 = 1000;
/// Number of distinct synthetic ids: every id stays below 31 000, inside
/// the vocabulary of every model BLIS bundles (the smallest has 32 000).
pub const SYNTHETIC_ID_RANGE: u32 = 30_000;

fn synthetic_id(seed: u64, position: u32) -> u32 {
    MIN_SYNTHETIC_ID + (mix64(seed ^ u64::from(position).rotate_left(24)) % u64::from(SYNTHETIC_ID_RANGE)) as u32
}

/// Token ids to send for a simulated prompt (completions API): synthetic
/// runs map to ids in `[1000, 31000)` deterministically, so prompts that
/// share a run share a prefix on the real server too; explicit ids are sent
/// as they are.
pub fn prompt_token_ids(seq: &TokenSeq) -> Vec<u32> {
    let mut ids = Vec::with_capacity(seq.len() as usize);
    for run in seq.runs() {
        match run {
            TokenRun::Synthetic { seed, offset, len } => ids.extend((*offset..offset + len).map(|p| synthetic_id(*seed, p))),
            TokenRun::Explicit(x) => ids.extend_from_slice(x),
        }
    }
    ids
}

/// Text to send for a simulated prompt (chat API): one four-letter
/// pseudo-word (two syllables) per token, which the approximation of
/// [`approximate_token_ids`] counts as exactly one token. A real tokenizer
/// counts these words differently (often two tokens each); `blis observe`
/// records the server's own counts.
pub fn prompt_text(seq: &TokenSeq) -> String {
    const ONSETS: &[u8] = b"bdfgklmnprstvz";
    const VOWELS: &[u8] = b"aeiou";
    let ids = prompt_token_ids(seq);
    let mut text = String::with_capacity(ids.len() * 7);
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        let mut x = *id;
        for _ in 0..2 {
            text.push(ONSETS[(x % ONSETS.len() as u32) as usize] as char);
            x /= ONSETS.len() as u32;
            text.push(VOWELS[(x % VOWELS.len() as u32) as usize] as char);
            x /= VOWELS.len() as u32;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_about_four_bytes_per_token() {
        assert_eq!(approximate_token_ids("").len(), 0);
        assert_eq!(approximate_token_ids("hi there").len(), 3); // "hi" + "ther" "e"
        assert_eq!(approximate_token_ids("internationalization").len(), 5);
        assert_eq!(approximate_token_ids("a  b\n\tc").len(), 3);
    }

    #[test]
    fn shared_runs_give_shared_id_prefixes() {
        let mut a = TokenSeq::synthetic(1, 40);
        a.push(TokenRun::synthetic(2, 10));
        let mut b = TokenSeq::synthetic(1, 40);
        b.push(TokenRun::synthetic(3, 10));
        let (ia, ib) = (prompt_token_ids(&a), prompt_token_ids(&b));
        assert_eq!(ia.len(), 50);
        assert_eq!(ia[..40], ib[..40]);
        assert_ne!(ia[40..], ib[40..]);
        assert!(ia.iter().all(|&t| (MIN_SYNTHETIC_ID..MIN_SYNTHETIC_ID + SYNTHETIC_ID_RANGE).contains(&t)));
        let (ta, tb) = (prompt_text(&a), prompt_text(&b));
        assert_eq!(ta.split(' ').count(), 50);
        assert_eq!(ta.split(' ').take(40).collect::<Vec<_>>(), tb.split(' ').take(40).collect::<Vec<_>>());
    }

    #[test]
    fn equal_text_gives_equal_ids() {
        let a = approximate_token_ids("You are a helpful assistant. Tell me a joke.");
        let b = approximate_token_ids("You are a helpful assistant. Tell me a story.");
        assert_eq!(a[..a.len() - 2], b[..b.len() - 2]);
        assert_ne!(a.last(), b.last());
    }
}
