//! Stage 3, `attribute`: which call site (or user frame, file, function, whole stack) an
//! allocation belongs to, after filtering frames the way a profiler user expects.
//!
//! Frames are classified once each ([`FrameFilters`]), shared by every device of a
//! snapshot, and stacks are mapped to keys once each (a cache by stack id), so
//! attributing millions of allocations costs a lookup each.

mod filters;
mod group;
pub mod names;
pub mod pools;
pub mod roles;
mod site;

use std::sync::Arc;

use crate::model::fxhash::FastMap;
use crate::model::{FrameId, Snapshot, StackId};
use crate::replay::Lifetime;

pub use filters::{FrameFilters, is_python};
pub use group::{GroupBy, GroupByError, TreeGroupingError};
pub use site::{NO_FRAME, NO_USER_FRAME, Site, UNTRACED, frame_label, stack_labels};

use filters::FrameClasses;

/// How a snapshot's frames are classified for one set of filters; built once and shared
/// by the attributors of every device.
#[derive(Debug, Clone)]
pub struct Classification(Arc<FrameClasses>);

impl Classification {
    /// Classifies every frame of `snap` under `filters`.
    pub fn new(snap: &Snapshot, filters: &FrameFilters) -> Classification {
        Classification(Arc::new(FrameClasses::new(snap, filters)))
    }
}

/// A stack not yet keyed, in [`Attributor`]'s cache.
const UNSEEN: u32 = u32::MAX;
/// A stack `--focus` leaves out, in the cache.
const OUT_OF_FOCUS: u32 = u32::MAX - 1;

/// Maps stacks to sites under one grouping, caching per stack.
pub struct Attributor<'s> {
    snap: &'s Snapshot,
    by: GroupBy,
    classes: Arc<FrameClasses>,
    /// Key of each stack id seen ([`UNSEEN`] until then, [`OUT_OF_FOCUS`] when `--focus`
    /// leaves it out): indexed, since every lifetime of a replay asks.
    cache: Vec<u32>,
    keys: Vec<Site>,
    key_index: FastMap<Site, u32>,
    /// The role of each allocation of the device, once classified.
    roles: Option<roles::RoleMap>,
    /// The key of [`UNTRACED`], once used.
    untraced: Option<u32>,
    /// Under a names' grouping, the names of the device's allocations.
    names: Option<names::NameMap>,
    /// The names shown beside sites: those of every kind the snapshot carries.
    beside: Vec<(names::NameKind, names::NameMap)>,
}

impl<'s> Attributor<'s> {
    /// An attributor for `snap` grouping by `by`, frames filtered by `filters`.
    pub fn new(snap: &'s Snapshot, by: GroupBy, filters: &FrameFilters) -> Self {
        Attributor::with(snap, by, &Classification::new(snap, filters))
    }

    /// An attributor over an existing classification of `snap`'s frames.
    pub fn with(snap: &'s Snapshot, by: GroupBy, classes: &Classification) -> Self {
        Attributor {
            snap,
            by,
            classes: Arc::clone(&classes.0),
            cache: Vec::new(),
            keys: Vec::new(),
            key_index: FastMap::default(),
            roles: None,
            untraced: None,
            names: None,
            beside: Vec::new(),
        }
    }

    /// Gives the attributor the roles of its device's allocations (the lifetimes of the
    /// replay they were classified on); `--by role` and every role column read them.
    pub fn set_roles(&mut self, map: roles::RoleMap) {
        if self.by == GroupBy::Role {
            // Keys are the role ids, so a role's key is its id.
            self.keys = map
                .rules()
                .names()
                .iter()
                .map(|n| Site::label_only(n.clone()))
                .collect();
        }
        self.roles = Some(map);
    }

