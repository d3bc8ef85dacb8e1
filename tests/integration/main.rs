//! The one integration-test binary (ripgrep's habit): each module covers one area.

mod adversarial;
mod attribution;
mod check;
mod cli;
mod common;
mod compressed;
mod corpus;
mod devices;
mod encodings;
mod fastpath;
mod graphs;
mod layout;
mod leaks;
mod memory;
mod names;
mod oom;
mod outputs;
mod parquet;
mod ranks;
mod replay;
mod report;
mod robustness;
mod scan_ahead;
mod scenarios;
mod sizes;
mod windows;
