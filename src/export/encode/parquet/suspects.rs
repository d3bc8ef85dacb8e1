//! `suspects.parquet`: the leak finder's suspects (kinds `leak` and `retained`), one row
//! per device and site, largest rate first, as `leaks` lists them, each with the role of
//! most of its survivor bytes.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{FileKey, file_column, file_field, site_columns, site_fields};
use super::table::{Table, TableError, batch};
use crate::analysis::leaks::Growth;

/// The table's schema.
pub fn schema() -> SchemaRef {
    let mut fields = vec![file_field(), Field::new("device", DataType::Int64, false)];
    fields.extend(site_fields());
    fields.extend([
        Field::new("kind", DataType::Utf8, false),
        Field::new("bytes_per_window", DataType::UInt64, false),
        Field::new("windows_grown", DataType::UInt64, false),
        Field::new("windows_total", DataType::UInt64, false),
        Field::new("onset_window", DataType::UInt64, false),
        Field::new("held_at_most", DataType::UInt64, false),
        Field::new("at_end", DataType::UInt64, false),
        Field::new("role", DataType::Utf8, false),
    ]);
    Arc::new(Schema::new(fields))
}

/// The suspects of one file: `(device, suspects)` per device.
pub fn batch_of(key: &FileKey, devices: &[(i64, &[Growth])]) -> Result<RecordBatch, TableError> {
    let rows: Vec<(i64, &Growth)> = devices
        .iter()
        .flat_map(|(d, g)| g.iter().map(move |g| (*d, g)))
        .collect();
    let u64s = |f: fn(&Growth) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| f(r.1))))
    };
    let mut columns = vec![
        file_column(key.file, rows.len()),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
    ];
    columns.extend(site_columns(rows.iter().map(|r| &r.1.site)));
    columns.extend([
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.1.kind.as_str()),
        )) as ArrayRef,
        u64s(|g| g.bytes_per_window),
        u64s(|g| g.windows_growing),
        u64s(|g| g.windows_total),
        u64s(|g| g.onset_window),
        u64s(|g| g.retained_bytes),
        u64s(|g| g.bytes_at_end),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.1.role.as_str()),
        )),
    ]);
    batch(Table::Suspects, schema(), columns)
}
