//! `leakscope report`: the HTML page of every scenario, checked as a file (offline, small,
//! numbers equal to the generator's truth) and, where Chromium is installed, opened
//! headless (no console errors, charts drawn, the timeline's peak in the DOM).

use std::path::{Path, PathBuf};
use std::process::Command;

use leakscope::analysis::timeline::{site_series, timeline};
use leakscope::attribute::{Attributor, FrameFilters, GroupBy};

use crate::common::*;

fn out_dir(name: &str) -> PathBuf {
    let dir = root().join("target").join(name);
    std::fs::create_dir_all(&dir).expect("create the output folder under target/");
    dir
}

/// Runs `leakscope report INPUT -o PAGE` with `extra` options, asserting success.
fn report_to(input: &Path, page: &Path, extra: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .arg("report")
        .args(extra)
        .arg(input)
        .arg("-o")
        .arg(page)
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "report {}: {}",
        input.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the report of scenario `name` and returns its path and text.
fn write_report(name: &str) -> (PathBuf, String) {
    let html = out_dir("report-tests").join(format!("{name}.html"));
    report_to(&fixture(&format!("scenarios/{name}.pickle")), &html, &[]);
    let text = std::fs::read_to_string(&html).expect("the report is UTF-8 text");
    (html, text)
}

/// The JSON embedded in the page (`<script type="application/json" id="ls-data">`).
fn embedded_data(html: &str) -> serde_json::Value {
    let open = "<script type=\"application/json\" id=\"ls-data\">";
    let start = html.find(open).expect("the page embeds its data") + open.len();
    let end = start
        + html[start..]
            .find("</script>")
            .expect("the data element ends");
    serde_json::from_str(&html[start..end]).expect("the embedded data is JSON")
}

#[test]
fn report_pages_are_offline_small_and_match_the_truth() {
    let network = regex::Regex::new(r#"(?i)(src|href|action)\s*=\s*["']?\s*(https?:|//)"#).unwrap();
    let mut checked = 0;
    for (name, truth) in scenario_truths() {
        let (_, html) = write_report(&name);
        assert!(html.len() < 20 << 20, "{name}: {} bytes", html.len());
        assert!(
            !network.is_match(&html),
            "{name}: the page refers to the network"
        );
        assert!(
            !html.contains("<link") && !html.contains("<script src"),
            "{name}: external resources"
        );
        assert!(
            html.contains("default-src 'none'"),
            "{name}: the page forbids loads"
        );
        let data = embedded_data(&html);
        assert_eq!(data["schema"], "leakscope.report/7");
        for (device, truth) in device_truths(&truth) {
            let d = device_of(&data, device, &name);
            check_device_page(&name, &html, d, &truth);
        }
        checked += 1;
    }
    assert!(checked >= 9, "only {checked} scenarios");
}

/// One device's part of the page against its truth.
fn check_device_page(name: &str, html: &str, d: &serde_json::Value, truth: &serde_json::Value) {
    let n = d["device"].as_i64().unwrap();
    // The peak: the card, the `top` table's point and the decimated timeline's maximum
    // all equal the generator's own bookkeeping.
    let peak = &truth["peak"];
    let want = peak["live_requested_bytes"]
        .as_u64()
        .expect("truth peak bytes");
    assert_eq!(d["peak"]["requested_bytes"].as_u64(), Some(want), "{name}");
    assert_eq!(d["peak"]["event_index"], peak["event_index"], "{name}");
    assert_eq!(
        d["top_peak"]["at"]["requested_bytes"].as_u64(),
        Some(want),
        "{name}"
    );
    let live: Vec<u64> = d["timeline"]["requested"]
        .as_array()
        .expect("timeline.requested")
        .iter()
        .map(|v| v.as_u64().expect("bytes"))
        .collect();
    assert_eq!(
        live.iter().copied().max(),
        Some(want),
        "{name}: timeline peak"
    );
    assert!(
        html.contains(&format!("id=\"card-peak-{n}\" data-bytes=\"{want}\"")),
        "{name}: the peak card of device {n}"
    );
    // Suspects in the page are the truth's leaks; the site column names the function,
    // with file:line beside it and the full path in the tooltip.
    let suspects: Vec<&str> = d["leaks"]["suspects"]
        .as_array()
        .expect("suspects")
        .iter()
        .map(|s| s["site"]["label"].as_str().expect("label"))
        .collect();
    for leak in truth["leaks"].as_array().into_iter().flatten() {
        let site = leak["site"].as_str().expect("truth leak site");
        assert!(
            suspects.contains(&site),
            "{name}: {site} missing from {suspects:?}"
        );
        let esc = leakscope::render::html::escape(site);
        // The tooltip: the label, then the names the program gave the memory, if any.
        assert!(html.contains(&format!("title=\"{esc}")), "{name}: {site}");
        if let Some((file, rest)) = site.split_once(".py:") {
            // file:line:function, written independently: `function` and `base.py:line`.
            let (line, function) = rest.split_once(':').unwrap();
            let base = file.rsplit('/').next().unwrap();
            let cell = format!(
                "<span class=\"fn\">{}</span> <span class=\"loc\">{base}.py:{line}</span>",
                leakscope::render::html::escape(function)
            );
            assert!(html.contains(&cell), "{name}: {cell}");
        }
    }
    // One iteration: no verdicts said so, what holds memory at the peak listed instead,
    // the truth's largest holder first.
    let one_pass = truth["windows"]["count"].as_u64() < Some(3);
    assert_eq!(
        html.contains(&format!("id=\"no-verdicts-{n}\"")),
        one_pass,
        "{name}: device {n}"
    );
    if one_pass {
        let by_site = truth["peak"]["by_site"].as_object().unwrap();
        let top = by_site.values().filter_map(|v| v["bytes"].as_u64()).max();
        let table = html
            .split(&format!("id=\"held-peak-{n}\""))
            .nth(1)
            .expect("a table of holders at the peak");
        let first = table.split("data-bytes=\"").nth(1).unwrap();
        assert_eq!(first.split('"').next().unwrap().parse().ok(), top, "{name}");
    }
    // An OOM section exactly when the trace has an OOM.
    assert_eq!(
        html.contains(&format!("id=\"oom-{n}\"")),
        !truth["oom"].is_null(),
        "{name}"
    );
}

/// The chart data, against the replay it is drawn from: every timeline point is the
/// replay's value at its event, the extremes survive decimation, and at every sample the
/// stacked sites plus "everything else" add up to the live bytes.
#[test]
fn timeline_and_site_series_hold_the_replays_numbers() {
    for (name, _) in scenario_truths() {
        let snap = load(&fixture(&format!("scenarios/{name}.pickle")));
        for dev in snap.devices() {
            let rep = leakscope::replay::replay(&dev);
            if rep.requested.is_empty() {
                continue;
            }
            for buckets in [1usize, 7, 100, 100_000] {
                let t = timeline(&rep, buckets);
                assert!(
                    t.events.len() <= 4 * buckets + 1,
                    "{name}: {buckets} buckets"
                );
                assert!(t.events.windows(2).all(|w| w[0] < w[1]), "{name}: order");
                for (k, &e) in t.events.iter().enumerate() {
                    assert_eq!(
                        t.requested[k], rep.requested[e as usize],
                        "{name} event {e}"
                    );
                    assert_eq!(t.reserved[k], rep.reserved[e as usize], "{name} event {e}");
                }
                assert_eq!(
                    t.requested.iter().max(),
                    rep.requested.iter().max(),
                    "{name}"
                );
                assert_eq!(
                    t.requested.iter().min(),
                    rep.requested.iter().min(),
                    "{name}"
                );
                assert_eq!(t.reserved.iter().max(), rep.reserved.iter().max(), "{name}");
                assert_eq!(
                    t.events.last().copied(),
                    Some(rep.requested.len() as u32 - 1)
                );
            }
            let mut attr = Attributor::new(&snap, GroupBy::Site, &FrameFilters::default());
            let s = site_series(&rep, &mut attr, 3, 50);
            assert!(s.sites.len() <= 3 && !s.events.is_empty(), "{name}");
            for (j, &e) in s.events.iter().enumerate() {
                let sum: u64 = s.sites.iter().map(|x| x.bytes[j]).sum::<u64>() + s.other[j];
                assert_eq!(
                    sum, rep.requested[e as usize],
                    "{name}: sample {j} (event {e})"
                );
            }
            // Ranked by bytes at the peak, largest first.
            assert!(
                s.sites
                    .windows(2)
                    .all(|w| w[0].bytes_at_peak >= w[1].bytes_at_peak)
            );
        }
    }
}

/// The browser: `LEAKSCOPE_CHROMIUM`, else `chromium`, `chromium-browser` or
/// `google-chrome` on PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LEAKSCOPE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// The browser for test `test`, or `None` with a note that it is skipped. With
/// `LEAKSCOPE_REQUIRE_BROWSER` set (as `.ci/run` does) a missing browser fails instead.
fn browser_or_skip(test: &str) -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var_os("LEAKSCOPE_REQUIRE_BROWSER").is_none(),
            "LEAKSCOPE_REQUIRE_BROWSER is set but no Chromium was found"
        );
        eprintln!("{test}: skipped (no chromium; .ci/run installs it)");
    }
    found
}

