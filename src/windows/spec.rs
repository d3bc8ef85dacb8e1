//! `--windows SPEC` and `--within annotation:REGEX`, parsed once into typed values.

use std::fmt;
use std::str::FromStr;

use regex::Regex;

/// The forms of a `--windows` value, as its help and its error say them.
pub const FORMS: &str =
    "auto, annotation[:REGEX], metadata, frame:REGEX, site:REGEX, pipeline or every:N";

/// How windows are made.
///
/// ```
/// use leakscope::windows::WindowSpec;
/// assert!(matches!("every:500".parse::<WindowSpec>(), Ok(WindowSpec::Every(500))));
/// assert_eq!("pipeline".parse::<WindowSpec>().unwrap().to_string(), "pipeline");
/// assert!("every:0".parse::<WindowSpec>().is_err());
/// assert!("frame:(".parse::<WindowSpec>().is_err());
/// let site: WindowSpec = r"site:^train\.py:12:step < ".parse().unwrap();
/// assert_eq!(site.to_string(), r"site:^train\.py:12:step < ");
/// ```
#[derive(Clone, Debug, Default)]
pub enum WindowSpec {
    /// Repeating annotations (optionally only names matching).
    Annotation(Option<Regex>),
    /// Changes of `user_metadata`.
    Metadata,
    /// Entries into a function.
    Frame(Regex),
    /// Allocations at a call site (`file:line:function` of the innermost Python frame).
    Site(Regex),
    /// A pipeline schedule's micro-batches: entries into the function it calls once per
    /// micro-batch, each from the receive of its input (`windows::pipeline`).
    Pipeline,
    /// Every N events.
    Every(u32),
    /// The family that measures as a unit of work (see `windows::quality`):
    /// annotations or `user_metadata` when they qualify, else entries into a function or
    /// allocations at a call site; the whole trace when none does.
    #[default]
    Auto,
}

/// A `--windows` or `--within` value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not one of the forms.
    #[error("`{0}`: use {FORMS}")]
    Unknown(String),
    /// `every:` without a positive number.
    #[error("`{0}`: every:N needs a positive number of events")]
    Every(String),
    /// A regex that does not compile.
    #[error("`{spec}`: invalid regex: {message}")]
    Regex {
        /// The value as given.
        spec: String,
        /// The regex engine's message.
        message: String,
    },
    /// `--within` other than `annotation:REGEX`.
    #[error("`{0}`: use annotation:REGEX (a phase of every step, between its START and END)")]
    Within(String),
}

fn regex(spec: &str, r: &str) -> Result<Regex, SpecError> {
    Regex::new(r).map_err(|e| SpecError::Regex {
        spec: spec.to_string(),
        message: e.to_string(),
    })
}

impl FromStr for WindowSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<WindowSpec, SpecError> {
        Ok(match s {
            "auto" => WindowSpec::Auto,
            "annotation" => WindowSpec::Annotation(None),
            "metadata" => WindowSpec::Metadata,
            "pipeline" => WindowSpec::Pipeline,
            _ => {
                if let Some(r) = s.strip_prefix("annotation:") {
                    WindowSpec::Annotation(Some(regex(s, r)?))
                } else if let Some(r) = s.strip_prefix("frame:") {
                    WindowSpec::Frame(regex(s, r)?)
                } else if let Some(r) = s.strip_prefix("site:") {
                    WindowSpec::Site(regex(s, r)?)
                } else if let Some(n) = s.strip_prefix("every:") {
                    match n.parse::<u32>() {
                        Ok(n) if n > 0 => WindowSpec::Every(n),
                        _ => return Err(SpecError::Every(s.to_string())),
                    }
                } else {
                    return Err(SpecError::Unknown(s.to_string()));
                }
            }
        })
    }
}

impl fmt::Display for WindowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowSpec::Auto => f.write_str("auto"),
            WindowSpec::Annotation(None) => f.write_str("annotation"),
            WindowSpec::Annotation(Some(r)) => write!(f, "annotation:{}", r.as_str()),
            WindowSpec::Metadata => f.write_str("metadata"),
            WindowSpec::Frame(r) => write!(f, "frame:{}", r.as_str()),
            WindowSpec::Site(r) => write!(f, "site:{}", r.as_str()),
            WindowSpec::Pipeline => f.write_str("pipeline"),
            WindowSpec::Every(n) => write!(f, "every:{n}"),
        }
    }
}

/// `--within annotation:REGEX`: only this phase of each step (from the START to the END
/// of each matching annotation).
#[derive(Clone, Debug)]
pub struct Within {
    /// The annotation names to keep.
    pub annotation: Regex,
}

impl FromStr for Within {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Within, SpecError> {
        let r = s
            .strip_prefix("annotation:")
            .ok_or_else(|| SpecError::Within(s.to_string()))?;
        Ok(Within {
            annotation: regex(s, r)?,
        })
    }
}

impl fmt::Display for Within {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "annotation:{}", self.annotation.as_str())
    }
}
