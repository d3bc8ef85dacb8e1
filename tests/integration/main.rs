//! The one integration-test binary (ripgrep's habit): each module covers one area.

mod attribution;
mod check;
mod cli;
mod common;
mod corpus;
mod encodings;
mod graphs;
mod leaks;
mod oom;
mod ranks;
mod report;
mod robustness;
mod scenarios;
