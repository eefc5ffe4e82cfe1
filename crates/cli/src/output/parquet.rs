//! `blis sweep --parquet`: the sweep's CSV, every row in point order, as a
//! typed Parquet file (pandas, polars, DuckDB and Spark read it directly).
//!
//! `point` is a required INT64; a knob column is DOUBLE when every value
//! it holds is a number, else UTF8; metric columns are optional DOUBLE
//! (empty in the CSV: null); `error` is optional UTF8. The CSV stays the
//! file a sweep streams to and resumes from; the Parquet file is written
//! from it once the sweep ends.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use parquet::basic::{ConvertedType, Repetition, Type as Physical};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;

/// A column's values: numbers (None = null) or text (None = null).
enum Column {
    Int(Vec<i64>),
    Double(Vec<Option<f64>>),
    Text(Vec<Option<String>>),
}

/// Writes the rows of `csv` (a sweep's output: header, then rows) to `out`,
/// sorted by `point`; `knob_columns` is how many columns after `point` are knobs.
pub fn write(csv: &Path, out: &mut (impl Write + Send), knob_columns: usize) -> anyhow::Result<()> {
    let mut reader = csv::Reader::from_path(csv).with_context(|| format!("reading {}", csv.display()))?;
    let header: Vec<String> = reader.headers().context("reading the CSV header")?.iter().map(str::to_string).collect();
    let mut rows: Vec<csv::StringRecord> = reader.records().collect::<Result<_, _>>().context("reading the CSV rows")?;
    let point = |r: &csv::StringRecord| r.get(0).and_then(|p| p.parse::<i64>().ok()).unwrap_or(i64::MAX);
    rows.sort_by_key(point);
    let text_column = |c: usize| rows.iter().map(|r| r.get(c).filter(|v| !v.is_empty()).map(str::to_string)).collect::<Vec<_>>();
    let mut columns = Vec::with_capacity(header.len());
    for (c, name) in header.iter().enumerate() {
        let texts = text_column(c);
        let numbers: Option<Vec<Option<f64>>> =
            texts.iter().map(|t| t.as_ref().map_or(Some(None), |t| t.parse::<f64>().ok().map(Some))).collect();
        let is_knob = (1..=knob_columns).contains(&c);
        columns.push(match (c, numbers) {
            (0, _) => Column::Int(rows.iter().map(point).collect()),
            (_, Some(n)) if name != "error" && (is_knob || c > knob_columns) => Column::Double(n),
            _ => Column::Text(texts),
        });
    }
    let fields = header
        .iter()
        .zip(&columns)
        .map(|(name, col)| {
            let (physical, repetition) = match col {
                Column::Int(_) => (Physical::INT64, Repetition::REQUIRED),
                Column::Double(_) => (Physical::DOUBLE, Repetition::OPTIONAL),
                Column::Text(_) => (Physical::BYTE_ARRAY, Repetition::OPTIONAL),
            };
            let mut b = Type::primitive_type_builder(name, physical).with_repetition(repetition);
            if matches!(col, Column::Text(_)) {
                b = b.with_converted_type(ConvertedType::UTF8);
            }
            b.build().map(Arc::new)
        })
        .collect::<Result<Vec<_>, _>>()
        .context("building the Parquet schema")?;
    let schema = Arc::new(Type::group_type_builder("sweep").with_fields(fields).build().context("building the Parquet schema")?);
    let mut writer = SerializedFileWriter::new(out, schema, Arc::new(WriterProperties::builder().build()))?;
    let mut group = writer.next_row_group()?;
    let mut i = 0;
    while let Some(mut col) = group.next_column()? {
        let levels = |present: &mut dyn Iterator<Item = bool>| present.map(i16::from).collect::<Vec<_>>();
        match &columns[i] {
            Column::Int(v) => {
                col.typed::<Int64Type>().write_batch(v, None, None)?;
            }
            Column::Double(v) => {
                let values: Vec<f64> = v.iter().flatten().copied().collect();
                col.typed::<DoubleType>().write_batch(&values, Some(&levels(&mut v.iter().map(Option::is_some))), None)?;
            }
            Column::Text(v) => {
                let values: Vec<ByteArray> = v.iter().flatten().map(|s| ByteArray::from(s.as_str())).collect();
                col.typed::<ByteArrayType>().write_batch(&values, Some(&levels(&mut v.iter().map(Option::is_some))), None)?;
            }
        }
        col.close()?;
        i += 1;
    }
    group.close()?;
    writer.close()?;
    Ok(())
}
