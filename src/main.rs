//! The `leakscope` command line: clap arguments into the library's typed options, one
//! short arm per command, and exit codes (0 success, 1 over budget or a failure of ours,
//! 2 bad input or options).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use leakscope::render::Style;

mod cli;

use cli::args::{Cli, Command};
use cli::exit::OverBudget;

#[global_allocator]
static ALLOCATOR: cli::huge_pages::HugePageHint = cli::huge_pages::HugePageHint;

fn run(cli: Cli) -> anyhow::Result<()> {
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
        Command::Tree(c) => c.run(style),
        Command::Flamegraph(c) => c.run(),
        Command::Report(c) => c.run(),
        Command::Convert(c) => c.run(),
        Command::Completions { shell } => {
            let mut c = Cli::command();
            clap_complete::generate(shell, &mut c, "leakscope", &mut std::io::stdout());
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let args = Cli::parse();
    let started = std::time::Instant::now();
    let result = run(args);
    cli::timings::timings(started);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<OverBudget>().is_some() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("leakscope: {e:#}");
            ExitCode::from(cli::exit::exit_code(&e))
        }
    }
}
