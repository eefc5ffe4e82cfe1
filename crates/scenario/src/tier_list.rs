//! The `kv_tiers` knob as written: `--kv-tiers` takes
//! `MEDIUM:SIZE[:GB_PER_S[:LATENCY]]` entries separated by commas
//! (`cpu:64,disk:1024:5:100us`; SIZE in GiB, or `…blocks`); a `--config`
//! file takes the same string or a list of mappings with the fields
//! `medium`, `size_gib` or `blocks`, `bandwidth_gb_s`, `latency`. Values are
//! checked when the tiers are resolved ([`crate::tiers`]).

use serde::{Deserialize, Serialize};

/// One entry of `kv_tiers`, as given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvTierSpec {
    /// `cpu`, `disk` or `remote`.
    pub medium: String,
    /// Capacity for the whole instance (all tensor-parallel shards), GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_gib: Option<f64>,
    /// Capacity in blocks, instead of `size_gib`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
    /// Host ↔ medium bandwidth per direction for the whole instance, GB/s
    /// (not for `cpu`: that is the GPU's PCIe link, `--kv-transfer-bandwidth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gb_s: Option<f64>,
    /// Fixed cost of one transfer to or from the medium (`100us`, `1ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<String>,
}

/// The `kv_tiers` knob: tiers nearest first.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct KvTierList(pub Vec<KvTierSpec>);

impl KvTierList {
    /// Reads the compact form `MEDIUM:SIZE[:GB_PER_S[:LATENCY]],…`.
    pub fn parse(text: &str) -> Result<KvTierList, String> {
        let mut tiers = Vec::new();
        for entry in text.split(',').map(str::trim) {
            let parts: Vec<&str> = entry.split(':').map(str::trim).collect();
            if parts.len() < 2 || parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
                return Err(format!("tier `{entry}`: expected MEDIUM:SIZE[:GB_PER_S[:LATENCY]], e.g. cpu:64 or disk:1024:5:100us"));
            }
            let number = |what: &str, t: &str| t.parse::<f64>().map_err(|_| format!("tier `{entry}`: {what} `{t}` is not a number"));
            let (size_gib, blocks) = match parts[1].strip_suffix("blocks") {
                Some(n) => (
                    None,
                    Some(n.trim().parse::<u64>().map_err(|_| format!("tier `{entry}`: `{}` is not a whole number of blocks", parts[1]))?),
                ),
                None => (Some(number("size (GiB)", parts[1].trim_end_matches("GiB"))?), None),
            };
            tiers.push(KvTierSpec {
                medium: parts[0].to_string(),
                size_gib,
                blocks,
                bandwidth_gb_s: parts.get(2).map(|b| number("bandwidth (GB/s)", b)).transpose()?,
                latency: parts.get(3).map(|l| l.to_string()),
            });
        }
        Ok(KvTierList(tiers))
    }
}

impl<'de> Deserialize<'de> for KvTierList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KvTierList, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => KvTierList::parse(&s).map_err(serde::de::Error::custom),
            v @ serde_json::Value::Array(_) => {
                serde_json::from_value::<Vec<KvTierSpec>>(v).map(KvTierList).map_err(serde::de::Error::custom)
            }
            _ => Err(serde::de::Error::custom(
                "expected a list of tiers (medium, size_gib or blocks, bandwidth_gb_s, latency) or MEDIUM:SIZE,…",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compact_form_reads_sizes_blocks_links_and_refuses_garbage() {
        let l = KvTierList::parse("cpu:64, disk:1024:5:100us,remote:100blocks").unwrap();
        assert_eq!(l.0.len(), 3);
        assert_eq!((l.0[0].medium.as_str(), l.0[0].size_gib, l.0[0].blocks), ("cpu", Some(64.0), None));
        assert_eq!((l.0[1].bandwidth_gb_s, l.0[1].latency.as_deref()), (Some(5.0), Some("100us")));
        assert_eq!(l.0[2].blocks, Some(100));
        for bad in ["cpu", "cpu:", "cpu:x", "disk:1:fast", "disk:1:2:3:4", "disk:xblocks"] {
            assert!(KvTierList::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_takes_the_compact_form_or_a_list_and_refuses_unknown_fields() {
        let compact: KvTierList = serde_json::from_value(serde_json::json!("cpu:8,disk:16")).unwrap();
        let list: KvTierList =
            serde_json::from_value(serde_json::json!([{ "medium": "cpu", "size_gib": 8 }, { "medium": "disk", "size_gib": 16 }])).unwrap();
        assert_eq!(compact, list);
        let err = serde_json::from_value::<KvTierList>(serde_json::json!([{ "medium": "cpu", "size": 8 }])).unwrap_err();
        assert!(err.to_string().contains("unknown field `size`"), "{err}");
    }
}
