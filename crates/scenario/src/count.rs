//! Whole-number knob values written as people write them: `32768`, vLLM's
//! human-readable forms (`32k`, `25.6k`, `16Ki`), or scientific notation
//! (`1e6`), on the command line and in `--config` files alike.
//!
//! vLLM's `human_readable_int` has read `M`, `G` and `T` both as powers of
//! two (before 2026) and as powers of ten (after), so BLIS refuses those
//! three and asks for the unambiguous `m` (10⁶) or `Mi` (2²⁰).

/// The help line of commands whose flags take counts.
pub const HELP: &str = "Whole-number values (counts, tokens, the seed) may also be written as vLLM reads them: 32k = 32000, \
                        25.6k = 25600, 16Ki = 16K = 16384, 1Mi = 1048576, or 1e6; M, G and T are refused as ambiguous (write m or Mi).";

/// Decimal suffixes: a power of ten; the number may have decimals.
const DECIMAL: [(&str, u32); 4] = [("k", 3), ("m", 6), ("g", 9), ("t", 12)];

/// Binary suffixes: a power of two; the number must be whole. `K` is 2¹⁰
/// in every vLLM version that reads it.
const BINARY: [(&str, u32); 5] = [("Ki", 10), ("K", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)];

/// What a count may look like, for error messages.
const FORMS: &str = "a whole number such as 32768, 32k (k, m, g, t: powers of ten; 25.6k is 25600), \
                     32Ki (Ki or K, Mi, Gi, Ti: powers of two) or 1e6";

/// An unsigned integer type a count is read into.
pub trait Count: TryFrom<u64> {
    /// Its largest value.
    const MAX: u64;
}

impl Count for u32 {
    const MAX: u64 = u32::MAX as u64;
}

impl Count for u64 {
    const MAX: u64 = u64::MAX;
}

/// Parses a whole number in any of the forms above, refusing what does not
/// fit in `T`. A decimal suffix truncates a fractional result, as vLLM does.
pub fn parse_count<T: Count>(text: &str) -> Result<T, String> {
    let value = parse_u64(text.trim())?;
    T::try_from(value).map_err(|_| format!("{value} is too large: at most {}", T::MAX))
}

fn parse_u64(s: &str) -> Result<u64, String> {
    if s.starts_with('-') && s.len() > 1 {
        return Err(format!("`{s}` is negative: a count is 0 or more, {FORMS}"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() {
        return s.parse().map_err(|_| format!("{s} is too large"));
    }
    let digits_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    if let Some((_, power)) = DECIMAL.iter().find(|(name, _)| *name == suffix) {
        return scaled(number, *power).ok_or_else(|| format!("`{s}` is not {FORMS}"));
    }
    if let Some((_, shift)) = BINARY.iter().find(|(name, _)| *name == suffix) {
        let whole: u64 =
            number.parse().map_err(|_| format!("`{s}`: a binary suffix takes a whole number (decimals go with k, m, g, t)"))?;
        return whole.checked_mul(1 << shift).ok_or_else(|| format!("`{s}` is too large"));
    }
    if matches!(suffix, "M" | "G" | "T") {
        let lower = suffix.to_ascii_lowercase();
        return Err(format!(
            "`{s}` is ambiguous: vLLM versions read {suffix} as a power of two and as a power of ten; write {number}{lower} or {number}{suffix}i"
        ));
    }
    match scientific(s) {
        Some(v) => Ok(v),
        // A whole number, just beyond what is exact: say so, not "not a number".
        None if s.parse::<f64>().is_ok_and(|v| v.is_finite() && v > 9_007_199_254_740_992.0 && v.fract() == 0.0) => {
            Err(format!("`{s}` is too large: at most 9007199254740992 (2^53) in scientific notation"))
        }
        None => Err(format!("`{s}` is not {FORMS}")),
    }
}

/// `number` (digits with at most one decimal point) × 10^`power`, truncated, computed exactly.
fn scaled(number: &str, power: u32) -> Option<u64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let parse = |d: &str| if d.is_empty() { Some(0) } else { d.parse::<u64>().ok() };
    let unit = 10u64.pow(power);
    // Only the fraction's first `power` digits can reach the units.
    let kept = &fraction[..fraction.len().min(power as usize)];
    let fraction_part = parse(kept)? * 10u64.pow(power - kept.len() as u32);
    parse(whole)?.checked_mul(unit)?.checked_add(fraction_part)
}

/// A whole number in scientific notation (`1e6`, `2.5E3`), exactly representable.
fn scientific(s: &str) -> Option<u64> {
    if !s.contains(['e', 'E']) || s.starts_with(['-', '+']) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    // 2^53: every whole number up to it is exact in f64.
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_992.0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Issue 27: `1e30` was called "not a whole number".
    #[test]
    fn a_whole_number_too_large_says_so() {
        for s in ["1e30", "1E300"] {
            let e = parse_count::<u64>(s).unwrap_err();
            assert!(e.contains("is too large"), "{s}: {e}");
        }
        assert!(parse_count::<u64>("1.5e0").unwrap_err().contains("is not a whole number"));
    }

    #[test]
    fn vllm_forms_and_scientific_notation() {
        let ok = |s: &str| parse_count::<u64>(s).unwrap();
        assert_eq!(ok("32768"), 32768);
        assert_eq!(ok(" 32k "), 32_000);
        assert_eq!(ok("25.6k"), 25_600);
        assert_eq!(ok("1.2345k"), 1234, "truncated, as int(float(number) * mult)");
        assert_eq!(ok(".5m"), 500_000);
        assert_eq!(ok("2g"), 2_000_000_000);
        assert_eq!(ok("16Ki"), 16_384);
        assert_eq!(ok("16K"), 16_384);
        assert_eq!(ok("1Mi"), 1 << 20);
        assert_eq!(ok("1e6"), 1_000_000);
        assert_eq!(ok("2.5E3"), 2500);
    }

    #[test]
    fn refusals_say_why() {
        let err = |s: &str| parse_count::<u32>(s).unwrap_err();
        assert!(err("32M").contains("ambiguous") && err("32M").contains("32m or 32Mi"), "{}", err("32M"));
        assert!(err("1.5Ki").contains("whole number"), "{}", err("1.5Ki"));
        assert!(err("5g").contains("too large"), "{}", err("5g"));
        for bad in ["", "k", "-1", "1.5", "1e-3", "2.5e0", "1x", "1.2.3k", "nan", "inf", "1e400", "0x10", "1_000"] {
            assert!(parse_count::<u64>(bad).is_err(), "{bad:?} accepted");
        }
        assert!(err("1e400").contains("a whole number such as"), "{}", err("1e400"));
        assert!(err("-1").starts_with("`-1` is negative"), "{}", err("-1"));
        assert!(parse_count::<u64>("99999999999999999999").unwrap_err().contains("too large"));
    }

    proptest! {
        /// Every whole number reads back from its plain, k-suffixed and
        /// scientific spellings.
        #[test]
        fn spellings_of_one_number_agree(n in 0u64..1_000_000_000_000) {
            prop_assert_eq!(parse_count::<u64>(&n.to_string()), Ok(n));
            prop_assert_eq!(parse_count::<u64>(&format!("{}.{:03}k", n / 1000, n % 1000)), Ok(n));
            prop_assert_eq!(parse_count::<u64>(&format!("{n}e0")), Ok(n));
            prop_assert_eq!(parse_count::<u64>(&format!("{n}Ki")), Ok(n * 1024));
        }
    }
}
