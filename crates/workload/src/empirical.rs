//! Empirical probability mass functions: how they are written (inline in a
//! spec, in a JSON/YAML file, or inside a ServeGen `chunk-*-dataset.json`)
//! and how they are read.
//!
//! A [`Pdf`] is a list of `(value, weight)` pairs. Written as a map, keys are
//! the values (`{128: 0.25, 256: 0.75}`); written as a list, the index is the
//! value (`[0.0, 0.5, 0.5]` puts half the mass on 1 and half on 2), which is
//! the "PDF array" of the spec and of ServeGen's loader. Weights need not
//! sum to 1: they are normalised when the sampler is built.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::WorkloadError;

/// A probability mass function over numbers: `(value, weight)` pairs in the
/// order written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pdf(pub Vec<(f64, f64)>);

struct Number(f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Number, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Number, E> {
                v.trim().parse().map(Number).map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Pdf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Pdf, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pdf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of value to probability, or a list of probabilities indexed by value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pdf, A::Error> {
                let mut pairs = Vec::new();
                while let Some((Number(k), Number(v))) = map.next_entry()? {
                    pairs.push((k, v));
                }
                Ok(Pdf(pairs))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Pdf, A::Error> {
                let mut pairs = Vec::new();
                while let Some(Number(v)) = seq.next_element()? {
                    pairs.push((pairs.len() as f64, v));
                }
                Ok(Pdf(pairs))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Pdf {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for &(k, v) in &self.0 {
            if k.fract() == 0.0 && (0.0..9.0e15).contains(&k) {
                m.serialize_entry(&(k as u64), &v)?;
            } else {
                m.serialize_entry(&k, &v)?;
            }
        }
        m.end()
    }
}

impl Pdf {
    /// Checks the weights: finite, non-negative, not all zero, with a finite
    /// sum; values finite.
    pub fn check(&self) -> Result<(), String> {
        if self.0.is_empty() {
            return Err("the distribution is empty".into());
        }
        for &(k, v) in &self.0 {
            if !k.is_finite() {
                return Err(format!("value {k} is not a finite number"));
            }
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("probability {v} of value {k} must be a finite number ≥ 0"));
            }
        }
        let total = self.0.iter().map(|p| p.1).sum::<f64>();
        if total <= 0.0 {
            return Err("all probabilities are zero".into());
        }
        if !total.is_finite() {
            return Err("the probabilities add up to more than the largest number; scale them down (only their ratios matter)".into());
        }
        Ok(())
    }
}

/// Parses one field of a ServeGen dataset: a Python dict literal such as
/// `"{224: 0.0003, 225: 0.0008}"` (integer or float keys, float values).
pub fn parse_python_dict(text: &str) -> Result<Pdf, String> {
    let body = text.trim();
    let body = body
        .strip_prefix('{')
        .and_then(|b| b.strip_suffix('}'))
        .ok_or_else(|| format!("expected a {{value: probability, ...}} dict, got {:?}", truncate(body)))?;
    let mut pairs = Vec::new();
    for item in body.split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (k, v) = item.split_once(':').ok_or_else(|| format!("expected `value: probability`, got {item:?}"))?;
        let key: f64 = k.trim().parse().map_err(|_| format!("{:?} is not a number", k.trim()))?;
        let val: f64 = v.trim().parse().map_err(|_| format!("{:?} is not a number", v.trim()))?;
        pairs.push((key, val));
    }
    Ok(Pdf(pairs))
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

/// One ServeGen `chunk-*-dataset.json`: window start (seconds) → field name →
/// PDF. Windows whose fields are all empty dicts are dropped, as ServeGen's
/// loader does.
#[derive(Clone, Debug, Default)]
pub struct ServeGenDataset {
    /// Windows in increasing start time.
    pub windows: BTreeMap<u64, BTreeMap<String, Pdf>>,
}

impl ServeGenDataset {
    /// Reads and parses a dataset file.
    pub fn load(path: &Path) -> Result<ServeGenDataset, WorkloadError> {
        let text = blis_data::textfile::read(path).map_err(|e| WorkloadError::read(path, e))?;
        let raw: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_str(&text).map_err(|e| {
            WorkloadError::spec(
                path.display().to_string(),
                ".",
                format!("not a ServeGen dataset (window → field → \"{{value: prob}}\"): {e}"),
            )
        })?;
        let mut windows = BTreeMap::new();
        for (ts, fields) in raw {
            let start: u64 = ts
                .parse()
                .map_err(|_| WorkloadError::spec(path.display().to_string(), ts.as_str(), "window keys must be whole seconds"))?;
            let mut parsed = BTreeMap::new();
            for (name, dict) in fields {
                let pdf =
                    parse_python_dict(&dict).map_err(|e| WorkloadError::spec(path.display().to_string(), format!("{ts}.{name}"), e))?;
                if pdf.0.is_empty() {
                    parsed.clear();
                    break;
                }
                parsed.insert(name, pdf);
            }
            if !parsed.is_empty() {
                windows.insert(start, parsed);
            }
        }
        Ok(ServeGenDataset { windows })
    }

    /// The window covering time `t_s`: the last one starting at or before it.
    pub fn window_at(&self, t_s: u64) -> Option<u64> {
        self.windows.range(..=t_s).next_back().map(|(&k, _)| k)
    }
}

/// Parsed data files shared by every reference a spec makes to them, so a
/// ServeGen dataset referenced by a hundred windows is read once.
#[derive(Default)]
pub struct FileCache {
    datasets: BTreeMap<PathBuf, Arc<ServeGenDataset>>,
    pdfs: BTreeMap<PathBuf, Arc<Pdf>>,
}

impl FileCache {
    /// The ServeGen dataset at `path`.
    pub fn dataset(&mut self, path: &Path) -> Result<Arc<ServeGenDataset>, WorkloadError> {
        if let Some(d) = self.datasets.get(path) {
            return Ok(d.clone());
        }
        let d = Arc::new(ServeGenDataset::load(path)?);
        self.datasets.insert(path.to_path_buf(), d.clone());
        Ok(d)
    }

    /// The PDF file at `path` (JSON or YAML; a map or a list, see [`Pdf`]).
    pub fn pdf(&mut self, path: &Path) -> Result<Arc<Pdf>, WorkloadError> {
        if let Some(p) = self.pdfs.get(path) {
            return Ok(p.clone());
        }
        // JSON (the usual form of a large PDF) is streamed from the file by
        // serde_json, which builds the pairs as it reads: memory is the
        // pairs (16 bytes each), not the text. Anything else (YAML, JSON
        // with YAML-only forms such as unquoted keys, or a mistake) is read
        // whole for the YAML reader, whose errors name the key path and line.
        let file = std::fs::File::open(path).map_err(|e| WorkloadError::read(path, e))?;
        let limited = std::io::Read::take(file, blis_data::textfile::MAX_WHOLE_FILE_BYTES);
        let pdf: Pdf = match serde_json::from_reader(std::io::BufReader::new(limited)) {
            Ok(pdf) => pdf,
            Err(_) => {
                let text = blis_data::textfile::read(path).map_err(|e| WorkloadError::read(path, e))?;
                blis_data::yaml::from_str(&text).map_err(|e| crate::error::from_yaml(&path.display().to_string(), e))?
            }
        };
        let p = Arc::new(pdf);
        self.pdfs.insert(path.to_path_buf(), p.clone());
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_dicts_parse() {
        let p = parse_python_dict("{224: 0.25, 225: 3e-1, 0.5: 0.45,}").unwrap();
        assert_eq!(p.0, vec![(224.0, 0.25), (225.0, 0.3), (0.5, 0.45)]);
        assert_eq!(parse_python_dict("{}").unwrap().0, vec![]);
        assert!(parse_python_dict("[1, 2]").is_err());
        assert!(parse_python_dict("{a: 1}").unwrap_err().contains("\"a\""));
    }

    #[test]
    fn pdfs_read_as_maps_or_arrays() {
        let m: Pdf = blis_data::yaml::from_str("{100: 0.5, '200': 0.5}").unwrap();
        assert_eq!(m.0, vec![(100.0, 0.5), (200.0, 0.5)]);
        let a: Pdf = serde_json::from_str("[0.0, 0.25, 0.75]").unwrap();
        assert_eq!(a.0, vec![(0.0, 0.0), (1.0, 0.25), (2.0, 0.75)]);
        assert!(Pdf(vec![(1.0, -0.5)]).check().is_err());
        assert!(Pdf(vec![(1.0, 0.0)]).check().is_err());
        assert!(Pdf(vec![]).check().is_err());
        let overflowing = Pdf(vec![(100.0, 1e308), (200.0, 1e308)]).check().unwrap_err();
        assert!(overflowing.contains("scale them down"), "{overflowing}");
        assert_eq!(serde_yaml_ng::to_string(&Pdf(vec![(3.0, 0.5), (0.25, 0.5)])).unwrap(), "3: 0.5\n0.25: 0.5\n");
    }
}
