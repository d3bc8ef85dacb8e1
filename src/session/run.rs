//! One device of a session: its view, replay, attribution and windows, built once and
//! shared by every analysis of it.

use crate::analysis::LeakOptions;
use crate::analysis::oom::{self, DeviceOom};
use crate::analysis::point::{At, Point, point_after};
use crate::analysis::{leaks, reserved};
use crate::attribute::{Attributor, Classification, GroupBy, names, roles};
use crate::model::{DeviceView, Snapshot};
use crate::replay::{self, Replay};
use crate::windows::{self, WindowSpec, Windows, Within};

use super::options::Options;

/// One device of a session, ready for the analyses. The replay is made when the run is;
/// the windows when an analysis first needs them.
pub struct DeviceRun<'s> {
    /// The device's segments and trace.
    pub view: DeviceView<'s>,
    /// Its trace replayed against its segments.
    pub replay: Replay,
    /// Sites of its allocations, under the session's grouping and filters.
    pub attr: Attributor<'s>,
    /// The leak finder's options.
    pub leak_options: LeakOptions,
    spec: WindowSpec,
    within: Option<Within>,
    windows: Option<Windows>,
    within_matched: bool,
}

impl<'s> DeviceRun<'s> {
    /// Replays `view` and prepares its attribution, every allocation's role classified.
    pub fn new(
        snap: &'s Snapshot,
        view: DeviceView<'s>,
        opts: &Options,
        classes: &Classification,
    ) -> DeviceRun<'s> {
        let mut run = DeviceRun::unclassified(snap, view, opts, classes);
        let view = &run.view;
        run.attr.set_roles(roles::classify(
            snap,
            view.device,
            view.trace,
            &run.replay,
            &opts.roles,
        ));
        run
    }

    /// [`DeviceRun::new`] without roles: a view that shows a few allocations classifies
    /// those alone (`attr.set_roles` with [`roles::classify_some`]).
    pub fn unclassified(
        snap: &'s Snapshot,
        view: DeviceView<'s>,
        opts: &Options,
        classes: &Classification,
    ) -> DeviceRun<'s> {
        let replay = replay::replay(&view);
        let mut attr = Attributor::with(snap, opts.by, classes);
        let carried = names::carried(snap, &view, &replay);
        if let Some(kind) = opts.by.name_kind() {
            let map = carried.iter().find(|(k, _)| *k == kind).map_or_else(
                || names::name_map(snap, &view, &replay, kind),
                |(_, m)| m.clone(),
            );
            attr.set_names(map);
        }
        if opts.by == GroupBy::Pool {
            attr.set_names(crate::attribute::pools::pool_map(&view, &replay));
        }
        attr.set_names_beside(carried);
        DeviceRun {
            replay,
            attr,
            view,
            leak_options: opts.leaks.clone(),
            spec: opts.windows.clone(),
            within: opts.within.clone(),
            windows: None,
            within_matched: true,
        }
    }

    /// Uses `windows` instead of cutting them per the options (a series of snapshots
    /// brings its own: one per file).
    pub fn set_windows(&mut self, windows: Windows) {
        self.windows = Some(windows);
    }

    /// The device index.
    pub fn device(&self) -> i64 {
        self.view.device
    }

    /// The snapshot.
    pub fn snapshot(&self) -> &'s Snapshot {
        self.attr.snapshot()
    }

    /// The replay, the windows (cut now if they were not yet) and the attributor at once:
    /// the leak finder reads the first two while it keys allocations with the third.
    pub fn parts(&mut self) -> (&Replay, &Windows, &mut Attributor<'s>) {
        let (snap, d) = (self.attr.snapshot(), self.view.device);
        let (spec, within, attr) = (&self.spec, &self.within, &self.attr);
        let mut matched = true;
        let replay = &self.replay;
        let w = self.windows.get_or_insert_with(|| {
            let w = windows::windows(snap, replay, spec, attr);
            match within {
                None => w,
                Some(within) => {
                    let spans = windows::annotation_spans(snap, d, &within.annotation);
                    matched = !spans.is_empty();
                    w.restrict(&spans, &within.to_string())
                }
            }
        });
        self.within_matched &= matched;
        (&self.replay, w, &mut self.attr)
    }

    /// The windows, cut now if they were not yet.
    pub fn windows(&mut self) -> &Windows {
        self.parts().1
    }

    /// Whether `--within` (if given) matched an annotation of this device; known once the
    /// windows are cut.
    pub fn within_matched(&self) -> bool {
        self.within_matched
    }

    /// The point after the last event (it always exists).
    pub fn end_point(&self) -> Point {
        point_after(
            self.snapshot(),
            &self.replay,
            At::End,
            self.replay.last_event(),
        )
    }

    /// The leak finder on this device, with the session's options.
    pub fn find_leaks(&mut self) -> leaks::DeviceLeaks {
        let o = self.leak_options.clone();
        let view = self.view.clone();
        let (rep, w, attr) = self.parts();
        let mut found = leaks::leaks(rep, w, attr, &o);
        found.reserved_growth = reserved::reserved_growth(&view, rep, w, o.warmup);
        found
    }

    /// The points of the peak and of the end (they always exist).
    pub fn peak_and_end(&self) -> (Point, Point) {
        let peak = point_after(
            self.snapshot(),
            &self.replay,
            At::Peak,
            self.replay.peak().0,
        );
        (peak, self.end_point())
    }

    /// The OOM explanation: the leak finder over the windows before the failure, then the
    /// allocator's state at it (the end state when there is no failure).
    pub fn explain_oom(&mut self) -> DeviceOom {
        let o = self.leak_options.clone();
        let snap = self.snapshot();
        let (rep, w, attr) = self.parts();
        let before = leaks::leaks(rep, &oom::windows_before(w, rep), attr, &o);
        oom::explain(snap, &self.view, &self.replay, &mut self.attr, &before)
    }
}
