//! `series.parquet`: each rank of a run directory with three steps or more, its files read
//! as a series (`ranks`' `series`): the largest suspect across steps, one row per rank
//! and device.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{dict_field, file_values};
use super::table::{Table, TableError, batch};
use crate::report::RankSeries;

/// The table's schema.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        dict_field("dir", false),
        Field::new("rank", DataType::UInt64, true),
        Field::new("device", DataType::Int64, true),
        Field::new("steps", DataType::UInt64, false),
        Field::new("first_step", DataType::Utf8, true),
        Field::new("last_step", DataType::Utf8, true),
        Field::new("verdicts", DataType::Boolean, false),
        Field::new("suspects", DataType::UInt64, false),
        Field::new("top_site", DataType::Utf8, true),
        Field::new("top_kind", DataType::Utf8, true),
        Field::new("top_bytes_per_step", DataType::UInt64, false),
        Field::new("top_onset_step", DataType::Utf8, true),
        Field::new("error", DataType::Utf8, true),
    ]))
}

/// The rows of the run directory `dir` as a batch.
pub fn batch_of(dir: &str, rows: &[RankSeries]) -> Result<RecordBatch, TableError> {
    let strings = |f: &dyn Fn(&RankSeries) -> Option<&str>| -> ArrayRef {
        Arc::new(StringArray::from_iter(rows.iter().map(f)))
    };
    batch(
        Table::Series,
        schema(),
        vec![
            file_values(rows.iter().map(|_| dir)),
            Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.rank))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.device))),
            Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|r| r.steps.len() as u64),
            )),
            strings(&|r| r.steps.first().map(String::as_str)),
            strings(&|r| r.steps.last().map(String::as_str)),
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|r| Some(r.verdicts)),
            )),
            Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|r| r.suspects),
            )),
            strings(&|r| r.top_site.as_ref().map(|s| s.label.as_str())),
            strings(&|r| r.top_kind.map(|k| k.as_str())),
            Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|r| r.top_bytes_per_step),
            )),
            strings(&|r| r.top_onset_step.as_deref()),
            strings(&|r| r.error.as_deref()),
        ],
    )
}
