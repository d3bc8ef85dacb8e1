//! Writing a table: batches in, row groups of [`ROW_GROUP_ROWS`] out, each row group's
//! columns encoded in parallel.

use std::io::Write;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use parquet::arrow::ArrowSchemaConverter;
use parquet::arrow::arrow_writer::{ArrowRowGroupWriterFactory, compute_leaves};
use parquet::file::writer::SerializedFileWriter;
use rayon::prelude::*;

use super::table::{Table, TableError};
use super::{events, files, ranks, series, stacks, suspects, top_sites};

/// Rows per row group: a scan reads whole row groups, so they are large (a million
/// events are some 6 MB compressed).
pub const ROW_GROUP_ROWS: usize = 1 << 20;

/// The Arrow schema of `table`'s batches.
pub fn schema_of(table: Table) -> SchemaRef {
    match table {
        Table::Files => files::schema(),
        Table::Ranks => ranks::schema(),
        Table::Series => series::schema(),
        Table::Suspects => suspects::schema(),
        Table::TopSites => top_sites::schema(),
        Table::Events => events::schema(),
        Table::Stacks => stacks::schema(),
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
        let schema = schema_of(table);
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
