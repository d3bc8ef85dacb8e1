//! The `leakscope` command line: everything is in the library's `cli` module (the Python
//! package runs the same code); this file adds only the allocator hint.

use std::process::ExitCode;

use leakscope::cli;

#[global_allocator]
static ALLOCATOR: cli::huge_pages::HugePageHint = cli::huge_pages::HugePageHint;

fn main() -> ExitCode {
    ExitCode::from(cli::main(std::env::args_os()))
}
