//! A tokenizer approximation for servers that have no real tokenizer: text
//! is split on whitespace and each word becomes `ceil(bytes / 4)` tokens (the
//! usual ~4 bytes per BPE token of English text). Ids are hashes of the word
//! pieces, so equal text gives equal ids and the simulated prefix cache hits
//! on repeated prompts exactly as a real server's would.

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
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
];

/// Text of generated token `index` of the output stream `seed`: a short
/// English word with a leading space, deterministic in `(seed, index)`.
pub fn output_token_text(seed: u64, index: u32) -> &'static str {
    let w = WORDS[(mix64(seed ^ u64::from(index).rotate_left(40)) % WORDS.len() as u64) as usize];
    // Every word is stored once; the leading space is added by the caller's formatter.
    w
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
    fn equal_text_gives_equal_ids() {
        let a = approximate_token_ids("You are a helpful assistant. Tell me a joke.");
        let b = approximate_token_ids("You are a helpful assistant. Tell me a story.");
        assert_eq!(a[..a.len() - 2], b[..b.len() - 2]);
        assert_ne!(a.last(), b.last());
    }
}
