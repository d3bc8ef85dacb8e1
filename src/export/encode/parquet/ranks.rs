//! `ranks.parquet`: the `ranks` report's rows, one per file and device, a file that could
//! not be read as one row with its error.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{file_values, run_fields};
use super::table::{Table, TableError, batch};
use crate::analysis::ranks::RankRow;

/// The table's schema.
pub fn schema() -> SchemaRef {
    let mut fields = run_fields().to_vec();
    fields.extend([
        Field::new("peak_requested_bytes", DataType::UInt64, false),
        Field::new("end_allocated_bytes", DataType::UInt64, false),
        Field::new("growth_bytes_per_window", DataType::UInt64, false),
        Field::new("top_suspect", DataType::Utf8, true),
        Field::new("top_suspect_bytes_per_window", DataType::UInt64, false),
        Field::new("windows", DataType::UInt64, false),
        Field::new("verdicts", DataType::Boolean, false),
        Field::new("outlier", DataType::Boolean, false),
        Field::new("disagrees", DataType::Boolean, false),
        Field::new("error", DataType::Utf8, true),
        Field::new("error_kind", DataType::Utf8, true),
    ]);
    Arc::new(Schema::new(fields))
}

/// `rows` as a batch. `steps`: whether the rows' files were found in a run directory
/// (their step is the folder's); files given by name have a null step.
pub fn batch_of(rows: &[RankRow], steps: bool) -> Result<RecordBatch, TableError> {
    let u64s = |f: fn(&RankRow) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(f)))
    };
    let bools = |f: fn(&RankRow) -> bool| -> ArrayRef {
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(f(r)))))
    };
    batch(
        Table::Ranks,
        schema(),
        vec![
            file_values(rows.iter().map(|r| r.file.as_str())),
            Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.rank))),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| steps.then_some(r.step.as_str())),
            )),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.device))),
            u64s(|r| r.peak_requested_bytes),
            u64s(|r| r.end_allocated_bytes),
            u64s(|r| r.growth_bytes_per_window),
            Arc::new(StringArray::from_iter(
                rows.iter()
                    .map(|r| r.top_suspect.as_ref().map(|s| s.label.as_str())),
            )),
            u64s(|r| r.top_suspect_bytes_per_window),
            u64s(|r| r.windows),
            bools(|r| r.verdicts),
            bools(|r| r.outlier),
            bools(|r| r.disagrees),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.error.as_deref()),
            )),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.error_kind.map(|k| k.as_str())),
            )),
        ],
    )
}
