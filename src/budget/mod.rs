//! CI budgets (`leakscope check --budget leakscope.toml`): the TOML file compiled once into
//! typed limits (sizes in bytes, regexes compiled, window specs parsed), so a limit that
//! cannot be read is an error before any snapshot is loaded, never a limit silently
//! skipped; and the baseline an earlier run's JSON gives.

mod baseline;
pub mod gate;
mod size;

use regex::Regex;
use serde::Deserialize;

use crate::attribute::roles::{Role, RoleRules};
use crate::windows::{SpecError, WindowSpec, Within};

pub use baseline::{Baseline, BaselineError};
pub use size::{SizeError, parse_size};

/// A size in the file: an integer of bytes or a string such as `"1.5 MiB"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum SizeText {
    Bytes(u64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaksFile {
    max_bytes_per_window: Option<SizeText>,
    #[serde(default)]
    forbidden_sites: Vec<String>,
}

/// `peak_requested`: a size, or a table of sizes by role (`total` for the whole).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum PerRole {
    Whole(SizeText),
    Roles(toml::Table),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryFile {
    peak_requested: Option<PerRole>,
    peak_reserved: Option<SizeText>,
    end_allocated: Option<SizeText>,
    end_reserved: Option<SizeText>,
    /// The old name of `peak_requested`: refused with the new name, since "allocated"
    /// means block sizes everywhere else.
    peak_allocated: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SiteFile {
    pattern: String,
    max_bytes_per_window: Option<SizeText>,
    max_end_bytes: Option<SizeText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrowthFile {
    max_reserved_bytes_per_window: Option<SizeText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowsFile {
    spec: Option<String>,
    within: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BaselineFile {
    tolerance: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetFile {
    #[serde(default)]
    windows: WindowsFile,
    #[serde(default)]
    leaks: LeaksFile,
    #[serde(default)]
    growth: GrowthFile,
    #[serde(default)]
    memory: MemoryFile,
    #[serde(default)]
    sites: Vec<SiteFile>,
    #[serde(default)]
    baseline: BaselineFile,
    /// The user's roles (`"regex" = "role"`), read by [`RoleRules::from_toml`].
    roles: Option<toml::Table>,
}

/// Why a budget file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// Not TOML of the budget's shape (an unknown key, a wrong type).
    #[error("{0}")]
    Toml(String),
    /// A size that cannot be read.
    #[error("{field}: {source}")]
    Size {
        /// Where: `memory.peak_requested`, `sites[2].max_end_bytes`, ...
        field: String,
        /// What is wrong with it.
        source: SizeError,
    },
    /// A regex that does not compile.
    #[error("{field} `{pattern}`: invalid regex: {message}")]
    Regex {
        /// Where.
        field: String,
        /// The pattern.
        pattern: String,
        /// The regex engine's message.
        message: String,
    },
    /// `[windows]` that cannot be used.
    #[error("[windows] {field}: {source}")]
    Windows {
        /// `spec` or `within`.
        field: &'static str,
        /// What is wrong with it.
        source: SpecError,
    },
    /// A key under its old name.
    #[error("{old} is now {new}: {why}")]
    Renamed {
        /// The old key.
        old: &'static str,
        /// The key to use.
        new: &'static str,
        /// Why it changed.
        why: &'static str,
    },
    /// A per-role limit on a role that neither the built-in rules nor `[roles]` give.
    #[error(
        "memory.peak_requested.{0}: no such role (built-in: parameter, gradient, optimizer_state, activation, temporary, untraced, unknown; or one of [roles])"
    )]
    UnknownRole(String),
    /// `[roles]` that cannot be used.
    #[error("{0}")]
    Roles(#[from] crate::attribute::roles::RolesError),
    /// `[baseline] tolerance` that is neither a percentage nor a size.
    #[error("[baseline] tolerance `{0}`: use a percentage (\"10%\") or a size (\"64 MiB\")")]
    Tolerance(String),
}

/// Limits on growth.
#[derive(Clone, Debug, Default)]
pub struct LeakLimits {
    /// The largest `bytes_per_window` any suspect may have.
    pub max_bytes_per_window: Option<u64>,
    /// Sites (regex on the site's label) that may not be suspects at all.
    pub forbidden_sites: Vec<Regex>,
}

/// Limits on the allocator's growth.
#[derive(Clone, Debug, Default)]
pub struct GrowthLimits {
    /// The largest reserved growth per window (cached free memory growing while live
    /// memory does not: [`crate::analysis::reserved`]).
    pub max_reserved_bytes_per_window: Option<u64>,
}

/// Limits on memory, in PyTorch's words (docs/schemas.md, "Glossary").
#[derive(Clone, Debug, Default)]
pub struct MemoryLimits {
    /// The most bytes requested at any point (`peak_requested`, or its `total`).
    pub peak_requested: Option<u64>,
    /// The most bytes of a role live at any point (`peak_requested.ROLE`), in file order.
    pub peak_requested_by_role: Vec<(String, u64)>,
    /// The most bytes reserved at any point (`peak_reserved`).
    pub peak_reserved: Option<u64>,
    /// Σ sizes of the blocks allocated at the end, pending frees excluded.
    pub end_allocated: Option<u64>,
    /// Σ segment sizes at the end.
    pub end_reserved: Option<u64>,
}

/// Limits for the sites matching a pattern.
#[derive(Clone, Debug)]
pub struct SiteLimit {
    /// Regex on the site's label (`file:line:function`).
    pub pattern: Regex,
    /// Largest growth per window.
    pub max_bytes_per_window: Option<u64>,
    /// Largest live bytes at the end.
    pub max_end_bytes: Option<u64>,
}

/// Allowed increase over a baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// A share of the baseline's value, in percent.
    Percent(f64),
    /// A number of bytes.
    Bytes(u64),
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance::Percent(0.0)
    }
}

impl Tolerance {
    /// The allowed increase over `base`.
    pub fn over(self, base: u64) -> u64 {
        match self {
            Tolerance::Percent(p) => (base as f64 * p / 100.0).round() as u64,
            Tolerance::Bytes(b) => b,
        }
    }

    fn parse(t: &str) -> Result<Tolerance, BudgetError> {
        let bad = || BudgetError::Tolerance(t.to_string());
        match t.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(Tolerance::Percent(v)),
                _ => Err(bad()),
            },
            None => parse_size(t).map(Tolerance::Bytes).map_err(|_| bad()),
        }
    }
}