/// Headless Chromium with the flags a closed network needs, a fresh profile, console
/// messages logged to stderr. Returns (stdout, stderr).
fn run_chromium(browser: &Path, page: &Path, extra: &[String]) -> (String, String) {
    run_chromium_at(browser, page, "", extra)
}

/// [`run_chromium`] on the page's URL with `fragment` (`#...`) appended.
fn run_chromium_at(
    browser: &Path,
    page: &Path,
    fragment: &str,
    extra: &[String],
) -> (String, String) {
    let profile = tempfile::tempdir().expect("a profile folder");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1400,3000",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}{fragment}", page.display()))
        .output()
        .expect("chromium starts");
    assert!(
        out.status.success(),
        "chromium failed on {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn attr_of<'a>(dom: &'a str, id: &str, attr: &str) -> Option<&'a str> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let tag_start = dom[..at].rfind('<')?;
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>')?];
    let key = format!("{attr}=\"");
    let v = tag.find(&key)? + key.len();
    Some(&tag[v..v + tag[v..].find('"')?])
}

#[test]
fn reports_open_in_headless_chromium_without_errors() {
    let Some(browser) = browser_or_skip("reports_open_in_headless_chromium_without_errors") else {
        return;
    };
    let shots = out_dir("report-screens");
    for (name, truth) in scenario_truths() {
        let (page, _) = write_report(&name);
        let (dom, log) = run_chromium(&browser, &page, &["--dump-dom".to_string()]);
        let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(
            console.is_empty(),
            "{name}: console messages:\n{}",
            console.join("\n")
        );
        assert_eq!(
            attr_of(&dom, "ls-status", "data-ready"),
            Some("1"),
            "{name}: {dom:.300}"
        );
        assert_eq!(
            attr_of(&dom, "ls-status", "data-errors"),
            Some("0"),
            "{name}: the page reported errors"
        );
        let has_suspects = !truth["leaks"].as_array().is_none_or(|l| l.is_empty());
        let charts: u32 = attr_of(&dom, "ls-status", "data-charts")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        assert!(
            charts >= if has_suspects { 3 } else { 2 },
            "{name}: {charts} charts drawn"
        );
        assert!(
            dom.contains("class=\"uplot"),
            "{name}: no uPlot chart in the DOM"
        );
        // Each device's timeline peak, computed by the page from the decimated series,
        // is the truth's peak; so is `top --at peak`.
        let top = leakscope_json(&[
            "top",
            "--at",
            "peak",
            fixture(&format!("scenarios/{name}.pickle"))
                .to_str()
                .unwrap(),
        ]);
        for (device, truth) in device_truths(&truth) {
            let want = truth["peak"]["live_requested_bytes"]
                .as_u64()
                .expect("peak");
            assert_eq!(
                attr_of(&dom, &format!("timeline-peak-{device}"), "data-bytes"),
                Some(want.to_string().as_str()),
                "{name} device {device}"
            );
            let t = device_of(&top, device, &name);
            assert_eq!(t["at"]["requested_bytes"].as_u64(), Some(want), "{name}");
            // Key numbers as the reader sees them.
            assert!(
                dom.contains(&leakscope::render::count(want)),
                "{name}: peak in the DOM"
            );
        }
        // The site column of the tables is never squeezed to a sliver: the page measures
        // its narrowest site cell.
        let narrowest: f64 = attr_of(&dom, "ls-status", "data-site-width")
            .and_then(|w| w.parse().ok())
            .unwrap_or(0.0);
        assert!(
            narrowest >= 120.0,
            "{name}: a site cell {narrowest} px wide"
        );
        let shot = shots.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&shot);
        run_chromium(
            &browser,
            &page,
            &[format!("--screenshot={}", shot.display())],
        );
        let png = std::fs::read(&shot).expect("the screenshot was written");
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 50_000,
            "{name}: screenshot of {} bytes",
            png.len()
        );
    }
}

