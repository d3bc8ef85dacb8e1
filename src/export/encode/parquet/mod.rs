//! Parquet tables (`leakscope export --parquet`): the session's reports and the model's
//! trace columns as Arrow record batches, written zstd-compressed with their schema name
//! (`leakscope.parquet.<table>/1`) in each file's key-value metadata (docs/schemas.md).
//! Within a major version columns are only added, after the others (the `role` columns
//! of `suspects`, `top_sites` and `events` came so); a removal or a change of meaning
//! bumps it.
//!
//! One module per table builds its batches; [`TableWriter`] writes them to whatever
//! `Write` it is given (the session opens the files). Strings that repeat on every row
//! (the file, an event's action and role, a frame's name) are dictionary arrays in memory, built
//! from the model's interned tables without copying a string per row; the files carry no
//! Arrow schema, so every reader sees plain string columns.

mod columns;
pub mod events;
pub mod files;
pub mod ranks;
pub mod series;
pub mod stacks;
pub mod suspects;
mod table;
mod text;
pub mod top_sites;
mod writer;

pub use columns::FileKey;
pub use table::{SCHEMA_KEY, Table, TableError};
pub use text::text;
pub use writer::{ROW_GROUP_ROWS, TableWriter, schema_of};