/// A budget, compiled.
#[derive(Clone, Debug, Default)]
pub struct Budget {
    /// `[windows] spec`: windows when `--windows` is not given.
    pub windows: Option<WindowSpec>,
    /// `[windows] within`.
    pub within: Option<Within>,
    /// `[leaks]`.
    pub leaks: LeakLimits,
    /// `[growth]`.
    pub growth: GrowthLimits,
    /// `[memory]`.
    pub memory: MemoryLimits,
    /// `[[sites]]`.
    pub sites: Vec<SiteLimit>,
    /// `[baseline] tolerance`.
    pub tolerance: Tolerance,
    /// `[roles]`: the budget's own role rules, when it has the table.
    pub roles: Option<std::sync::Arc<RoleRules>>,
}

fn size(field: impl Into<String>, s: Option<SizeText>) -> Result<Option<u64>, BudgetError> {
    match s {
        None => Ok(None),
        Some(SizeText::Bytes(b)) => Ok(Some(b)),
        Some(SizeText::Text(t)) => parse_size(&t)
            .map(Some)
            .map_err(|source| BudgetError::Size {
                field: field.into(),
                source,
            }),
    }
}

fn spec<T: std::str::FromStr<Err = SpecError>>(
    field: &'static str,
    s: Option<String>,
) -> Result<Option<T>, BudgetError> {
    s.map(|s| s.parse())
        .transpose()
        .map_err(|source| BudgetError::Windows { field, source })
}

fn regex(field: impl Into<String>, pattern: &str) -> Result<Regex, BudgetError> {
    Regex::new(pattern).map_err(|e| BudgetError::Regex {
        field: field.into(),
        pattern: pattern.to_string(),
        message: e.to_string(),
    })
}

impl Budget {
    /// Compiles a budget file's text.
    ///
    /// ```
    /// use leakscope::budget::Budget;
    /// let b = Budget::parse("[memory]\npeak_requested = \"2 GiB\"\n").unwrap();
    /// assert_eq!(b.memory.peak_requested, Some(2 << 30));
    /// assert!(Budget::parse("[memory]\npeak_requested = \"2 gallons\"\n").is_err());
    /// // The old name is refused with the new one.
    /// let e = Budget::parse("[memory]\npeak_allocated = \"2 GiB\"\n").unwrap_err();
    /// assert!(e.to_string().contains("peak_requested"));
    /// ```
    pub fn parse(text: &str) -> Result<Budget, BudgetError> {
        let f: BudgetFile = toml::from_str(text).map_err(|e| BudgetError::Toml(e.to_string()))?;
        Budget::from_file(f)
    }

