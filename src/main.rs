//! The `leakscope` command line: everything is in the library's `cli` module (the Python
//! package runs the same code); this file adds only the allocator hint and
//! the clean-up of temporaries on signals.

use std::process::ExitCode;

use leakscope::cli;

#[global_allocator]
static ALLOCATOR: cli::huge_pages::HugePageHint = cli::huge_pages::HugePageHint;

fn main() -> ExitCode {
    // First, before any thread starts: SIGINT/SIGTERM remove the run's temporaries.
    leakscope::files::remove_temporaries_on_signals();
    ExitCode::from(cli::main(std::env::args_os()))
}
