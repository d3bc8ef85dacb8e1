//! leakscope reads PyTorch CUDA and Ascend NPU memory-history snapshots and explains what
//! holds GPU memory, what grows, and why an allocation failed.
//!
//! The library follows the data's path: [`load`] (any file into one interned
//! [`model::Snapshot`]) → [`replay`] (trace into lifetimes) → [`analysis`] (reports) →
//! [`render`] (terminal tables and JSON). The `leakscope` binary is a thin layer over it.

#![warn(missing_docs)]

pub mod analysis;
pub mod attribute;
pub mod convert;
pub mod error;
pub mod load;
pub mod model;
pub mod render;
pub mod replay;
pub mod windows;

pub use error::{LoadError, LoadErrorKind};
pub use load::{LoadOptions, load_bytes, load_path};
pub use model::Snapshot;
