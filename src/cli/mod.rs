//! The command line (feature `cli`): argument definitions, what each command does, output
//! and input helpers, exit codes, timings and the allocator hint. The `leakscope` binary
//! and the Python package's `leakscope` command both run [`main`].

// Written as a client of the library: its options structs are `#[non_exhaustive]` outside
// the crate, where struct literals are not allowed.
#![allow(clippy::field_reassign_with_default)]

mod args;
mod commands;
mod exit;
pub mod huge_pages;
mod kept;
#[cfg(feature = "mcp")]
mod mcp;
mod output;
pub mod params;
mod timings;

use std::ffi::OsString;
use std::io::IsTerminal;

use clap::{CommandFactory, Parser};

use crate::render::Style;
use args::{Cli, Command};
use exit::OverBudget;

fn run(cli: Cli) -> anyhow::Result<()> {
    let outputs = cli.command.outputs();
    crate::files::check_distinct(outputs.iter().map(|(o, p)| (o.as_str(), p.as_path())))?;
    // An output written to standard output keeps it: what the command prints goes to
    // standard error instead, so the stream holds the file alone.
    if outputs.iter().any(|(_, p)| {
        matches!(
            crate::files::target::resolve(p),
            Ok(crate::files::target::Target::Stdout)
        )
    }) {
        output::print_to_stderr();
    }
    let style = Style::detect(std::io::stdout().is_terminal());
    match cli.command {
        Command::Summary(c) => c.run(style),
        Command::Top(c) => c.run(style),
        Command::Leaks(c) => c.run(style),
        Command::Compare(c) => c.run(style),
        Command::Oom(c) => c.run(style),
        Command::Segments(c) => c.run(style),
        Command::Ranks(c) => c.run(style),
        Command::Check(c) => c.run(style),
        Command::Windows(c) => c.run(style),
        Command::Phases(c) => c.run(style),
        #[cfg(feature = "mcp")]
        Command::Mcp(c) => mcp::serve(c.keep, run),
        Command::Timeline(c) => c.run(style),
        Command::Tree(c) => c.run(style),
        Command::Flamegraph(c) => c.run(),
        Command::Report(c) => c.run(),
        Command::Convert(c) => c.run(),
        Command::Export(c) => c.run(style),
        Command::Slice(c) => c.run(),
        Command::Completions { shell } => {
            let mut c = Cli::command();
            clap_complete::generate(shell, &mut c, "leakscope", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// Runs the command line on `args` (the program name first) and returns the exit code:
/// 0 success, 1 over budget or a failure of ours, 2 bad input or options. It never exits
/// the process itself, so a host (the Python package) keeps running.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let started = std::time::Instant::now();
    let result = run(cli);
    timings::timings(started);
    match result {
        Ok(()) => 0,
        Err(e) if e.downcast_ref::<OverBudget>().is_some() => 1,
        Err(e) => {
            eprintln!("leakscope: {e:#}");
            exit::exit_code(&e)
        }
    }
}
