//! The verdict engine on a seeded sample of the generator's parameter space
//! (`fixtures/gen/sweep.py`: pipeline depth and stage, micro-batches per mini-batch, where
//! the kept memory goes, schedules, how the frees were recorded, ring buffers), each
//! case judged against the generator's own truth: every true leak or retained site a
//! suspect of that kind, at its rate within 10%, nothing else a suspect. No case is
//! tuned for: the sample is drawn fresh from its seed.
//!
//! `LEAKSCOPE_SWEEP_SAMPLE` (default 160) and `LEAKSCOPE_SWEEP_SEED` (default 56) set the
//! sample; `LEAKSCOPE_SWEEP_TABLE=FILE` writes the per-parameter table of results there
//! (benches/sweep.sh runs a larger sample that way for docs/verdicts.md).

use std::collections::BTreeMap;
use std::path::Path;

use leakscope::analysis::leaks::DeviceLeaks;

use crate::common::*;

/// What went wrong with one case (empty: right). Where the trace in view cannot tell
/// (the truth says why: a ring buffer left one tooth of a sawtooth, or under three
/// windows), being right is claiming nothing false, and where a true finding is not
/// claimed, saying how to record a trace that can tell.
fn judge(truth: &serde_json::Value, r: &DeviceLeaks) -> Vec<String> {
    let mut wrong = Vec::new();
    let truth_leaks = truth["leaks"].as_array().cloned().unwrap_or_default();
    if truth["decidable"] == false {
        for s in &r.suspects {
            let agrees = truth_leaks
                .iter()
                .any(|t| t["site"] == s.site.label.as_str() && t["kind"] == s.kind.to_string());
            if !agrees {
                wrong.push(format!("{}: {} found undecidably", s.site.label, s.kind));
            }
        }
        let missed = truth_leaks.iter().any(|t| {
            r.suspects
                .iter()
                .all(|s| t["site"] != s.site.label.as_str())
        });
        if missed && r.capture.is_none() {
            wrong.push(format!(
                "{}, and no advice on what to record",
                truth["undecidable_why"].as_str().unwrap_or("undecidable")
            ));
        }
        return wrong;
    }
    for t in &truth_leaks {
        let site = t["site"].as_str().unwrap_or("");
        let short = site.rsplit(':').next().unwrap_or(site);
        let Some(s) = r.suspects.iter().find(|s| s.site.label == site) else {
            let listed = r
                .not_suspects
                .iter()
                .find(|g| g.site.label == site)
                .map_or("not listed".to_string(), |g| g.kind.to_string());
            wrong.push(format!("{short}: {} found {listed}", t["kind"]));
            continue;
        };
        let want = t["kind"].as_str().unwrap_or("");
        if s.kind.to_string() != want {
            wrong.push(format!("{short}: {want} found {}", s.kind));
        }
        let rate = t["bytes_per_occurrence"]
            .as_u64()
            .or(t["bytes_per_window"].as_u64())
            .unwrap_or(0);
        let lo = t["bytes_per_window_min"].as_u64().unwrap_or(rate) as f64 * 0.9;
        let hi = t["bytes_per_window_max"].as_u64().unwrap_or(rate) as f64 * 1.1;
        let got = s.bytes_per_occurrence as f64;
        if got < lo || got > hi {
            wrong.push(format!(
                "{short}: {} per window, truth {rate}",
                s.bytes_per_occurrence
            ));
        }
    }
    for s in &r.suspects {
        if !truth_leaks
            .iter()
            .any(|t| t["site"] == s.site.label.as_str())
        {
            let label = &s.site.label;
            let short = label.rsplit(':').next().unwrap_or(label);
            wrong.push(format!("{short}: {} found, truth none", s.kind));
        }
    }
    wrong
}

