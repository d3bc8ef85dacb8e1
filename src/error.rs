//! Typed errors of the library. Every load error says what went wrong, where (byte
//! offset or event index) and, where it helps, what to do.

use std::path::PathBuf;

/// Why a snapshot could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadErrorKind {
    /// The file could not be opened or read.
    #[error("cannot read the file: {0}")]
    Io(#[from] std::io::Error),
    /// The first bytes match no format leakscope reads.
    #[error(
        "not a memory snapshot: the first bytes ({0}) are neither a pickle, JSON, gzip, zstd nor a leakscope cache"
    )]
    UnknownFormat(String),
    /// Plain data, but not a memory snapshot (a dict with neither `segments` nor
    /// `device_traces`, say).
    #[error("not a memory snapshot: {0}")]
    NotASnapshot(String),
    /// The data ends in the middle of something.
    #[error(
        "the data ends at byte {offset} while reading {what}; the file is truncated (was the dump interrupted, or the download incomplete?)"
    )]
    Truncated {
        /// Where the data ended.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// An opcode that would build objects or run code: never executed.
    #[error(
        "not a plain snapshot: opcode {name} at byte {offset} would import or call code, which leakscope never does. Snapshots from torch.cuda.memory._dump_snapshot contain only dicts, lists, strings and numbers"
    )]
    Forbidden {
        /// Opcode name.
        name: &'static str,
        /// Byte offset of the opcode.
        offset: u64,
    },
    /// A byte that is not a pickle opcode.
    #[error(
        "invalid pickle opcode 0x{opcode:02x} at byte {offset}; the file is corrupt or not a pickle"
    )]
    BadOpcode {
        /// The byte.
        opcode: u8,
        /// Its offset.
        offset: u64,
    },
    /// The pickle is well-formed byte by byte but does not make sense as a value.
    #[error("malformed pickle at byte {offset}: {message}")]
    Malformed {
        /// Byte offset of the opcode that failed.
        offset: u64,
        /// What was wrong.
        message: String,
    },
    /// The data decodes but a snapshot field has the wrong shape.
    #[error("unexpected snapshot content at {place}: {message}")]
    Schema {
        /// Where: a path such as `segments[3].blocks[0]` or `trace entry 12 (byte 5120)`.
        place: String,
        /// What was expected.
        message: String,
    },
    /// JSON syntax error.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// A leakscope cache file that cannot be read.
    #[error("invalid leakscope cache file: {0}")]
    Cache(String),
    /// Decompressed data beyond the configured limit.
    #[error(
        "decompressed data exceeds the limit of {limit} bytes; raise it with --max-decompressed-bytes if the file is genuine"
    )]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// An error in the decompressed data of a compressed file (its offsets count
    /// decompressed bytes).
    #[error("{inner} (in the {format}-decompressed data)")]
    InDecompressed {
        /// gzip or zstd.
        format: &'static str,
        /// The error.
        inner: Box<LoadErrorKind>,
    },
    /// Compressed stream is corrupt.
    #[error("cannot decompress {format} data: {message}")]
    Decompress {
        /// gzip or zstd.
        format: &'static str,
        /// Decoder message.
        message: String,
    },
    /// The path names a directory.
    #[error("is a directory: use `ranks` or `export` for a run directory")]
    Directory,
    /// The path names something other than a regular file (a FIFO, a socket, a device,
    /// a terminal), which is never opened: reading a FIFO could wait forever.
    #[error(
        "not a regular file ({0}); leakscope reads snapshot files: save the data to a file first"
    )]
    NotRegular(&'static str),
    /// The file was cut short or rewritten while it was read.
    #[error(
        "the file changed while it was read (truncated or rewritten by another process, such as a job dumping the same path again); read it once it is written whole"
    )]
    Changed,
    /// Valid data that builds more than any snapshot holds: past the loader's memory
    /// bound (3 bytes per input byte read, plus 48 MiB), the load stops rather than grow.
    #[error(
        "the file builds more data than any memory snapshot holds: {}the loader would hold {held} bytes, over its bound of {allowed} (3 bytes per input byte read, plus 48 MiB); the file is crafted or corrupt",
        memory_place(*offset, place)
    )]
    MemoryBound {
        /// Byte offset of the input where the bound was passed, when there is one.
        offset: Option<u64>,
        /// What was being built.
        place: String,
        /// Bytes the loader would hold.
        held: u64,
        /// Bytes it may hold at that point.
        allowed: u64,
    },
}