/// Every real snapshot's report opens cleanly too (files without traces, OOM dumps,
/// torch_npu, several devices), and its timeline peak is `top --at peak`'s.
#[test]
fn corpus_reports_open_in_headless_chromium() {
    let Some(corpus) = corpus("corpus_reports_open_in_headless_chromium") else {
        return;
    };
    let Some(browser) = browser_or_skip("corpus_reports_open_in_headless_chromium") else {
        return;
    };
    let dir = out_dir("report-corpus");
    let mut files: Vec<PathBuf> = Vec::new();
    for sub in ["cuda", "torch_npu"] {
        if let Ok(rd) = std::fs::read_dir(corpus.join(sub)) {
            files.extend(rd.filter_map(|e| e.ok().map(|e| e.path())));
        }
    }
    files.sort();
    assert!(files.len() >= 18, "{} files", files.len());
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let page = dir.join(format!("{name}.html"));
        report_to(f, &page, &[]);
        let (dom, log) = run_chromium(&browser, &page, &["--dump-dom".to_string()]);
        let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(console.is_empty(), "{name}: {}", console.join("\n"));
        assert_eq!(
            attr_of(&dom, "ls-status", "data-ready"),
            Some("1"),
            "{name}"
        );
        assert_eq!(
            attr_of(&dom, "ls-status", "data-errors"),
            Some("0"),
            "{name}"
        );
        let data = embedded_data(&std::fs::read_to_string(&page).unwrap());
        for d in data["devices"].as_array().unwrap() {
            if d["timeline"]["events"]
                .as_array()
                .is_none_or(|e| e.is_empty())
            {
                continue;
            }
            let device = d["device"].to_string();
            let top = leakscope_json(&[
                "top",
                "--at",
                "peak",
                "--device",
                &device,
                f.to_str().unwrap(),
            ]);
            let at = &top["devices"][0]["at"];
            let peak = at["requested_bytes"].as_u64().unwrap();
            // The page's own maximum equals `top --at peak` unless the peak is the state
            // before the first event (then no event reaches it).
            if at["event_index"].is_u64() {
                assert_eq!(
                    attr_of(&dom, &format!("timeline-peak-{device}"), "data-bytes"),
                    Some(peak.to_string().as_str()),
                    "{name} device {device}"
                );
            }
        }
    }
}

