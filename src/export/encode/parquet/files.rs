//! `files.parquet`: one row per file and device (a file without devices gets one row
//! with a null device): how it was written and what its end state holds, from `summary`.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{FileKey, file_column, run_fields};
use super::table::{Table, TableError, batch};
use crate::analysis::summary::Summary;

/// The table's schema.
pub fn schema() -> SchemaRef {
    let mut fields = run_fields().to_vec();
    fields.extend([
        Field::new("producer", DataType::Utf8, false),
        Field::new("format", DataType::Utf8, false),
        Field::new("pickle_protocol", DataType::Int32, true),
        Field::new("compression", DataType::Utf8, false),
        Field::new("file_bytes", DataType::UInt64, false),
        Field::new("reserved_bytes", DataType::UInt64, false),
        Field::new("allocated_bytes", DataType::UInt64, false),
        Field::new("requested_bytes", DataType::UInt64, false),
        Field::new("trace_events", DataType::UInt64, false),
    ]);
    Arc::new(Schema::new(fields))
}

/// One device's figures.
struct Row {
    device: Option<i64>,
    reserved: u64,
    allocated: u64,
    requested: u64,
    events: u64,
}

/// The rows of one file: `summary` of it, and its size on disk.
pub fn batch_of(key: &FileKey, s: &Summary, file_bytes: u64) -> Result<RecordBatch, TableError> {
    let rows: Vec<Row> = if s.devices.is_empty() {
        vec![Row {
            device: None,
            reserved: 0,
            allocated: 0,
            requested: 0,
            events: 0,
        }]
    } else {
        s.devices
            .iter()
            .map(|d| Row {
                device: Some(d.device),
                reserved: d.totals.reserved_bytes,
                allocated: d.totals.allocated_bytes,
                requested: d.totals.requested_bytes,
                events: d.totals.trace_events,
            })
            .collect()
    };
    let n = rows.len();
    let text = |v: &str| -> ArrayRef { Arc::new(StringArray::from(vec![v; n])) };
    let col = |f: fn(&Row) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(f)))
    };
    batch(
        Table::Files,
        schema(),
        vec![
            file_column(key.file, n),
            Arc::new(UInt64Array::from(vec![key.rank; n])),
            Arc::new(StringArray::from(vec![key.step; n])),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.device))),
            text(&s.format.producer),
            text(s.format.container.as_str()),
            Arc::new(Int32Array::from(vec![
                s.format
                    .pickle_protocol
                    .map(i32::from);
                n
            ])),
            text(s.format.compression.as_str()),
            Arc::new(UInt64Array::from(vec![file_bytes; n])),
            col(|r| r.reserved),
            col(|r| r.allocated),
            col(|r| r.requested),
            col(|r| r.events),
        ],
    )
}
