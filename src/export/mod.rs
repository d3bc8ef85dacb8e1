//! The export stage: what leakscope finds, in the formats other tools open. Parquet
//! tables for whole runs (`parquet`), a Perfetto timeline (`perfetto`) and pprof profiles
//! (`pprof`); `roles` gives each the memory roles it shows, `encode` writes the formats,
//! `text` says what was written. It sits above the session layer (which returns reports
//! only) and beside `render`: it loads files through the session and encodes typed
//! values itself.

pub mod encode;
mod parquet;
mod perfetto;
mod pprof;
mod roles;
pub mod text;

pub use parquet::{ExportSummary, Failed, TableSummary, export_parquet};
pub use perfetto::{PerfettoOptions, PerfettoSummary, export_perfetto};
pub use pprof::{PprofOptions, PprofSummary, export_pprof};

use std::path::PathBuf;

use crate::error::ErrorKind;
use crate::export::encode::parquet::TableError;
use crate::load::LoadOptions;
use crate::session::Found;
use crate::session::{Options, Session, SessionError};

/// How files are analysed and loaded for an export.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ExportOptions {
    /// The analyses' options (windows, grouping, filters), as for `ranks`.
    pub analysis: Options,
    /// Largest decompressed size accepted for `.gz` / `.zst` input.
    pub max_decompressed_bytes: u64,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            analysis: Options::default(),
            max_decompressed_bytes: crate::load::default_max_decompressed_bytes(),
        }
    }
}

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The output directory cannot be created.
    #[error("cannot create the output directory {}: {source}", dir.display())]
    OutDir {
        /// The directory.
        dir: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A table's file cannot be created or written.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A table cannot be encoded or written.
    #[error("{}: {source}", path.display())]
    Table {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: TableError,
    },
    /// A file cannot be loaded or analysed as asked.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The output is one of the inputs, or cannot be written whole.
    #[error(transparent)]
    Output(#[from] crate::files::OutputError),
    /// No input could be read. The tables are written all the same (the `ranks` table
    /// holds each input's error).
    #[error("no file could be read: {}", errors.join("; "))]
    NothingRead {
        /// Each input's error (each names its file).
        errors: Vec<String>,
        /// The first input's kind of failure.
        kind: ErrorKind,
    },
}

impl ExportError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ExportError::OutDir { .. } | ExportError::Io { .. } | ExportError::Table { .. } => {
                ErrorKind::Write
            }
            ExportError::Session(e) => e.kind(),
            ExportError::Output(e) => e.kind(),
            ExportError::NothingRead { kind, .. } => *kind,
        }
    }
}

/// Why one input of an export could not be read or analysed: its kind and its message
/// (which names the file).
#[derive(Clone, Debug)]
pub(super) struct Failure {
    pub kind: ErrorKind,
    pub message: String,
}

impl From<SessionError> for Failure {
    fn from(e: SessionError) -> Self {
        Failure {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// A file of the round loaded, or why it could not be.
pub(super) type Loaded = Result<Session, Failure>;

pub(super) fn open(f: &Found, opts: &ExportOptions, threads: bool) -> Loaded {
    let lo = LoadOptions {
        max_decompressed_bytes: opts.max_decompressed_bytes,
        threads,
        ..LoadOptions::default()
    };
    Session::open(&f.file, lo).map_err(Failure::from)
}