/// Frame names come from the snapshot, which may come from anyone: in the page they are
/// text, never markup or script.
#[test]
fn hostile_frame_names_stay_text() {
    let evil_name =
        "</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">";
    let frames = serde_json::json!([
        {"filename": "evil.py", "line": 1, "name": evil_name},
        {"filename": "train.py", "line": 2, "name": "step"}
    ]);
    let mut trace = Vec::new();
    for i in 0..8u64 {
        // Eight windows, each leaving one 1 MiB block behind: a suspect named evil_name.
        trace.push(
            serde_json::json!({"action": "alloc", "addr": 0x100000 * (i + 1), "size": 1 << 20,
            "stream": 0, "time_us": i * 10, "frames": frames}),
        );
        trace.push(
            serde_json::json!({"action": "alloc", "addr": 0x9000000 + i, "size": 512,
            "stream": 0, "time_us": i * 10 + 1, "frames": frames}),
        );
        trace.push(
            serde_json::json!({"action": "free_completed", "addr": 0x9000000 + i, "size": 512,
            "stream": 0, "time_us": i * 10 + 2, "frames": frames}),
        );
    }
    let snap = serde_json::json!({"segments": [], "device_traces": [trace]});
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("evil.json");
    std::fs::write(&input, serde_json::to_vec(&snap).unwrap()).unwrap();
    let page = dir.path().join("evil.html");
    report_to(&input, &page, &["--windows", "every:3"]);
    let html = std::fs::read_to_string(&page).unwrap();
    // The data element holds the name as JSON text (inert there: only `</script` could end
    // the element, and that is written `<\/script`); everywhere else it must be escaped.
    let open = "<script type=\"application/json\" id=\"ls-data\">";
    let start = html.find(open).unwrap() + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    assert!(
        !html[start..end].contains("</script"),
        "the data element ends early"
    );
    let outside = format!("{}{}", &html[..start], &html[end..]);
    assert!(
        !outside.contains("<script>window.__pwned"),
        "unescaped script"
    );
    assert!(!outside.contains("<img src=x"), "unescaped markup");
    // It is there, as text.
    assert!(
        html.contains("&lt;img src=x onerror="),
        "the name is shown escaped"
    );
    let data = embedded_data(&html);
    assert!(
        data.to_string().contains("window.__pwned=1"),
        "and kept in the data"
    );
    if let Some(browser) = browser_or_skip("hostile_frame_names_stay_text (browser part)") {
        let (dom, log) = run_chromium(&browser, &page, &["--dump-dom".to_string()]);
        assert!(!log.contains(":CONSOLE"), "{log}");
        assert_eq!(attr_of(&dom, "ls-status", "data-errors"), Some("0"));
        assert!(
            !dom.contains("<img src=\"x\""),
            "an img element was created"
        );
    }
}

