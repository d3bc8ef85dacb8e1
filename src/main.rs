//! The `leakscope` command line: a thin clap layer over the library.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use leakscope::analysis::summary;
use leakscope::render::{self, Style};
use leakscope::{LoadError, LoadOptions, Snapshot};

/// Reads PyTorch CUDA / torch_npu memory snapshots and says what holds GPU memory.
#[derive(Parser)]
#[command(name = "leakscope", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What a snapshot holds: format, devices, segments, blocks, bytes, trace events
    Summary {
        /// Snapshot file (pickle, JSON or leakscope cache; plain, .gz or .zst)
        file: PathBuf,
        /// Print JSON (schema leakscope.summary/1) instead of a table
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Convert a snapshot to leakscope's MessagePack cache (.msgpack) or to JSON (.json)
    Convert {
        /// Input snapshot
        input: PathBuf,
        /// Output file: `.msgpack` writes the cache, `.json` snapshot-shaped JSON
        output: PathBuf,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

#[derive(clap::Args)]
struct LoadArgs {
    /// Largest decompressed size accepted for .gz/.zst input, in bytes
    #[arg(long, default_value_t = 16 << 30)]
    max_decompressed_bytes: u64,
}

/// A failure that is the input's fault (exit 2), as opposed to ours or the system's (exit 1).
#[derive(Debug)]
struct BadInput(LoadError);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BadInput {}

const PROGRESS_THRESHOLD: u64 = 64 << 20;

fn load(path: &Path, args: &LoadArgs) -> anyhow::Result<Snapshot> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let bar = (size > PROGRESS_THRESHOLD && std::io::stderr().is_terminal()).then(|| {
        let pb = indicatif::ProgressBar::new(size);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb.set_message(format!("loading {}", path.display()));
        pb
    });
    let mut tick = |done: u64, total: u64| {
        if let Some(pb) = &bar {
            pb.set_length(total);
            pb.set_position(done);
        }
    };
    let opts = LoadOptions {
        max_decompressed_bytes: args.max_decompressed_bytes,
        progress: Some(&mut tick),
    };
    let result = leakscope::load_path(path, opts);
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    result.map_err(|e| BadInput(e).into())
}

fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let style = Style::detect(std::io::stdout().is_terminal());
    match cli.command {
        Command::Summary {
            file,
            json,
            load: la,
        } => {
            let snap = load(&file, &la)?;
            let s = summary::summarize(&snap, &file.display().to_string());
            if json {
                write_stdout(&(serde_json::to_string_pretty(&s)? + "\n"))
            } else {
                write_stdout(&render::summary::text(&s, style))
            }
        }
        Command::Convert {
            input,
            output,
            load: la,
        } => {
            let snap = load(&input, &la)?;
            let ext = output
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("")
                .to_ascii_lowercase();
            match ext.as_str() {
                "msgpack" | "mpk" => leakscope::load::cache::write(&snap, &output)?,
                "json" => {
                    let v = leakscope::convert::to_snapshot_json(&snap);
                    let f = std::fs::File::create(&output)
                        .with_context(|| format!("cannot create {}", output.display()))?;
                    let mut w = std::io::BufWriter::new(f);
                    serde_json::to_writer(&mut w, &v)?;
                    w.flush()
                        .with_context(|| format!("cannot write {}", output.display()))?;
                }
                _ => anyhow::bail!(
                    "cannot tell the output format from {}: name it .msgpack (leakscope cache) or .json",
                    output.display()
                ),
            }
            eprintln!("wrote {}", output.display());
            Ok(())
        }
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "leakscope", &mut std::io::stdout());
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leakscope: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
