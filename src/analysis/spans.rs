//! `record_function` ranges from `external_annotations` as spans a timeline can draw:
//! each START paired with the next END of the same name (the most recent open one),
//! then laid out in lanes within which every two spans are either disjoint or one inside
//! the other, so a viewer's slice track can nest them. Annotations from several threads
//! can cross; a crossing span moves to another lane rather than breaking a stack.

use crate::model::Snapshot;

/// One `record_function` range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// The annotation's name.
    pub name: String,
    /// `time_us` of its START.
    pub start_us: i64,
    /// `time_us` of its END (`None`: no END before the snapshot was taken).
    pub end_us: Option<i64>,
    /// The lane it is drawn in (0 first).
    pub lane: u32,
}

impl Span {
    fn end(&self) -> i64 {
        self.end_us.unwrap_or(i64::MAX)
    }
}

/// The spans of `device` (annotations without a device belong to every device), at
/// most `limit` of them: when there are more, the longest are kept (a span is never
/// longer than one that holds it, so what is kept still nests). Also returns how many
/// were left out.
///
/// ```
/// let snap = leakscope::model::Snapshot::default();
/// let (spans, left_out) = leakscope::analysis::spans::spans(&snap, 0, 100);
/// assert!(spans.is_empty() && left_out == 0);
/// ```
pub fn spans(snap: &Snapshot, device: i64, limit: usize) -> (Vec<Span>, u64) {
    let mut out: Vec<Span> = crate::model::annotation_ranges(snap, device)
        .into_iter()
        .map(|r| Span {
            name: r.name.to_string(),
            start_us: r.start_us,
            end_us: r.end_us,
            lane: 0,
        })
        .collect();
    let left_out = out.len().saturating_sub(limit) as u64;
    if out.len() > limit {
        out.sort_by_key(|s| std::cmp::Reverse(s.end().saturating_sub(s.start_us)));
        out.truncate(limit);
    }
    lay_out(&mut out);
    (out, left_out)
}

/// Sorts spans by start (the longer first at equal starts) and gives each the first lane
/// where it nests: the lane's innermost open span ends at or after it, or none is open.
fn lay_out(spans: &mut [Span]) {
    spans.sort_by(|a, b| {
        a.start_us
            .cmp(&b.start_us)
            .then_with(|| b.end().cmp(&a.end()))
    });
    // Per lane, the ends of its open spans, outermost first.
    let mut lanes: Vec<Vec<i64>> = Vec::new();
    for s in spans.iter_mut() {
        let mut placed = None;
        for (li, stack) in lanes.iter_mut().enumerate() {
            while stack.last().is_some_and(|&e| e <= s.start_us) {
                stack.pop();
            }
            if placed.is_none() && stack.last().is_none_or(|&e| e >= s.end()) {
                placed = Some(li);
            }
        }
        let li = placed.unwrap_or_else(|| {
            lanes.push(Vec::new());
            lanes.len() - 1
        });
        lanes[li].push(s.end());
        s.lane = li as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Annotation;

    fn ann(stage: &str, name: &str, t: i64) -> Annotation {
        Annotation {
            stage: Some(stage.into()),
            name: Some(name.into()),
            device: None,
            time_us: Some(t),
            extra: Default::default(),
        }
    }

    #[test]
    fn nested_ranges_share_a_lane_and_crossing_ones_do_not() {
        let snap = Snapshot {
            external_annotations: Some(vec![
                ann("START", "step", 0),
                ann("START", "fwd", 10),
                ann("END", "fwd", 20),
                ann("START", "bwd", 20),
                ann("START", "comm", 25), // crosses `bwd`: starts inside, ends after
                ann("END", "bwd", 30),
                ann("END", "comm", 40),
                ann("END", "step", 50),
                ann("START", "open", 60),
            ]),
            ..Snapshot::default()
        };
        let (s, left) = spans(&snap, 0, 100);
        assert_eq!(left, 0);
        let lane = |n: &str| s.iter().find(|x| x.name == n).unwrap().lane;
        assert_eq!(lane("step"), 0);
        assert_eq!(lane("fwd"), 0);
        assert_eq!(lane("bwd"), 0);
        assert_eq!(lane("comm"), 1);
        assert_eq!(lane("open"), 0);
        assert_eq!(s.iter().find(|x| x.name == "open").unwrap().end_us, None);
        // The two longest kept: the open range (to the end) and step (50 µs).
        let (s, left) = spans(&snap, 0, 2);
        assert_eq!(left, 3);
        let names: Vec<_> = s.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["step", "open"]);
    }
}
