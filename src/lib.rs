//! leakscope reads PyTorch CUDA and Ascend NPU memory-history snapshots and explains what
//! holds GPU memory, what grows, and why an allocation failed.
//!
//! The library follows the data's path: [`load`] (any file into one interned
//! [`model::Snapshot`]) → [`replay`] (trace into lifetimes) → [`attribute`] (allocations
//! to call sites) → [`windows`] (micro-batches) → [`analysis`] (pure functions giving
//! typed findings) → [`render`] (terminal tables, JSON, HTML, flame graphs, JUnit).
//! [`session`] puts them together: "these files, these options" into reports, for every
//! device; the `leakscope` binary, tests and fuzz targets all go through it. The reports
//! themselves are data only, in [`report`], below both the session and the output stages.
//!
//! Load a snapshot and find what grows per micro-batch:
//!
//! ```
//! use leakscope::session::{Options, Session};
//!
//! let session = Session::open(
//!     "fixtures/scenarios/pp_last_stage_recv_pinned.pickle",
//!     leakscope::LoadOptions::default(),
//! )?;
//! let report = session.leaks(&Options::default())?;
//! let device = &report.devices[0];
//! let top = &device.suspects[0];
//! assert_eq!(top.site.name.as_deref(), Some("create_tensor_recv_prev"));
//! // 2048 tokens x hidden 4096 x 2 bytes (bf16) kept per micro-batch.
//! assert_eq!(top.bytes_per_window, 2048 * 4096 * 2);
//! println!(
//!     "{} keeps {} per window in {} of {} windows (since window {})",
//!     top.site.label, top.bytes_per_window, top.windows_growing, top.windows_total,
//!     top.onset_window,
//! );
//! # Ok::<(), leakscope::session::SessionError>(())
//! ```

#![warn(missing_docs)]

pub mod analysis;
pub mod attribute;
pub mod budget;
#[cfg(feature = "cli")]
pub mod cli;
pub mod convert;
pub mod error;
pub mod export;
pub mod files;
pub mod load;
pub mod model;
pub mod render;
pub mod replay;
pub mod report;
pub mod session;
pub mod windows;

pub use error::{ErrorKind, LoadError, LoadErrorKind};
pub use load::{LoadOptions, load_bytes, load_path};
pub use model::Snapshot;
pub use session::{Options, Session, SessionError};