/// A frame named `<!--<script>` opens a comment and a script inside the page's inline data:
/// written as it is, the HTML parser reads past the data element's end (the rest of the
/// page becomes that element's text) and no chart is drawn. The page escapes `<`, `>` and
/// `&` there, so it draws every chart.
#[test]
fn a_frame_named_like_a_comment_and_a_script_leaves_the_charts_drawn() {
    let name = "<!--<script>";
    let frames = serde_json::json!([
        {"filename": "model.py", "line": 1, "name": name},
        {"filename": "train.py", "line": 2, "name": "step"}
    ]);
    let mut trace = Vec::new();
    for i in 0..8u64 {
        // Eight windows of three events (`every:3`), each leaving 1 MiB behind: a suspect.
        for (action, addr, size, t) in [
            ("alloc", 0x100000 * (i + 1), 1 << 20, 0),
            ("alloc", 0x9000000 + i * 512, 512, 1),
            ("free_completed", 0x9000000 + i * 512, 512, 2),
        ] {
            trace.push(
                serde_json::json!({"action": action, "addr": addr, "size": size,
                "stream": 0, "time_us": i * 10 + t, "frames": frames}),
            );
        }
    }
    let snap = serde_json::json!({"segments": [], "device_traces": [trace]});
    let dir = out_dir("report-tests");
    let input = dir.join("comment_script_name.json");
    std::fs::write(&input, serde_json::to_vec(&snap).unwrap()).unwrap();
    let page = dir.join("comment_script_name.html");
    report_to(&input, &page, &["--windows", "every:3"]);
    let html = std::fs::read_to_string(&page).unwrap();
    let data = embedded_data(&html);
    assert!(
        data.to_string().contains(name),
        "the name is kept in the data"
    );
    assert_eq!(
        data["devices"][0]["leaks"]["suspects"][0]["site"]["name"],
        name
    );
    let Some(browser) =
        browser_or_skip("a_frame_named_like_a_comment_and_a_script_leaves_the_charts_drawn")
    else {
        return;
    };
    let (dom, log) = run_chromium(&browser, &page, &["--dump-dom".to_string()]);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(
        console.is_empty(),
        "console messages:\n{}",
        console.join("\n")
    );
    assert_eq!(
        attr_of(&dom, "ls-status", "data-ready"),
        Some("1"),
        "{dom:.300}"
    );
    assert_eq!(attr_of(&dom, "ls-status", "data-errors"), Some("0"));
    // The timeline, the sites over time and the suspect's growth.
    let charts: u32 = attr_of(&dom, "ls-status", "data-charts")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    assert!(charts >= 3, "{charts} charts drawn");
    assert!(dom.contains("class=\"uplot"), "no uPlot chart in the DOM");
}

