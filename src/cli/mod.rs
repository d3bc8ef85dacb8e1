//! The binary's parts: argument definitions, what each command does, output and input
//! helpers, exit codes, timings and the allocator hint.

pub mod args;
pub mod commands;
pub mod exit;
pub mod huge_pages;
pub mod output;
pub mod timings;
