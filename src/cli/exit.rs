//! What an error means for the exit code: 2 when the input or the options are at fault,
//! 1 for a budget exceeded or a failure of ours.

use crate::budget::{BaselineError, BudgetError};
use crate::files::OutputError;
use crate::session::SessionError;
use crate::{LoadError, error::WriteError};

/// A request that does not fit the input or the options (exit 2, like clap's usage errors).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// `check` found a limit exceeded (exit 1; the report says which).
#[derive(Debug)]
pub struct OverBudget;

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("over budget")
    }
}

impl std::error::Error for OverBudget {}

/// 2 when the input or the options are at fault (the library's typed errors say so), 1
/// for anything else (an output that cannot be written, say).
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let input = e.downcast_ref::<SessionError>().is_some()
        || e.downcast_ref::<LoadError>().is_some()
        || e.downcast_ref::<BudgetError>().is_some()
        || e.downcast_ref::<BaselineError>().is_some()
        || e.downcast_ref::<Usage>().is_some()
        || e.downcast_ref::<OutputError>()
            .is_some_and(|o| o.kind() == crate::error::ErrorKind::Usage);
    let ours = e.downcast_ref::<WriteError>().is_some();
    if input && !ours { 2 } else { 1 }
}
