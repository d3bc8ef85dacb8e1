//! Columns every table shares: the file (a dictionary of one string, however many rows),
//! and the four columns of a site object.

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int32Array, Int64Array, StringArray};
use arrow_schema::{DataType, Field};

use crate::attribute::Site;

/// Which file rows come from, and what its path says of the run.
#[derive(Clone, Copy, Debug)]
pub struct FileKey<'a> {
    /// The path as given or found.
    pub file: &'a str,
    /// The rank in the file's name (files found in a run directory), else `None`.
    pub rank: Option<u64>,
    /// The step of the file's folder (files found in a run directory), else `None`.
    pub step: Option<&'a str>,
}

/// A string column whose values repeat: dictionary-encoded in memory.
pub fn dict_field(name: &str, nullable: bool) -> Field {
    Field::new(
        name,
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
        nullable,
    )
}

/// The `file` field of every table.
pub fn file_field() -> Field {
    dict_field("file", false)
}

/// The columns that say which run file a row comes from, leading the tables that carry
/// them: the file, its rank and step (null for files given by name) and the device (null
/// for a file without devices).
pub fn run_fields() -> [Field; 4] {
    [
        file_field(),
        Field::new("rank", DataType::UInt64, true),
        Field::new("step", DataType::Utf8, true),
        Field::new("device", DataType::Int64, true),
    ]
}

/// `n` rows of `file`: one string and `n` zero keys.
pub fn file_column(file: &str, n: usize) -> ArrayRef {
    let keys = Int32Array::from(vec![0; n]);
    let values: ArrayRef = Arc::new(StringArray::from(vec![file]));
    Arc::new(DictionaryArray::<Int32Type>::new(keys, values))
}

/// A `file` column of rows from several files (each string stored once).
pub fn file_values<'s>(files: impl Iterator<Item = &'s str>) -> ArrayRef {
    Arc::new(files.collect::<DictionaryArray<Int32Type>>())
}

/// The fields of a site object: `name`, `filename`, `line` (null where unknown), `label`.
pub fn site_fields() -> [Field; 4] {
    [
        Field::new("name", DataType::Utf8, true),
        Field::new("filename", DataType::Utf8, true),
        Field::new("line", DataType::Int64, true),
        Field::new("label", DataType::Utf8, false),
    ]
}

/// The columns of [`site_fields`] for `sites`.
pub fn site_columns<'s>(sites: impl Iterator<Item = &'s Site> + Clone) -> [ArrayRef; 4] {
    [
        Arc::new(StringArray::from_iter(
            sites.clone().map(|s| s.name.as_deref()),
        )),
        Arc::new(StringArray::from_iter(
            sites.clone().map(|s| s.filename.as_deref()),
        )),
        Arc::new(Int64Array::from_iter(sites.clone().map(|s| s.line))),
        Arc::new(StringArray::from_iter_values(
            sites.map(|s| s.label.as_str()),
        )),
    ]
}