    /// A budget from any serde data with the file's tables (Python's dict of them, say),
    /// checked as [`Budget::parse`] checks the file.
    ///
    /// ```
    /// use leakscope::budget::Budget;
    /// let v = serde_json::json!({"memory": {"peak_requested": "2 GiB"}});
    /// let b = Budget::deserialize_from(v).unwrap();
    /// assert_eq!(b.memory.peak_requested, Some(2 << 30));
    /// assert!(Budget::deserialize_from(serde_json::json!({"memroy": {}})).is_err());
    /// ```
    pub fn deserialize_from<'de, D: serde::Deserializer<'de>>(
        data: D,
    ) -> Result<Budget, BudgetError> {
        let f = BudgetFile::deserialize(data).map_err(|e| BudgetError::Toml(e.to_string()))?;
        Budget::from_file(f)
    }

    fn from_file(f: BudgetFile) -> Result<Budget, BudgetError> {
        if f.memory.peak_allocated.is_some() {
            return Err(BudgetError::Renamed {
                old: "memory.peak_allocated",
                new: "memory.peak_requested",
                why: "it limited the bytes requested; \"allocated\" now means block sizes, as in torch.cuda.memory_allocated",
            });
        }
        let roles = f.roles.as_ref().map(RoleRules::from_table).transpose()?;
        let (peak_requested, peak_requested_by_role) =
            per_role(f.memory.peak_requested, roles.as_ref())?;
        let sites = f
            .sites
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                Ok(SiteLimit {
                    pattern: regex(format!("sites[{i}].pattern"), &s.pattern)?,
                    max_bytes_per_window: size(
                        format!("sites[{i}].max_bytes_per_window"),
                        s.max_bytes_per_window,
                    )?,
                    max_end_bytes: size(format!("sites[{i}].max_end_bytes"), s.max_end_bytes)?,
                })
            })
            .collect::<Result<Vec<_>, BudgetError>>()?;
        Ok(Budget {
            windows: spec("spec", f.windows.spec)?,
            within: spec("within", f.windows.within)?,

            leaks: LeakLimits {
                max_bytes_per_window: size(
                    "leaks.max_bytes_per_window",
                    f.leaks.max_bytes_per_window,
                )?,
                forbidden_sites: f
                    .leaks
                    .forbidden_sites
                    .iter()
                    .map(|p| regex("leaks.forbidden_sites", p))
                    .collect::<Result<_, _>>()?,
            },
            growth: GrowthLimits {
                max_reserved_bytes_per_window: size(
                    "growth.max_reserved_bytes_per_window",
                    f.growth.max_reserved_bytes_per_window,
                )?,
            },
            memory: MemoryLimits {
                peak_requested,
                peak_requested_by_role,
                peak_reserved: size("memory.peak_reserved", f.memory.peak_reserved)?,
                end_allocated: size("memory.end_allocated", f.memory.end_allocated)?,
                end_reserved: size("memory.end_reserved", f.memory.end_reserved)?,
            },
            sites,
            tolerance: f
                .baseline
                .tolerance
                .as_deref()
                .map(Tolerance::parse)
                .transpose()?
                .unwrap_or_default(),
            roles: roles.map(std::sync::Arc::new),
        })
    }
}

/// `memory.peak_requested` as a whole and by role; a role must be built in or one of
/// the budget's `[roles]`.
#[allow(clippy::type_complexity)]
fn per_role(
    p: Option<PerRole>,
    roles: Option<&RoleRules>,
) -> Result<(Option<u64>, Vec<(String, u64)>), BudgetError> {
    match p {
        None => Ok((None, Vec::new())),
        Some(PerRole::Whole(s)) => Ok((size("memory.peak_requested", Some(s))?, Vec::new())),
        Some(PerRole::Roles(t)) => {
            let mut total = None;
            let mut by = Vec::new();
            for (role, v) in t {
                let field = format!("memory.peak_requested.{role}");
                let s = SizeText::deserialize(v.clone()).map_err(|_| BudgetError::Size {
                    field: field.clone(),
                    source: SizeError::NotASize(format!("{v:?}")),
                })?;
                let bytes = size(field, Some(s))?.unwrap_or(0);
                if role == "total" {
                    total = Some(bytes);
                } else if role.parse::<Role>().is_ok()
                    || roles.is_some_and(|r| r.id(&role).is_some())
                {
                    by.push((role, bytes));
                } else {
                    return Err(BudgetError::UnknownRole(role));
                }
            }
            Ok((total, by))
        }
    }
}
