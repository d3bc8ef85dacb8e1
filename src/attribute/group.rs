//! What allocations are grouped by (`--by`).

use std::fmt;
use std::str::FromStr;

use super::names::NameKind;

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
    /// The innermost `record_function` range it was allocated in
    /// ([`NameKind::Annotation`]).
    Annotation,
    /// Its `user_metadata`, or the label an `annotate` event gave it
    /// ([`NameKind::Metadata`]).
    Metadata,
    /// Its compiled region and FX node ([`NameKind::Compile`]).
    Compile,
    /// The memory pool its block lies in: the default pool, or a private one (a CUDA
    /// graph's, a `torch.cuda.MemPool`) ([`crate::attribute::pools`]).
    Pool,
}

/// A `--by` value that is not one of the groupings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}`: group by site, user, stack, file, function, role, annotation, metadata, compile or pool"
)]
pub struct GroupByError(pub String);

/// A grouping the call tree cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}`: the tree groups by role, annotation, metadata, compile or pool (or site, the default)"
)]
pub struct TreeGroupingError(pub String);

impl GroupBy {
    /// The grouping as the call tree takes it: it follows stacks, so only what is not
    /// read off a stack (roles, names) groups it further (`site`, the default, leaves it
    /// as it is).
    pub fn for_tree(self) -> Result<GroupBy, TreeGroupingError> {
        if self == GroupBy::Site || self.per_allocation() {
            Ok(self)
        } else {
            Err(TreeGroupingError(self.name().to_string()))
        }
    }

    /// Whether the groups are read off each allocation rather than off its stack (roles,
    /// names, pools): the call tree puts such a group above the stacks.
    pub fn per_allocation(self) -> bool {
        matches!(self, GroupBy::Role | GroupBy::Pool) || self.name_kind().is_some()
    }

    /// The kind of name it groups by, for the names' groupings.
    pub fn name_kind(self) -> Option<NameKind> {
        match self {
            GroupBy::Annotation => Some(NameKind::Annotation),
            GroupBy::Metadata => Some(NameKind::Metadata),
            GroupBy::Compile => Some(NameKind::Compile),
            _ => None,
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
            GroupBy::Annotation => "annotation",
            GroupBy::Metadata => "metadata",
            GroupBy::Compile => "compile",
            GroupBy::Pool => "pool",
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
            "annotation" => GroupBy::Annotation,
            "metadata" => GroupBy::Metadata,
            "compile" => GroupBy::Compile,
            "pool" => GroupBy::Pool,
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
