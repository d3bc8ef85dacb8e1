//! What allocations are grouped by (`--by`).

use std::fmt;
use std::str::FromStr;

/// What allocations are grouped by.
///
/// ```
/// use leakscope::attribute::GroupBy;
/// assert_eq!("file".parse::<GroupBy>().unwrap(), GroupBy::File);
/// assert!("line".parse::<GroupBy>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GroupBy {
    /// The allocating call site: innermost Python frame (`file:line:function`), else the
    /// innermost C++ frame outside the allocator, dispatcher and ATen.
    #[default]
    Site,
    /// The first frame of the user's own code (outside torch, the standard library and
    /// installed packages, or as `--user-code` says).
    User,
    /// The whole filtered stack.
    Stack,
    /// The site's file.
    File,
    /// The site's function (`file:function`).
    Function,
    /// The memory's role: parameter, gradient, optimizer state, activation, temporary,
    /// untraced, unknown, or a user's (see [`crate::attribute::roles`]).
    Role,
}

/// A `--by` value that is not one of the groupings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: group by site, user, stack, file, function or role")]
pub struct GroupByError(pub String);

/// A grouping the call tree cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: the tree groups by role (or site, the default)")]
pub struct TreeGroupingError(pub String);

impl GroupBy {
    /// The grouping as the call tree takes it: it follows stacks, so only roles group it
    /// further (`site`, the default, leaves it as it is).
    pub fn for_tree(self) -> Result<GroupBy, TreeGroupingError> {
        match self {
            GroupBy::Site | GroupBy::Role => Ok(self),
            other => Err(TreeGroupingError(other.name().to_string())),
        }
    }

    /// Name as used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Site => "site",
            GroupBy::User => "user",
            GroupBy::Stack => "stack",
            GroupBy::File => "file",
            GroupBy::Function => "function",
            GroupBy::Role => "role",
        }
    }
}

impl FromStr for GroupBy {
    type Err = GroupByError;

    fn from_str(s: &str) -> Result<GroupBy, GroupByError> {
        Ok(match s {
            "site" => GroupBy::Site,
            "user" => GroupBy::User,
            "stack" => GroupBy::Stack,
            "file" => GroupBy::File,
            "function" => GroupBy::Function,
            "role" => GroupBy::Role,
            _ => return Err(GroupByError(s.to_string())),
        })
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for GroupBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}
