//! The names people give their memory (`--by annotation|metadata|compile`) and the
//! per-phase table, against the generator's ground truth: every scenario whose truth has
//! `names` groups its live bytes exactly as the truth does at the end and at the peak, the
//! groups add up to `--by site`'s total, and `phases` gives each range's start, peak and end
//! bytes as the truth computes them from the model.

use std::collections::BTreeMap;

use leakscope::analysis::At;
use leakscope::attribute::{FrameFilters, GroupBy};

use crate::common::{
    device_options, device_truths, fixture, leakscope_json, scenario_truths, session, truth_groups,
};

fn groups(
    s: &leakscope::Session,
    device: i64,
    by: GroupBy,
    at: At,
) -> BTreeMap<String, (u64, u64)> {
    let report = s
        .top(
            &device_options(device, by, FrameFilters::default()),
            at,
            usize::MAX,
        )
        .expect("point resolves");
    let d = &report.devices[0];
    assert_eq!(d.rest.keys, 0, "every group is a row");
    d.rows
        .iter()
        .map(|r| (r.site.label.clone(), (r.bytes, r.blocks)))
        .collect()
}

fn total(g: &BTreeMap<String, (u64, u64)>) -> (u64, u64) {
    g.values()
        .fold((0, 0), |(b, n), &(b2, n2)| (b + b2, n + n2))
}

/// On every scenario (most carry `record_function` ranges, one carries every kind of
/// name), each names' grouping adds up to `--by site`'s bytes and blocks at the end and at
/// the peak: every allocation has exactly one name of each kind.
#[test]
fn every_names_grouping_adds_up_to_the_sites() {
    for (stem, truth) in scenario_truths() {
        let s = session(&fixture(&format!("scenarios/{stem}.pickle")));
        for (device, _) in device_truths(&truth) {
            for at in [At::End, At::Peak] {
                let by_site = total(&groups(&s, device, GroupBy::Site, at));
                for by in [GroupBy::Annotation, GroupBy::Metadata, GroupBy::Compile] {
                    let got = total(&groups(&s, device, by, at));
                    assert_eq!(got, by_site, "{stem} device {device} at {at:?} by {by}");
                }
            }
        }
    }
}

#[test]
fn names_group_live_bytes_as_the_truth_does() {
    let mut checked = 0;
    for (stem, truth) in scenario_truths() {
        if truth["names"].is_null() {
            continue;
        }
        let s = session(&fixture(&format!("scenarios/{stem}.pickle")));
        for (device, dev_truth) in device_truths(&truth) {
            for (point, at) in [("end", At::End), ("peak", At::Peak)] {
                let by_site = total(&groups(&s, device, GroupBy::Site, at));
                for (kind, by) in [
                    ("annotation", GroupBy::Annotation),
                    ("metadata", GroupBy::Metadata),
                    ("compile", GroupBy::Compile),
                ] {
                    let got = groups(&s, device, by, at);
                    let want = truth_groups(&dev_truth["names"][point][kind]);
                    assert_eq!(got, want, "{stem} device {device} at {point}, by {kind}");
                    assert_eq!(
                        total(&got),
                        by_site,
                        "{stem} at {point}: by {kind} sums to by site"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(
        checked >= 6,
        "a scenario with names is shipped ({checked} groupings checked)"
    );
}

#[test]
fn phases_match_the_truth() {
    let mut checked = 0;
    for (stem, truth) in scenario_truths() {
        if truth["phases"].is_null() {
            continue;
        }
        let s = session(&fixture(&format!("scenarios/{stem}.pickle")));
        let report = s.phases(&leakscope::Options::default()).expect("phases");
        for (device, dev_truth) in device_truths(&truth) {
            let d = report
                .devices
                .iter()
                .find(|d| d.device == device)
                .expect("device");
            let got: Vec<(String, u64, u64, u64)> = d
                .phases
                .iter()
                .map(|p| (p.name.clone(), p.start_bytes, p.peak_bytes, p.end_bytes))
                .collect();
            let want: Vec<(String, u64, u64, u64)> = dev_truth["phases"]
                .as_array()
                .expect("phases list")
                .iter()
                .map(|p| {
                    let n = |k: &str| p[k].as_u64().unwrap();
                    (
                        p["name"].as_str().unwrap().to_string(),
                        n("start_bytes"),
                        n("peak_bytes"),
                        n("end_bytes"),
                    )
                })
                .collect();
            assert_eq!(got, want, "{stem} device {device}: phases");
            checked += got.len();
        }
    }
    assert!(checked > 0, "a scenario with phases is shipped");
}

/// The tree under a names' grouping puts each name above the stacks of its memory: the
/// names' nodes are the root's children and hold what `top` gives them.
#[test]
fn the_tree_groups_by_name() {
    let path = fixture("scenarios/named_compiled_leak.pickle");
    let s = session(&path);
    let json = leakscope_json(&["tree", path.to_str().unwrap(), "--by", "compile"]);
    let children = json["devices"][0]["root"]["children"]
        .as_array()
        .expect("children");
    let got: BTreeMap<String, u64> = children
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: BTreeMap<String, u64> = groups(&s, 0, GroupBy::Compile, At::End)
        .into_iter()
        .map(|(k, (b, _))| (k, b))
        .collect();
    assert_eq!(got, want);
}

/// The real files of the names' era (`compile_context` and `user_metadata` on every event,
/// `external_annotations`): each grouping at the end and each range's bytes equal what
/// CPython's pickle gives by the scenario checker's rules (`tests/expected/names_of.py`).
#[test]
fn corpus_names_and_phases_match_cpython() {
    let Some(corpus) = crate::common::corpus("corpus_names_and_phases_match_cpython") else {
        return;
    };
    let dir = corpus.join("cuda");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus/cuda")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("era210_compile_ctx_user_md__"))
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the corpus has era210_compile_ctx_user_md__ files"
    );
    for path in files {
        let s = session(&path);
        let phases = s.phases(&leakscope::Options::default()).expect("phases");
        for d in &phases.devices {
            let out = std::process::Command::new("python3")
                .arg(crate::common::root().join("tests/expected/names_of.py"))
                .arg(&path)
                .arg(d.device.to_string())
                .output()
                .expect("python3 runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let want: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            for (kind, by) in [
                ("annotation", GroupBy::Annotation),
                ("metadata", GroupBy::Metadata),
                ("compile", GroupBy::Compile),
            ] {
                let got: BTreeMap<String, u64> = groups(&s, d.device, by, At::End)
                    .into_iter()
                    .map(|(k, (b, _))| (k, b))
                    .collect();
                let want: BTreeMap<String, u64> =
                    serde_json::from_value(want["end"][kind].clone()).expect("a map");
                assert_eq!(
                    got,
                    want,
                    "{} device {}: by {kind}",
                    path.display(),
                    d.device
                );
            }
            let got: Vec<serde_json::Value> = d
                .phases
                .iter()
                .map(|p| {
                    serde_json::json!({"name": p.name, "start_bytes": p.start_bytes,
                        "peak_bytes": p.peak_bytes, "end_bytes": p.end_bytes})
                })
                .collect();
            assert_eq!(
                got,
                want["phases"].as_array().unwrap().clone(),
                "{}",
                path.display()
            );
        }
    }
}
