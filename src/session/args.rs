//! The analysis options by name. The command line's flags and Python's keyword arguments
//! are these fields: clap reads them from the arguments (`--user-code`), serde from
//! Python's keywords (`user_code=`), so each name, default, parser and help line is
//! written once. [`OptionArgs::options`] turns them into the session's [`Options`].
// The fields' doc lines are the command line's help, written for the terminal: the
// brackets in them (`annotation[:REGEX]`, `[roles]`) are text, not links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::str::FromStr;
use std::sync::Arc;

use regex::Regex;
use serde::{Deserialize, Deserializer};

use super::options::{DeviceSelection, Options};
use crate::attribute::roles::RoleRules;
use crate::attribute::{FrameFilters, GroupBy};
use crate::windows::{WindowSpec, Within};

/// How a file is cut into windows, and which devices.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default)]
pub struct WindowArgs {
    /// How windows are made ([`crate::windows::SPEC_FORMS`]).
    #[cfg_attr(feature = "cli", arg(long, default_value = "auto", help = crate::windows::SPEC_FORMS))]
    #[serde(deserialize_with = "named::windows")]
    pub windows: WindowSpec,
    /// Only this phase of each step: annotation:REGEX (START to END of matching annotations)
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(deserialize_with = "named::within")]
    pub within: Option<Within>,
    /// Device index, or all (every device with segments or trace events)
    #[cfg_attr(feature = "cli", arg(long, default_value = "all"))]
    #[serde(deserialize_with = "named::device")]
    pub device: DeviceSelection,
}

/// What allocations are grouped by.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default)]
pub struct GroupArgs {
    /// Group by site (innermost Python frame; the default), user (first frame of your code),
    /// stack, file, function, role (parameter, gradient, optimizer_state, activation,
    /// temporary, untraced, unknown, or yours from --roles), or the names the program gave
    /// its memory: annotation (innermost record_function range), metadata (user_metadata, or
    /// an annotate event's label) or compile (torch.compile region and FX node), or pool
    /// (the memory pool: default, or a CUDA graph's or MemPool's private pool)
    #[cfg_attr(feature = "cli", arg(long, default_value = "site"))]
    #[serde(deserialize_with = "named::by")]
    pub by: GroupBy,
    /// Frames of your own code (for --by user), as a regex on file:line:function
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(deserialize_with = "named::user_code")]
    pub user_code: Option<Regex>,
}

/// Which frames count, and the user's memory roles.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default)]
pub struct FilterArgs {
    /// Hide frames whose file:line:function matches this regex
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(deserialize_with = "named::exclude")]
    pub exclude: Option<Regex>,
    /// Count only allocations with a frame whose file:line:function matches this regex
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(deserialize_with = "named::focus")]
    pub focus: Option<Regex>,
    /// Drop C++ frames
    #[cfg_attr(feature = "cli", arg(long))]
    pub python_only: bool,
    /// Keep the interpreter and dispatcher frames PyTorch's viewer hides
    #[cfg_attr(feature = "cli", arg(long))]
    pub keep_internal: bool,
    /// Your own memory roles: a TOML file with a [roles] table ("regex on file:line:function" = "role"), tried before the built-in rules (docs/roles.md)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", value_parser = roles_file))]
    #[serde(deserialize_with = "named::roles")]
    pub roles: Option<Arc<RoleRules>>,
}

/// The leak finder's own options.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default)]
pub struct LeakArgs {
    /// Windows at the start whose growth is warm-up
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub warmup: usize,
    /// Leave out sites growing by fewer bytes per window
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub min_bytes: u64,
}

/// Every analysis option at once: what Python's keyword arguments deserialise into (each
/// method passes the ones its command takes).
///
/// ```
/// use leakscope::session::{DeviceSelection, OptionArgs};
/// let args: OptionArgs =
///     serde_json::from_value(serde_json::json!({"device": "1", "by": "stack"})).unwrap();
/// let o = args.options();
/// assert_eq!(o.devices, DeviceSelection::Only(1));
/// let bad = serde_json::json!({"windows": "nonsense:1"});
/// let e = serde_json::from_value::<OptionArgs>(bad).unwrap_err();
/// assert!(e.to_string().starts_with("windows=\"nonsense:1\": "));
/// let typo: OptionArgs = serde_json::from_value(serde_json::json!({"windos": "auto"})).unwrap();
/// assert_eq!(typo.unknown.keys().collect::<Vec<_>>(), ["windos"]);
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct OptionArgs {
    /// Windows and devices.
    #[serde(flatten)]
    pub win: WindowArgs,
    /// Grouping.
    #[serde(flatten)]
    pub group: GroupArgs,
    /// Frame filters and roles.
    #[serde(flatten)]
    pub filters: FilterArgs,
    /// The leak finder's options.
    #[serde(flatten)]
    pub leaks: LeakArgs,
    /// Names that are no option (the groups above take theirs first): an error to the
    /// caller, so a keyword the library does not know is never silently dropped.
    #[serde(flatten)]
    pub unknown: std::collections::BTreeMap<String, serde::de::IgnoredAny>,
}

