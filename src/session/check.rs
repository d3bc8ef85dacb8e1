//! `check`: a compiled budget applied to every device of every file.

use rayon::prelude::*;

use super::Session;
use super::error::SessionError;
use super::options::Options;
use crate::analysis::{roles, top};
use crate::budget::gate as check;
use crate::budget::{Baseline, Budget};
use crate::report::{DeviceCheck, FileCheck};

impl Session {
    /// Applies `budget` (and a baseline) to every selected device. The budget's own
    /// `[windows]` apply where the options keep the defaults.
    pub fn check(
        &self,
        budget: &Budget,
        baseline: Option<&Baseline>,
        opts: &Options,
    ) -> Result<FileCheck, SessionError> {
        let mut runs = self.runs(opts)?;
        self.cut_windows(&mut runs, opts)?;
        let devices = runs
            .par_iter_mut()
            .map(|r| {
                let found = r.find_leaks();
                let end_point = r.end_point();
                let end = top::top(&r.replay, end_point, &mut r.attr, usize::MAX);
                let measured = check::measure(
                    &found,
                    check::MemoryFigures {
                        peak_requested: r.replay.peak().1,
                        peak_reserved: r.replay.peak_reserved(),
                        end_allocated: r.view.allocated_bytes(),
                        end_reserved: r.view.reserved_bytes(),
                        peak_requested_by_role: roles::peaks(&r.replay, &r.attr),
                    },
                );
                let base = baseline.and_then(|b| b.for_device(r.device()));
                DeviceCheck {
                    device: r.device(),
                    cases: check::evaluate(budget, &found, &end, &measured, base),
                    measured,
                }
            })
            .collect();
        Ok(FileCheck {
            file: self.name().to_string(),
            devices,
            disagreements: self.disagreements(),
        })
    }
}

/// [`check`](Session::check)'s options: the caller's, with the budget's `[windows]` where
/// the caller left the defaults.
pub fn check_options(
    budget: &Budget,
    windows: Option<crate::windows::WindowSpec>,
    base: &Options,
) -> Options {
    let mut o = base.clone();
    if let Some(w) = windows.or_else(|| budget.windows.clone()) {
        o.windows = w;
    }
    if o.within.is_none() {
        o.within = budget.within.clone();
    }
    // The budget's `[roles]` unless `--roles` gave rules.
    if let Some(r) = &budget.roles
        && !o.roles.has_user_rules()
    {
        o.roles = std::sync::Arc::clone(r);
    }
    o
}
