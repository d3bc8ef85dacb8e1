//! Parquet tables (`leakscope export --parquet`): the session's reports and the model's
//! trace columns as Arrow record batches, written zstd-compressed with their schema name
//! (`leakscope.parquet.<table>/1`) in each file's key-value metadata (docs/schemas.md).
//!
//! One module per table builds its batches; [`TableWriter`] writes them to whatever
//! `Write` it is given (the session opens the files). Strings that repeat on every row
//! (the file, an event's action, a frame's name) are dictionary arrays in memory, built
//! from the model's interned tables without copying a string per row; the files carry no
//! Arrow schema, so every reader sees plain string columns.

mod columns;
pub mod events;
pub mod files;
pub mod ranks;
pub mod stacks;
pub mod suspects;
mod text;
pub mod top_sites;

use std::io::Write;
use std::sync::Arc;

use ::parquet::arrow::ArrowSchemaConverter;
use ::parquet::arrow::arrow_writer::{ArrowRowGroupWriterFactory, compute_leaves};
use ::parquet::basic::{Compression, Encoding, ZstdLevel};
use ::parquet::file::metadata::KeyValue;
use ::parquet::file::properties::WriterProperties;
use ::parquet::file::writer::SerializedFileWriter;
use ::parquet::schema::types::ColumnPath;
use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use rayon::prelude::*;

pub use columns::FileKey;
pub use text::text;

/// The key-value metadata key naming a file's table schema and its version.
pub const SCHEMA_KEY: &str = "leakscope_schema";

/// Rows per row group: a scan reads whole row groups, so they are large (a million
/// events are some 6 MB compressed).
pub const ROW_GROUP_ROWS: usize = 1 << 20;

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
        source: ::parquet::errors::ParquetError,
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
}

impl Table {
    /// Every table.
    pub const ALL: [Table; 6] = [
        Table::Files,
        Table::Ranks,
        Table::Suspects,
        Table::TopSites,
        Table::Events,
        Table::Stacks,
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

    /// The Arrow schema of its batches.
    pub fn schema(self) -> SchemaRef {
        match self {
            Table::Files => files::schema(),
            Table::Ranks => ranks::schema(),
            Table::Suspects => suspects::schema(),
            Table::TopSites => top_sites::schema(),
            Table::Events => events::schema(),
            Table::Stacks => stacks::schema(),
        }
    }

    /// Encodings per column: dictionaries where values repeat, delta encoding for the
    /// columns that grow (event indices, times), plain values for addresses. Row groups
    /// are cut by [`TableWriter`].
    fn properties(self) -> WriterProperties {
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

    fn parquet_error(self, source: ::parquet::errors::ParquetError) -> TableError {
        TableError::Parquet {
            table: self.name(),
            source,
        }
    }
}

/// One table's Parquet file being written: batches in, row groups of [`ROW_GROUP_ROWS`]
/// out (rows of small files gathered, a large file's cut), each row group's columns
/// encoded in parallel.
pub struct TableWriter<W: Write + Send> {
    table: Table,
    schema: SchemaRef,
    file: SerializedFileWriter<W>,
    factory: ArrowRowGroupWriterFactory,
    /// Rows of the next row group (slices of the batches written, not copies).
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    row_groups: usize,
    rows: u64,
}

impl<W: Write + Send> TableWriter<W> {
    /// Starts `table` on `out`.
    pub fn new(table: Table, out: W) -> Result<TableWriter<W>, TableError> {
        let props = Arc::new(table.properties());
        let schema = table.schema();
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)
            .map_err(|e| table.parquet_error(e))?;
        let file = SerializedFileWriter::new(out, parquet_schema.root_schema_ptr(), props)
            .map_err(|e| table.parquet_error(e))?;
        let factory = ArrowRowGroupWriterFactory::new(&file, Arc::clone(&schema));
        Ok(TableWriter {
            table,
            schema,
            file,
            factory,
            pending: Vec::new(),
            pending_rows: 0,
            row_groups: 0,
            rows: 0,
        })
    }

    /// The table.
    pub fn table(&self) -> Table {
        self.table
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Appends `batch` (of the table's schema).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), TableError> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(self.table.arrow_error(ArrowError::SchemaError(format!(
                "a batch of another schema for the {} table",
                self.table.name()
            ))));
        }
        let n = batch.num_rows();
        let mut at = 0;
        while at < n {
            let take = (ROW_GROUP_ROWS - self.pending_rows).min(n - at);
            self.pending.push(batch.slice(at, take));
            self.pending_rows += take;
            at += take;
            if self.pending_rows == ROW_GROUP_ROWS {
                self.flush()?;
            }
        }
        self.rows += n as u64;
        Ok(())
    }

    /// Encodes the pending rows as one row group, a column per task.
    fn flush(&mut self) -> Result<(), TableError> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let table = self.table;
        let perr = |e| table.parquet_error(e);
        let writers = self
            .factory
            .create_column_writers(self.row_groups)
            .map_err(perr)?;
        // Flat schemas: one leaf column (and one writer) per field.
        if writers.len() != self.schema.fields().len() {
            return Err(table.arrow_error(ArrowError::SchemaError(
                "nested columns are not supported".into(),
            )));
        }
        let (schema, pending) = (&self.schema, &self.pending);
        let chunks = writers
            .into_par_iter()
            .enumerate()
            .map(|(i, mut w)| {
                let field = &schema.fields()[i];
                for b in pending {
                    for leaf in compute_leaves(field, b.column(i))? {
                        w.write(&leaf)?;
                    }
                }
                w.close()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(perr)?;
        let mut rg = self.file.next_row_group().map_err(perr)?;
        for c in chunks {
            c.append_to_row_group(&mut rg).map_err(perr)?;
        }
        rg.close().map_err(perr)?;
        self.pending.clear();
        self.pending_rows = 0;
        self.row_groups += 1;
        Ok(())
    }

    /// Writes what is pending and the footer; returns the output and the rows written.
    pub fn finish(mut self) -> Result<(W, u64), TableError> {
        self.flush()?;
        let table = self.table;
        let out = self.file.into_inner().map_err(|e| table.parquet_error(e))?;
        Ok((out, self.rows))
    }
}

/// A batch of `table` from its columns.
pub(crate) fn batch(
    table: Table,
    columns: Vec<arrow_array::ArrayRef>,
) -> Result<RecordBatch, TableError> {
    RecordBatch::try_new(table.schema(), columns).map_err(|e| table.arrow_error(e))
}