    /// Gives the attributor the names of its device's allocations (the lifetimes of the
    /// replay they were read on), of the kind it groups by: keys are then the names' ids.
    pub fn set_names(&mut self, map: names::NameMap) {
        self.keys = map.names().to_vec();
        self.key_index = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i as u32))
            .collect();
        self.cache.clear();
        self.untraced = None;
        self.names = Some(map);
    }

    /// Gives the attributor the names to show beside its sites ([`names::carried`]).
    pub fn set_names_beside(&mut self, maps: Vec<(names::NameKind, names::NameMap)>) {
        self.beside = maps;
    }

    /// Whether the snapshot carries names to show beside sites.
    pub fn has_names_beside(&self) -> bool {
        !self.beside.is_empty()
    }

    /// The names beside a group of allocations `(lifetime index, bytes)`: empty when the
    /// snapshot carries none.
    pub fn names_of(&self, lifes: impl Iterator<Item = (usize, u64)> + Clone) -> names::Names {
        if self.beside.is_empty() {
            return names::Names::new();
        }
        names::dominant(&self.beside, lifes)
    }

    /// An attributor of the same snapshot, frames and roles that groups by role.
    pub fn by_role(&self) -> Attributor<'s> {
        let classes = Classification(Arc::clone(&self.classes));
        let mut a = Attributor::with(self.snap, GroupBy::Role, &classes);
        if let Some(m) = &self.roles {
            a.set_roles(m.clone());
        }
        a.beside = self.beside.clone();
        a
    }

    /// The roles, when classified.
    pub fn roles(&self) -> Option<&roles::RoleMap> {
        self.roles.as_ref()
    }

    /// The role name of lifetime `i` (`unknown` before roles are classified).
    pub fn role_name(&self, i: usize) -> &str {
        self.roles
            .as_ref()
            .map_or(roles::Role::Unknown.name(), |m| m.name(m.role(i)))
    }

    /// The role id of lifetime `i` (`unknown` before roles are classified).
    pub fn role(&self, i: usize) -> roles::RoleId {
        self.roles
            .as_ref()
            .map_or(roles::Role::Unknown.id(), |m| m.role(i))
    }

    /// The key of lifetime `i` (`l`) of the replay: its role under `--by role`, else the
    /// key of its stack; `None` when `--focus` leaves it out.
    pub fn key_of(&mut self, i: usize, l: &Lifetime) -> Option<u32> {
        if self.by == GroupBy::Role {
            if self.classes.focus && !self.in_focus(l.stack) {
                return None;
            }
            return Some(self.role(i).0 as u32);
        }
        if let Some(m) = &self.names {
            if self.classes.focus && !self.in_focus(l.stack) {
                return None;
            }
            return Some(m.id(i));
        }
        if l.before_trace() && self.filtered(l.stack).is_empty() {
            if self.classes.focus {
                return None;
            }
            return Some(self.untraced_key());
        }
        self.key(l.stack)
    }

    fn untraced_key(&mut self) -> u32 {
        if let Some(k) = self.untraced {
            return k;
        }
        let site = Site::label_only(UNTRACED);
        let k = match self.key_index.get(&site) {
            Some(&k) => k,
            None => {
                let k = self.keys.len() as u32;
                self.keys.push(site.clone());
                self.key_index.insert(site, k);
                k
            }
        };
        self.untraced = Some(k);
        k
    }

    /// The grouping.
    pub fn by(&self) -> GroupBy {
        self.by
    }

    /// The snapshot.
    pub fn snapshot(&self) -> &'s Snapshot {
        self.snap
    }

    /// The frames of `stack` that survive filtering, innermost first.
    pub fn filtered(&self, stack: StackId) -> Vec<FrameId> {
        self.snap
            .stacks
            .get(stack)
            .iter()
            .copied()
            .filter(|f| !self.classes.classes[f.index()].dropped)
            .collect()
    }

    /// The frame an allocation with `frames` (filtered, innermost first) is charged to:
    /// the innermost Python frame, else the innermost C++ frame outside the allocation
    /// machinery, else the innermost frame.
    fn site_frame(&self, frames: &[FrameId]) -> Option<FrameId> {
        let class = |f: &FrameId| self.classes.classes[f.index()];
        frames
            .iter()
            .find(|f| class(f).python)
            .or_else(|| frames.iter().find(|f| !class(f).cpp_internal))
            .or_else(|| frames.first())
            .copied()
    }

    fn in_focus(&self, stack: StackId) -> bool {
        !self.classes.focus
            || self
                .snap
                .stacks
                .get(stack)
                .iter()
                .any(|f| self.classes.classes[f.index()].focus)
    }

    fn make_site(&self, stack: StackId) -> Site {
        let snap = self.snap;
        let frames = self.filtered(stack);
        let of = |f: FrameId| Site::of_frame(snap, snap.frames.get(f));
        match self.by {
            // A stack alone has no role nor name; where only a stack is known (a freeing
            // site) it is named by its call site.
            GroupBy::Site
            | GroupBy::Role
            | GroupBy::Annotation
            | GroupBy::Metadata
            | GroupBy::Compile
            | GroupBy::Pool => self
                .site_frame(&frames)
                .map_or_else(|| Site::label_only(NO_FRAME), of),
            GroupBy::User => frames
                .iter()
                .find(|f| self.classes.classes[f.index()].user)
                .map_or_else(|| Site::label_only(NO_USER_FRAME), |&f| of(f)),
            GroupBy::Stack => {
                let mut site = self
                    .site_frame(&frames)
                    .map_or_else(|| Site::label_only(NO_FRAME), of);
                if !frames.is_empty() {
                    site.label = frames
                        .iter()
                        .rev()
                        .map(|&f| frame_label(snap, snap.frames.get(f)))
                        .collect::<Vec<_>>()
                        .join(";");
                }
                site
            }
            GroupBy::File | GroupBy::Function => match self.site_frame(&frames) {
                Some(f) => {
                    let fr = snap.frames.get(f);
                    let file = snap.strings.get(fr.filename).to_string();
                    if self.by == GroupBy::File {
                        Site {
                            name: None,
                            label: file.clone(),
                            filename: Some(file),
                            line: None,
                        }
                    } else {
                        let name = snap.strings.get(fr.name).to_string();
                        Site {
                            label: format!("{file}:{name}"),
                            name: Some(name),
                            filename: Some(file),
                            line: None,
                        }
                    }
                }
                None => Site::label_only(NO_FRAME),
            },
        }
    }

    /// The key id of an allocation with `stack`, or `None` when `--focus` leaves it out.
    pub fn key(&mut self, stack: StackId) -> Option<u32> {
        let slot = stack.index();
        match self.cache.get(slot) {
            Some(&OUT_OF_FOCUS) => return None,
            Some(&k) if k != UNSEEN => return Some(k),
            _ => {}
        }
        let k = self.in_focus(stack).then(|| {
            let site = self.make_site(stack);
            match self.key_index.get(&site) {
                Some(&i) => i,
                None => {
                    let i = self.keys.len() as u32;
                    self.keys.push(site.clone());
                    self.key_index.insert(site, i);
                    i
                }
            }
        });
        // Stack ids index the snapshot's table, so the cache grows to its size at most.
        if slot < self.snap.stacks.len() {
            if self.cache.len() <= slot {
                self.cache.resize(slot + 1, UNSEEN);
            }
            self.cache[slot] = k.unwrap_or(OUT_OF_FOCUS);
        }
        k
    }

    /// The site behind a key id.
    pub fn site(&self, id: u32) -> &Site {
        &self.keys[id as usize]
    }
}
