//! `top_sites.parquet`: what holds memory at the end, at the peak and at the first OOM
//! of each device, every site (no limit), largest first, as `top --at` lists them, each
//! with the role of most of its bytes.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{FileKey, file_column, file_field, site_columns, site_fields};
use super::table::{Table, TableError, batch};
use crate::analysis::At;
use crate::analysis::top::{DeviceTop, TopRow};

/// The points the table holds, as its `point` column names them.
pub const POINTS: [(At, &str); 3] = [(At::End, "end"), (At::Peak, "peak"), (At::Oom, "oom")];

/// The table's schema.
pub fn schema() -> SchemaRef {
    let mut fields = vec![
        file_field(),
        Field::new("device", DataType::Int64, false),
        Field::new("point", DataType::Utf8, false),
    ];
    fields.extend(site_fields());
    fields.extend([
        Field::new("bytes", DataType::UInt64, false),
        Field::new("blocks", DataType::UInt64, false),
        Field::new("role", DataType::Utf8, false),
    ]);
    Arc::new(Schema::new(fields))
}

/// The rows of one file: each device's `top` at each point that exists on it, with the
/// point's name (`end`, `peak`, `oom`).
pub fn batch_of(key: &FileKey, tops: &[(&str, &DeviceTop)]) -> Result<RecordBatch, TableError> {
    let rows: Vec<(i64, &str, &TopRow)> = tops
        .iter()
        .flat_map(|(point, t)| t.rows.iter().map(move |r| (t.device, *point, r)))
        .collect();
    let mut columns = vec![
        file_column(key.file, rows.len()),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
    ];
    columns.extend(site_columns(rows.iter().map(|r| &r.2.site)));
    columns.extend([
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.2.bytes),
        )) as ArrayRef,
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.2.blocks),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.2.role.as_str()),
        )),
    ]);
    batch(Table::TopSites, schema(), columns)
}
