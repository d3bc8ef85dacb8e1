//! What the tables are: their names, files and schema names, how their columns are
//! encoded, and why one cannot be written.

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

/// The key-value metadata key naming a file's table schema and its version.
pub const SCHEMA_KEY: &str = "leakscope_schema";

/// Why a table cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The columns do not make a batch of the table's schema (a bug of ours).
    #[error("cannot build the {table} table: {source}")]
    Arrow {
        /// The table.
        table: &'static str,
        /// Cause.
        source: ArrowError,
    },
    /// The Parquet encoder or the output failed.
    #[error("cannot write the {table} table: {source}")]
    Parquet {
        /// The table.
        table: &'static str,
        /// Cause.
        source: parquet::errors::ParquetError,
    },
}

/// The tables, in the order they are documented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    /// One row per file and device: format and end-state totals.
    Files,
    /// The `ranks` report's rows (failed files included, with their error).
    Ranks,
    /// The leak finder's suspects (leaks and retained memory).
    Suspects,
    /// What holds memory at the end, the peak and the OOM, every site.
    TopSites,
    /// Every trace event of every device.
    Events,
    /// Every stack of the snapshot, one row per frame.
    Stacks,
    /// Each rank of a run directory read as a series across steps.
    Series,
}

impl Table {
    /// Every table.
    pub const ALL: [Table; 7] = [
        Table::Files,
        Table::Ranks,
        Table::Suspects,
        Table::TopSites,
        Table::Events,
        Table::Stacks,
        Table::Series,
    ];

    /// The table's name (`top_sites`).
    pub fn name(self) -> &'static str {
        match self {
            Table::Files => "files",
            Table::Ranks => "ranks",
            Table::Suspects => "suspects",
            Table::TopSites => "top_sites",
            Table::Events => "events",
            Table::Stacks => "stacks",
            Table::Series => "series",
        }
    }

    /// The file it is written to (`top_sites.parquet`).
    pub fn file_name(self) -> String {
        format!("{}.parquet", self.name())
    }

    /// The schema name and major version in the file's metadata
    /// (`leakscope.parquet.top_sites/1`).
    pub fn schema_name(self) -> String {
        format!("leakscope.parquet.{}/1", self.name())
    }

    /// Encodings per column: dictionaries where values repeat, delta encoding for the
    /// columns that grow (event indices, times), plain values for addresses. Row groups
    /// are cut by the writer.
    pub(crate) fn properties(self) -> WriterProperties {
        let mut b = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_write_batch_size(8192)
            .set_created_by(format!("leakscope {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                SCHEMA_KEY.to_string(),
                self.schema_name(),
            )]));
        let delta = match self {
            Table::Events => &["idx", "time_us"][..],
            Table::Stacks => &["depth"][..],
            _ => &[][..],
        };
        for c in delta {
            b = b
                .set_column_dictionary_enabled(ColumnPath::from(*c), false)
                .set_column_encoding(ColumnPath::from(*c), Encoding::DELTA_BINARY_PACKED);
        }
        if self == Table::Events {
            b = b.set_column_dictionary_enabled(ColumnPath::from("addr"), false);
        }
        b.build()
    }

    pub(crate) fn arrow_error(self, source: ArrowError) -> TableError {
        TableError::Arrow {
            table: self.name(),
            source,
        }
    }

    pub(crate) fn parquet_error(self, source: parquet::errors::ParquetError) -> TableError {
        TableError::Parquet {
            table: self.name(),
            source,
        }
    }
}

/// A batch of `table` (of `schema`) from its columns.
pub(crate) fn batch(
    table: Table,
    schema: SchemaRef,
    columns: Vec<ArrayRef>,
) -> Result<RecordBatch, TableError> {
    RecordBatch::try_new(schema, columns).map_err(|e| table.arrow_error(e))
}
