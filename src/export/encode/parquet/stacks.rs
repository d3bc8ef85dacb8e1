//! `stacks.parquet`: every stack of the snapshot (those of events, blocks and segments),
//! one row per frame, depth 0 the innermost. Names and file names are a dictionary over
//! the snapshot's interned strings, keyed by the frames' string ids.

use std::sync::Arc;

use arrow_array::UInt32Array;
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use super::columns::{FileKey, dict_field, file_column, file_field};
use super::table::{Table, TableError, batch};
use crate::model::{Snapshot, StackId, StrId};

/// The table's schema.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        file_field(),
        Field::new("stack_id", DataType::UInt32, false),
        Field::new("depth", DataType::UInt32, false),
        dict_field("name", false),
        dict_field("filename", false),
        Field::new("line", DataType::Int64, true),
    ]))
}

fn key(id: StrId) -> Result<i32, TableError> {
    i32::try_from(id.0)
        .map_err(|_| Table::Stacks.arrow_error(ArrowError::DictionaryKeyOverflowError))
}

/// The frames of every non-empty stack of `snap`, by stack id.
pub fn batch_of(key_: &FileKey, snap: &Snapshot) -> Result<RecordBatch, TableError> {
    let n: usize = (1..snap.stacks.len())
        .map(|s| snap.stacks.get(StackId(s as u32)).len())
        .sum();
    let mut stack_id = Vec::with_capacity(n);
    let mut depth = Vec::with_capacity(n);
    let mut name = Vec::with_capacity(n);
    let mut filename = Vec::with_capacity(n);
    let mut line = Vec::with_capacity(n);
    for s in 1..snap.stacks.len() as u32 {
        for (d, &f) in snap.stacks.get(StackId(s)).iter().enumerate() {
            let frame = snap.frames.get(f);
            stack_id.push(s);
            depth.push(d as u32);
            name.push(key(frame.name)?);
            filename.push(key(frame.filename)?);
            line.push(frame.line.known());
        }
    }
    let strings: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..snap.strings.len()).map(|i| snap.strings.get(StrId(i as u32))),
    ));
    let dict = |keys: Vec<i32>| -> Result<ArrayRef, TableError> {
        DictionaryArray::<Int32Type>::try_new(Int32Array::from(keys), Arc::clone(&strings))
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| Table::Stacks.arrow_error(e))
    };
    batch(
        Table::Stacks,
        schema(),
        vec![
            file_column(key_.file, n),
            Arc::new(UInt32Array::from(stack_id)),
            Arc::new(UInt32Array::from(depth)),
            dict(name)?,
            dict(filename)?,
            Arc::new(Int64Array::from(line)),
        ],
    )
}
