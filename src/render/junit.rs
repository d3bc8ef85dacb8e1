//! `check --junit`: the report as JUnit XML, a test suite per snapshot, a test case per
//! limit (and per device, when a file has several).

use std::fmt::Write;

use super::bytes;
use super::check::case_detail;
use crate::report::CheckReport;

/// XML text and attribute values; control characters, which XML 1.0 does not allow, shown
/// escaped as on a terminal.
fn xml_escape(s: &str) -> String {
    super::terminal_text(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The report as JUnit XML.
pub fn junit(r: &CheckReport) -> String {
    let mut o = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"leakscope check\">\n",
    );
    for f in &r.files {
        let cases: Vec<_> = f
            .devices
            .iter()
            .flat_map(|d| d.cases.iter().map(move |c| (d.device, c)))
            .collect();
        let failures = cases.iter().filter(|(_, c)| !c.passed).count();
        let _ = writeln!(
            o,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\">",
            xml_escape(&f.file),
            cases.len(),
            failures
        );
        let several = f.devices.len() > 1;
        for (device, c) in cases {
            let class = if several {
                format!("leakscope.check.device{device}")
            } else {
                "leakscope.check".to_string()
            };
            let _ = write!(
                o,
                "    <testcase classname=\"{class}\" name=\"{}\">",
                xml_escape(&c.name.to_string())
            );
            if !c.passed {
                let _ = write!(
                    o,
                    "\n      <failure message=\"{}\">{}</failure>\n    ",
                    match c.unjudged {
                        Some(_) => "not checked: no per-window verdicts".to_string(),
                        None => format!("{} exceeds {}", bytes(c.value), bytes(c.limit)),
                    },
                    xml_escape(&case_detail(c))
                );
            }
            o.push_str("</testcase>\n");
        }
        o.push_str("  </testsuite>\n");
    }
    o.push_str("</testsuites>\n");
    o
}
