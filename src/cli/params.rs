//! Each command's arguments as the front ends other than the command line name them (the
//! MCP server's tool arguments, Python's keywords), read from the command line's own
//! definitions: an option's name, type, default and help line are declared once, in
//! `args`, and every front end lists what that declaration says.

use clap::{ArgAction, CommandFactory, Parser};

use super::args::Cli;

/// What an argument's value is, as the command line parses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueKind {
    /// A flag: present or not.
    Flag,
    /// A whole number.
    Integer,
    /// A number with a fraction.
    Number,
    /// Text the command parses (a spec, a regex, a path, a point).
    Text,
}

/// One argument of a command.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Param {
    /// Its name as a keyword: `user_code`, `file` (a positional taking several files is
    /// named for one, as the other arguments are).
    pub name: String,
    /// Its value's type.
    pub kind: ValueKind,
    /// The default, as the command line writes it (`None`: unset unless given).
    pub default: Option<String>,
    /// The command line's help line.
    pub help: String,
    /// The values it takes, when it names them.
    pub values: Vec<String>,
    /// A positional argument (a file, a directory).
    pub positional: bool,
    /// A positional argument taking several values.
    pub many: bool,
    /// Required by the command.
    pub required: bool,
    /// Its flag on the command line (`user-code` for `--user-code`); `None` for a
    /// positional argument.
    pub long: Option<String>,
}

/// Arguments that only shape the command line's own output.
const OUTPUT_ONLY: &[&str] = &["json", "help", "version"];

/// The command line's definition of `command` (`None`: no such command).
pub fn command(command: &str) -> Option<clap::Command> {
    Cli::command().find_subcommand(command).cloned()
}

/// Every argument of `cmd` a caller gives (the output's own flags left out), in the
/// order `--help` lists them.
pub fn params(cmd: &clap::Command) -> Vec<Param> {
    cmd.get_arguments()
        .filter(|a| !OUTPUT_ONLY.contains(&a.get_id().as_str()) && !a.is_hide_set())
        .map(|a| {
            let flag = matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
            let many = a.is_positional() && a.get_num_args().is_some_and(|n| n.max_values() > 1);
            let id = a.get_id().as_str();
            Param {
                name: if many {
                    id.strip_suffix('s').unwrap_or(id)
                } else {
                    id
                }
                .to_string(),
                kind: if flag { ValueKind::Flag } else { value_kind(a) },
                default: match a.get_default_values() {
                    [d] if !flag => Some(d.to_string_lossy().into_owned()),
                    _ => None,
                },
                help: a.get_help().map(|h| h.to_string()).unwrap_or_default(),
                values: if flag {
                    Vec::new()
                } else {
                    let values = a.get_possible_values();
                    values.iter().map(|v| v.get_name().to_string()).collect()
                },
                positional: a.is_positional(),
                many,
                required: a.is_required_set(),
                long: a.get_long().map(str::to_string),
            }
        })
        .collect()
}

/// Whether `param` of `command` may be given beside the option `with` alone: `export`'s
/// per-output options (`--top-sites` needs `--perfetto`), told by the command line's own
/// parser refusing the pair as missing or conflicting arguments.
pub fn allowed_with(command: &str, param: &Param, with: &str) -> bool {
    let Some(long) = &param.long else {
        return true;
    };
    let mut argv = vec!["leakscope".to_string(), command.to_string(), "x".into()];
    argv.extend([format!("--{with}"), "x".into(), format!("--{long}")]);
    if param.kind != ValueKind::Flag {
        argv.push(param.default.clone().unwrap_or_else(|| "1".into()));
    }
    match Cli::try_parse_from(argv) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
                | clap::error::ErrorKind::ArgumentConflict
        ),
    }
}

/// The type of an option's value, from the type the command line parses it into.
fn value_kind(arg: &clap::Arg) -> ValueKind {
    use std::any::TypeId;
    let id = arg.get_value_parser().type_id();
    let integers = [
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<u32>(),
        TypeId::of::<u8>(),
        TypeId::of::<i64>(),
    ];
    if integers.iter().any(|t| id == *t) {
        ValueKind::Integer
    } else if id == TypeId::of::<f64>() {
        ValueKind::Number
    } else {
        ValueKind::Text
    }
}