/// The allocation timeline in Chromium: with `#ls-selftest` the page hovers and clicks its
/// largest band through DOM events, checks the tooltip names its site and the pinned stack
/// its frames, filters the bands by that frame and opens the segment map, and says "ok" per
/// device; the page is drawn in under 5 s and carries `leakscope.timeline/1`.
#[test]
fn allocation_timeline_hover_click_search_and_state_in_chromium() {
    let Some(browser) =
        browser_or_skip("allocation_timeline_hover_click_search_and_state_in_chromium")
    else {
        return;
    };
    let shots = out_dir("report-screens");
    for name in [
        "plain_loop_kept_logits",
        "two_devices_recv_leak",
        "fragmentation_oom",
    ] {
        let (page, html) = write_report(name);
        assert!(
            html.contains("leakscope.timeline/1"),
            "{name}: schema in the page"
        );
        let data = embedded_data(&html);
        let (dom, log) =
            run_chromium_at(&browser, &page, "#ls-selftest", &["--dump-dom".to_string()]);
        let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(console.is_empty(), "{name}: {}", console.join("\n"));
        assert_eq!(
            attr_of(&dom, "ls-status", "data-errors"),
            Some("0"),
            "{name}"
        );
        let ready: f64 = attr_of(&dom, "ls-status", "data-ready-ms")
            .and_then(|v| v.parse().ok())
            .expect("ready time");
        assert!(ready < 5000.0, "{name}: drawn after {ready} ms");
        for d in data["devices"].as_array().unwrap() {
            let n = d["device"].as_i64().unwrap();
            let id = format!("allocations-{n}");
            assert_eq!(
                attr_of(&dom, &id, "data-selftest"),
                Some("ok"),
                "{name} device {n}"
            );
            let drawn: usize = attr_of(&dom, &id, "data-drawn").unwrap().parse().unwrap();
            assert_eq!(
                drawn,
                d["allocations"]["allocations"].as_array().unwrap().len()
            );
            assert!(drawn <= leakscope::analysis::allocations::DEFAULT_MAX_ALLOCATIONS);
        }
        let shot = shots.join(format!("{name}-allocations.png"));
        let _ = std::fs::remove_file(&shot);
        run_chromium_at(
            &browser,
            &page,
            "#ls-selftest",
            &[format!("--screenshot={}", shot.display())],
        );
        let png = std::fs::read(&shot).expect("the screenshot was written");
        assert!(png.starts_with(b"\x89PNG"), "{name}: a PNG");
    }
}