impl OptionArgs {
    /// The session's options.
    pub fn options(&self) -> Options {
        let mut o = options(
            self.win.device,
            Some(&self.win),
            Some(&self.group),
            &self.filters,
        );
        o.leaks.warmup = self.leaks.warmup;
        o.leaks.min_bytes = self.leaks.min_bytes;
        o
    }
}

/// The session's options from the groups a command has (a command without windows or
/// grouping leaves them at their defaults).
pub fn options(
    devices: DeviceSelection,
    win: Option<&WindowArgs>,
    group: Option<&GroupArgs>,
    filters: &FilterArgs,
) -> Options {
    let mut o = Options {
        devices,
        filters: FrameFilters {
            exclude: filters.exclude.clone(),
            focus: filters.focus.clone(),
            python_only: filters.python_only,
            keep_internal: filters.keep_internal,
            user_code: group.and_then(|g| g.user_code.clone()),
        },
        ..Options::default()
    };
    if let Some(w) = win {
        o.windows = w.windows.clone();
        o.within = w.within.clone();
    }
    if let Some(g) = group {
        o.by = g.by;
    }
    if let Some(r) = &filters.roles {
        o.roles = Arc::clone(r);
    }
    o
}

/// Reads and compiles a roles file (`--roles`, `roles=`), with the library's size limit.
pub fn roles_file(path: &str) -> Result<Arc<RoleRules>, String> {
    let text = crate::files::read_small_text(std::path::Path::new(path))
        .map_err(|e| format!("{path}: {e}"))?;
    RoleRules::from_toml(&text)
        .map(Arc::new)
        .map_err(|e| format!("{path}: {e}"))
}

/// What a keyword may hold: its text, or a number (a device index, `every:N`'s count).
#[derive(Deserialize)]
#[serde(untagged)]
enum Word {
    Text(String),
    Number(i64),
}

/// A keyword's value read by the same parser as its flag; an error names the keyword and
/// the value, as `windows="nonsense:1": ...`.
fn word<'de, D: Deserializer<'de>, T>(
    name: &str,
    d: D,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    let text = match Word::deserialize(d)? {
        Word::Text(t) => t,
        Word::Number(n) => n.to_string(),
    };
    parse(&text).map_err(|e| serde::de::Error::custom(format!("{name}={text:?}: {e}")))
}

fn from_str<T: FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.parse().map_err(|e: T::Err| e.to_string())
}

/// One deserialiser per keyword, so an error names it.
mod named {
    use super::*;

    pub fn windows<'de, D: Deserializer<'de>>(d: D) -> Result<WindowSpec, D::Error> {
        word("windows", d, from_str)
    }
    pub fn within<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Within>, D::Error> {
        word("within", d, from_str).map(Some)
    }
    pub fn device<'de, D: Deserializer<'de>>(d: D) -> Result<DeviceSelection, D::Error> {
        word("device", d, from_str)
    }
    pub fn by<'de, D: Deserializer<'de>>(d: D) -> Result<GroupBy, D::Error> {
        word("by", d, from_str)
    }
    pub fn user_code<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Regex>, D::Error> {
        word("user_code", d, from_str).map(Some)
    }
    pub fn exclude<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Regex>, D::Error> {
        word("exclude", d, from_str).map(Some)
    }
    pub fn focus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Regex>, D::Error> {
        word("focus", d, from_str).map(Some)
    }
    pub fn roles<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<RoleRules>>, D::Error> {
        word("roles", d, roles_file).map(Some)
    }
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct All {
        #[command(flatten)]
        win: WindowArgs,
        #[command(flatten)]
        group: GroupArgs,
        #[command(flatten)]
        filters: FilterArgs,
        #[command(flatten)]
        leaks: LeakArgs,
    }

    /// No flag and no keyword give the same options: the defaults are said once.
    #[test]
    fn the_command_lines_defaults_are_the_keywords() {
        let cli = All::parse_from(["x"]);
        let py = OptionArgs::default();
        assert_eq!(format!("{:?}", cli.win), format!("{:?}", py.win));
        assert_eq!(format!("{:?}", cli.group), format!("{:?}", py.group));
        assert_eq!(format!("{:?}", cli.filters), format!("{:?}", py.filters));
        assert_eq!(format!("{:?}", cli.leaks), format!("{:?}", py.leaks));
    }

    /// A flag and its keyword give the same value.
    #[test]
    fn a_flag_and_its_keyword_agree() {
        let cli = All::parse_from([
            "x",
            "--windows",
            "every:7",
            "--device",
            "1",
            "--by",
            "file",
            "--warmup",
            "2",
            "--min-bytes",
            "9",
            "--python-only",
            "--exclude",
            "a.py",
        ]);
        let py: OptionArgs = serde_json::from_value(serde_json::json!({
            "windows": "every:7", "device": 1, "by": "file", "warmup": 2, "min_bytes": 9,
            "python_only": true, "exclude": "a.py",
        }))
        .unwrap();
        assert_eq!(format!("{:?}", cli.win), format!("{:?}", py.win));
        assert_eq!(format!("{:?}", cli.group), format!("{:?}", py.group));
        assert_eq!(format!("{:?}", cli.filters), format!("{:?}", py.filters));
        assert_eq!(format!("{:?}", cli.leaks), format!("{:?}", py.leaks));
    }
}
