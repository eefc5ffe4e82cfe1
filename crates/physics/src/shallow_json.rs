//! Reading a JSON object whose fields of interest are small, in memory
//! about the size of its text, whatever else it carries.
//!
//! `serde_json::Value` costs ~9× the text for arrays of numbers, so a
//! `config.json` or GPU spec padded with a large unknown field (an
//! `id2label` table, a pasted tensor) would cost gigabytes to read through
//! it. [`object`] splits the top level into borrowed raw slices first and
//! builds a `Value` only for fields of at most [`MAX_FIELD_BYTES`] and for
//! strings (which cost about their text); larger arrays and objects keep
//! their key with a `null` value, so a "missing field" or "unknown field"
//! check still sees them.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Largest field, bytes of JSON text, that is materialised.
pub const MAX_FIELD_BYTES: usize = 64 << 10;

/// Why [`object`] failed.
#[derive(Debug)]
pub enum ObjectError {
    /// Not JSON (the parser's message).
    Syntax(String),
    /// JSON, but the top level is not an object.
    NotObject,
    /// A top-level field given twice (JSON parsers disagree on which wins).
    Duplicate(String),
}

impl std::fmt::Display for ObjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectError::Syntax(e) => write!(f, "not JSON: {e}"),
            ObjectError::NotObject => f.write_str("not a JSON object"),
            ObjectError::Duplicate(key) => write!(f, "field `{key}` is given twice; give each field once"),
        }
    }
}

/// The top-level object of `text`, fields over [`MAX_FIELD_BYTES`] as
/// `null`; `nested` names fields that are objects to read the same way
/// (a multimodal config's `text_config`) instead. A field given twice is
/// an error, as the YAML readers make it.
pub fn object(text: &str, nested: &[&str]) -> Result<Map<String, Value>, ObjectError> {
    let raw: Vec<(String, &RawValue)> = match serde_json::from_str::<RawFields<'_>>(text) {
        Ok(RawFields(fields)) => fields,
        Err(e) if e.is_data() => return Err(ObjectError::NotObject),
        Err(e) => return Err(ObjectError::Syntax(e.to_string())),
    };
    let mut map = Map::new();
    for (key, raw) in raw {
        let json = raw.get();
        // A string costs about its text, so it is read whatever its length.
        let value = if json.len() <= MAX_FIELD_BYTES || json.starts_with('"') {
            serde_json::from_str(json).map_err(|e| ObjectError::Syntax(e.to_string()))?
        } else if nested.contains(&key.as_str()) && json.starts_with('{') {
            Value::Object(object(json, &[])?)
        } else {
            Value::Null
        };
        if map.contains_key(&key) {
            return Err(ObjectError::Duplicate(key));
        }
        map.insert(key, value);
    }
    Ok(map)
}

/// The fields of a JSON object as borrowed raw text, in order, repeats
/// included.
struct RawFields<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawFields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawFields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, &'de RawValue>()? {
                    fields.push((k, v));
                }
                Ok(RawFields(fields))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_fields_and_strings_are_values_large_ones_null_and_nested_ones_read_alike() {
        let big = format!("[{}]", vec!["1"; MAX_FIELD_BYTES].join(","));
        let text = format!(r#"{{"a": 4, "junk": {big}, "text_config": {{"b": [2, 3], "junk2": {big}}}}}"#);
        let m = object(&text, &["text_config"]).unwrap();
        assert_eq!(m["a"], 4);
        assert!(matches!(object(r#"{"a": 1, "b": 2, "a": 4}"#, &[]), Err(ObjectError::Duplicate(k)) if k == "a"));
        assert_eq!(m["junk"], Value::Null);
        assert_eq!(m["text_config"]["b"], serde_json::json!([2, 3]));
        assert_eq!(m["text_config"]["junk2"], Value::Null);
        // A long string is read as it is (it costs its text), not as null.
        let name = "x".repeat(MAX_FIELD_BYTES + 10);
        assert_eq!(object(&format!(r#"{{"name": "{name}"}}"#), &[]).unwrap()["name"], name.as_str());
        // Small documents read exactly as serde_json reads them.
        let small = r#"{"x": {"y": [1.5, "z", null, true]}, "n": -3}"#;
        assert_eq!(Value::Object(object(small, &[]).unwrap()), serde_json::from_str::<Value>(small).unwrap());
        assert!(matches!(object("[1, 2]", &[]), Err(ObjectError::NotObject)));
        assert!(matches!(object("{\"a\": }", &[]), Err(ObjectError::Syntax(_))));
    }
}
