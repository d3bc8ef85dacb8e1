//! A leak limit judged on a `leaks` report, in words: the message of a test that asserts
//! no call site keeps more than a limit per window (Python's
//! `leakscope.testing.assert_no_leaks`), so a front end states the failure as the library
//! words every finding.

use super::{bytes_exact, terminal_text};
use crate::analysis::leaks::DeviceLeaks;
use crate::report::LeaksReport;

/// How to get windows a leak check can judge, when it could judge none.
const WINDOWS_HINT: &str = "pass windows= naming a unit of work that repeats in the trace, e.g. \
windows=\"annotation:^step$\" (each iteration inside torch.profiler.record_function(\"step\")), \
windows=\"frame:^train_step$\" (entries into a function) or windows=\"every:500\" (every 500 events)";

/// Why `report` fails a limit of `limit` bytes per window, or `None` when it holds: every
/// suspect (leak or retained) growing faster, per device, with its kind, rate (readable
/// and exact), the windows it grew in and since which; or, when no device has per-window
/// verdicts, that growth cannot be judged (a leak check that cannot see growth does not
/// pass). `windows` is the spec asked for, named in that message.
///
/// ```
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/scenarios/control_no_leak.pickle");
/// let s = leakscope::session::Session::open(std::path::Path::new(path), Default::default()).unwrap();
/// let r = s.leaks(&Default::default()).unwrap();
/// assert_eq!(leakscope::render::leak_limit::failure(&r, 0, "auto"), None);
/// ```
pub fn failure(report: &LeaksReport, limit: u64, windows: &str) -> Option<String> {
    let judged: Vec<&DeviceLeaks> = report
        .devices
        .iter()
        .filter(|d| d.windows.verdicts)
        .collect();
    if judged.is_empty() {
        let mut why: Vec<String> = report
            .devices
            .iter()
            .map(|d| {
                let reason = terminal_text(&d.windows.reason);
                format!("  {}: no verdicts: {reason}", windows_line(d))
            })
            .collect();
        if why.is_empty() {
            why.push("  the snapshot has no trace events".into());
        }
        return Some(format!(
            "leakscope: growth per window cannot be judged (windows={windows:?}), so this leak check cannot pass:\n{}\n{WINDOWS_HINT}",
            why.join("\n")
        ));
    }
    let mut sections = Vec::new();
    let mut offenders = 0;
    for d in judged {
        let mut over: Vec<_> = d
            .suspects
            .iter()
            .filter(|s| s.bytes_per_window > limit)
            .collect();
        if over.is_empty() {
            continue;
        }
        over.sort_by_key(|s| std::cmp::Reverse(s.bytes_per_window));
        offenders += over.len();
        let mut lines = vec![format!("  {}", windows_line(d))];
        lines.extend(over.iter().map(|s| {
            format!(
                "    {}: {}, {} per window, grew in {} of {} windows since window {}",
                terminal_text(&s.site.label),
                s.kind.as_str(),
                bytes_exact(s.bytes_per_window),
                s.windows_growing,
                s.windows_total,
                s.onset_window
            )
        }));
        sections.push(lines.join("\n"));
    }
    (offenders > 0).then(|| {
        format!(
            "leakscope: {offenders} {} by more than {} per window:\n{}",
            if offenders == 1 {
                "call site grows"
            } else {
                "call sites grow"
            },
            bytes_exact(limit),
            sections.join("\n")
        )
    })
}

/// `device D: N windows from SOURCE (spec S)`.
fn windows_line(d: &DeviceLeaks) -> String {
    let w = &d.windows;
    let spec = w
        .spec
        .as_deref()
        .map_or(String::new(), |s| format!(" (spec {})", terminal_text(s)));
    format!(
        "device {}: {} window{} from {}{spec}",
        d.device,
        w.count,
        if w.count == 1 { "" } else { "s" },
        w.source
    )
}