fn memory_place(offset: Option<u64>, place: &str) -> String {
    match (offset, place.is_empty()) {
        (Some(o), true) => format!("at byte {o} "),
        (Some(o), false) => format!("at byte {o} ({place}) "),
        (None, false) => format!("while building {place} "),
        (None, true) => String::new(),
    }
}

/// A load error, with the file it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "<input>".into()))]
pub struct LoadError {
    /// The file, when known.
    pub path: Option<PathBuf>,
    /// What went wrong (part of the message, so not repeated as a source).
    pub kind: LoadErrorKind,
}

impl From<LoadErrorKind> for LoadError {
    fn from(kind: LoadErrorKind) -> Self {
        LoadError { path: None, kind }
    }
}

impl LoadError {
    /// Attaches the file name.
    pub fn with_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }
}

/// Errors of writing outputs (cache files, JSON exports).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// I/O failure.
    #[error("cannot write {path}: {source}")]
    Io {
        /// Destination.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Encoding failure.
    #[error("cannot encode {what}: {message}")]
    Encode {
        /// What was encoded.
        what: &'static str,
        /// Cause.
        message: String,
    },
}

/// What kind of failure an error is, whatever its words: what scripts, the Python
/// package (one exception class each) and the rows of a run decide on. A reworded message
/// never changes behaviour.
///
/// ```
/// use leakscope::{ErrorKind, LoadErrorKind};
/// let e = LoadErrorKind::Truncated { offset: 10, what: "a string" };
/// assert_eq!(e.kind(), ErrorKind::Truncated);
/// assert_eq!(ErrorKind::NotASnapshot.as_str(), "not_a_snapshot");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input could not be opened or read (missing, a directory, not a regular file,
    /// permissions).
    Io,
    /// Readable data that is not a memory snapshot (another format, other JSON).
    NotASnapshot,
    /// A snapshot cut short, or changed while it was read.
    Truncated,
    /// A snapshot whose bytes or fields are wrong (corrupt pickle, JSON, compression,
    /// cache, fields of the wrong shape).
    Corrupt,
    /// A pickle that would import or call code: never executed.
    Unsafe,
    /// Past a limit on decompressed bytes or on the memory a file may build.
    TooLarge,
    /// A request that does not fit the input (no such device, point or window, too few
    /// files): the input is fine, the arguments are not.
    Usage,
    /// An output that could not be written.
    Write,
}

impl ErrorKind {
    /// The word JSON and the Python package use.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Io => "io",
            ErrorKind::NotASnapshot => "not_a_snapshot",
            ErrorKind::Truncated => "truncated",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unsafe => "unsafe",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Usage => "usage",
            ErrorKind::Write => "write",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl LoadErrorKind {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LoadErrorKind::Io(_) | LoadErrorKind::Directory | LoadErrorKind::NotRegular(_) => {
                ErrorKind::Io
            }
            LoadErrorKind::UnknownFormat(_) | LoadErrorKind::NotASnapshot(_) => {
                ErrorKind::NotASnapshot
            }
            LoadErrorKind::Truncated { .. } | LoadErrorKind::Changed => ErrorKind::Truncated,
            LoadErrorKind::Forbidden { .. } => ErrorKind::Unsafe,
            LoadErrorKind::TooLarge { .. } | LoadErrorKind::MemoryBound { .. } => {
                ErrorKind::TooLarge
            }
            LoadErrorKind::InDecompressed { inner, .. } => inner.kind(),
            LoadErrorKind::BadOpcode { .. }
            | LoadErrorKind::Malformed { .. }
            | LoadErrorKind::Schema { .. }
            | LoadErrorKind::Json(_)
            | LoadErrorKind::Cache(_)
            | LoadErrorKind::Decompress { .. } => ErrorKind::Corrupt,
        }
    }
}

impl LoadError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind.kind()
    }
}

impl WriteError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Write
    }
}