#[test]
fn verdicts_hold_on_a_sample_of_the_generators_space() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let n: usize = std::env::var("LEAKSCOPE_SWEEP_SAMPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(160);
    let seed: u64 = std::env::var("LEAKSCOPE_SWEEP_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(56);
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("python3")
        .arg(root().join("fixtures/gen/sweep.py"))
        .args(["--out", dir.path().to_str().unwrap()])
        .args(["--sample", &n.to_string(), "--seed", &seed.to_string()])
        .status()
        .expect("python3 runs");
    assert!(st.success());
    let mut cases: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pickle"))
        .collect();
    cases.sort();
    assert_eq!(cases.len(), n);
    // Per parameter and value: (cases, wrong).
    let mut table: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut undecidable = 0;
    for path in &cases {
        let truth = read_json(&path.with_extension("truth.json"));
        let report = session(path).leaks(&window_options("auto")).unwrap();
        let wrong = match report.devices.first() {
            Some(d) => judge(&truth, d),
            None => vec!["no device".into()],
        };
        for (k, v) in truth["sweep"].as_object().unwrap() {
            if k == "seed" {
                continue;
            }
            let e = table.entry((k.clone(), v.to_string())).or_default();
            e.0 += 1;
            e.1 += usize::from(!wrong.is_empty());
        }
        undecidable += usize::from(truth["decidable"] == false);
        if !wrong.is_empty() {
            failures.push(format!("{}: {}", stem(path), wrong.join("; ")));
        }
    }
    let text = table_text(&table, cases.len(), undecidable, failures.len());
    if let Ok(out) = std::env::var("LEAKSCOPE_SWEEP_TABLE") {
        std::fs::write(&out, format!("{text}\n{}\n", failures.join("\n"))).unwrap();
    }
    eprintln!("{text}");
    assert!(
        failures.is_empty(),
        "{} of {} cases wrong:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

/// The results per parameter value, as a Markdown table.
fn table_text(
    table: &BTreeMap<(String, String), (usize, usize)>,
    cases: usize,
    undecidable: usize,
    wrong: usize,
) -> String {
    let mut t = format!(
        "{cases} cases ({undecidable} that the trace in view cannot decide), {wrong} wrong\n\n| parameter | value | cases | wrong |\n|---|---|---:|---:|\n"
    );
    for ((k, v), (n, w)) in table {
        t.push_str(&format!("| {k} | {} | {n} | {w} |\n", v.trim_matches('"')));
    }
    t
}

/// What a leaks report finds, for comparing two recordings of one run: per device, each
/// suspect's site, kind, rate and role, and each listed non-suspect's kind by site.
struct Findings {
    suspects: Vec<String>,
    listed: BTreeMap<String, String>,
    /// Per device with a trace: what its free stacks were read as.
    free_stacks: Vec<&'static str>,
}

fn findings(path: &Path) -> Findings {
    let report = session(path).leaks(&window_options("auto")).unwrap();
    let mut suspects = Vec::new();
    let mut listed = BTreeMap::new();
    let mut free_stacks = Vec::new();
    for d in &report.devices {
        if d.trace.events > 0 {
            free_stacks.push(d.trace.free_stacks);
        }
        for s in &d.suspects {
            suspects.push(format!(
                "{} {} {} {} role {}",
                d.device, s.site.label, s.kind, s.bytes_per_window, s.role
            ));
        }
        for g in &d.not_suspects {
            listed.insert(format!("{} {}", d.device, g.site.label), g.kind.to_string());
        }
    }
    suspects.sort();
    Findings {
        suspects,
        listed,
        free_stacks,
    }
}

/// Every shipped scenario re-recorded as `context="alloc"` writes it (each free with its
/// allocation's stack), with no free stacks, and with the allocation's stack on each
/// completion only: the same suspects (site, kind, rate, role), and the sites listed as
/// non-suspects both times of the same kind.
#[test]
fn verdicts_do_not_depend_on_how_frees_were_recorded() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut compared = 0;
    let mut differ = Vec::new();
    let mut scenarios: Vec<_> = std::fs::read_dir(fixture("scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pickle"))
        .collect();
    scenarios.sort();
    for path in &scenarios {
        let before = findings(path);
        for mode in ["alloc", "none", "completed_alloc"] {
            let out = dir.path().join(format!("{}-{mode}.pickle", stem(path)));
            let st = std::process::Command::new("python3")
                .arg(root().join("fixtures/gen/recording.py"))
                .args([path.as_os_str(), out.as_os_str()])
                .args(["--free-stacks", mode])
                .status()
                .expect("python3 runs");
            assert!(st.success());
            let after = findings(&out);
            if after.suspects != before.suspects {
                differ.push(format!(
                    "{} re-recorded {mode}:\n  before {:?}\n  after  {:?}",
                    stem(path),
                    before.suspects,
                    after.suspects
                ));
            }
            // A site listed both times keeps its kind, except memory held until a
            // `gc.collect()`: only the free's own stack says the collector let go of it,
            // and without that stack it is memory in flight.
            for (site, kind) in &before.listed {
                let now = after.listed.get(site);
                let excused = mode != "completed_alloc" && kind == "gc-held";
                if now.is_some_and(|k| k != kind) && !excused {
                    differ.push(format!(
                        "{} re-recorded {mode}: {site} {kind} became {now:?}",
                        stem(path)
                    ));
                }
            }
            // The report says how the frees were recorded: every trace re-recorded with
            // the allocations' stacks, or without free stacks, is read as such. (With the
            // allocation's stack on completions only, a file whose requests carry few
            // frames of their own may be read either way; its verdicts are what count.)
            let said = match mode {
                "alloc" => Some("allocation"),
                "none" => Some("none"),
                _ => None,
            };
            for f in after.free_stacks.iter().filter(|_| said.is_some()) {
                if Some(*f) != said {
                    differ.push(format!(
                        "{} re-recorded {mode}: free stacks read as {f}, not {said:?}",
                        stem(path)
                    ));
                }
            }
            compared += 1;
        }
    }
    assert!(compared >= 3 * 30, "only {compared} recordings compared");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
