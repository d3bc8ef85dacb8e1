//! Names are data, never markup or control: frame names, file names and annotation
//! names with ESC, CR, NUL and other controls reach the terminal escaped (`\x1b`), the
//! report's inline data holds no `<!--` or `<script` (so the page's script elements end
//! where they should), and JSON keeps every name exactly.

use serde_json::{Value, json};

use crate::common::{have_python, load, run_cli};

/// A name that would clear the screen, recolour the terminal, return to the start of the
/// line and end a C string.
const CONTROL_NAME: &str = "evil\u{1b}[2J\u{1b}[31m\rforged\0tail\u{7f}\u{9b}";
/// What the terminal shows of it: each control as an escape, the rest as is.
const CONTROL_SHOWN: &str = "evil\\x1b[2J\\x1b[31m\\rforged\\x00tail\\x7f\\x9b";
/// A name that opens an HTML comment and a script inside the page's inline data.
const MARKUP_NAME: &str = "<!--<script>";

/// Eight windows (annotated, the annotation's name with an ESC too), each leaving one
/// 1 MiB block behind from the frame named [`CONTROL_NAME`] (in a file whose name holds
/// a CR) under a caller named [`MARKUP_NAME`]: a leak suspect in every window, and
/// everything held at the end.
fn hostile() -> Value {
    let frames = json!([
        {"filename": "/app/bad\rfile.py", "line": 1, "name": CONTROL_NAME},
        {"filename": "/app/<b>.py", "line": 2, "name": MARKUP_NAME},
        {"filename": "/app/train.py", "line": 3, "name": "step"}
    ]);
    let mut trace = Vec::new();
    let mut annotations = Vec::new();
    for i in 0..8u64 {
        let t = i * 10;
        trace.push(
            json!({"action": "alloc", "addr": 0x100000 * (i + 1), "size": 1 << 20,
            "stream": 0, "time_us": t, "frames": frames}),
        );
        trace.push(
            json!({"action": "alloc", "addr": 0x9000000 + i * 512, "size": 512,
            "stream": 0, "time_us": t + 1, "frames": frames}),
        );
        trace.push(
            json!({"action": "free_completed", "addr": 0x9000000 + i * 512,
            "size": 512, "stream": 0, "time_us": t + 2, "frames": frames}),
        );
        for (stage, at) in [("START", t), ("END", t + 5)] {
            annotations.push(
                json!({"stage": stage, "name": "micro\u{1b}batch", "device": 0,
                "time_us": at}),
            );
        }
    }
    json!({"segments": [], "device_traces": [trace], "external_annotations": annotations})
}

fn write(doc: &Value) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("names.json");
    std::fs::write(&path, serde_json::to_vec(doc).unwrap()).unwrap();
    (dir, path)
}

/// Raw control bytes in `s`, by name, if any (newline is the text's own line break).
fn raw_controls(s: &str) -> Vec<String> {
    s.chars()
        .filter(|&c| c.is_control() && c != '\n')
        .map(|c| format!("U+{:04X}", c as u32))
        .collect()
}

#[test]
fn top_shows_control_characters_escaped() {
    let (_dir, path) = write(&hostile());
    let p = path.to_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(["top", p])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    for byte in [0x1b, b'\r', 0] {
        assert!(
            !out.stdout.contains(&byte),
            "raw byte {byte:#04x} on the terminal"
        );
        assert!(
            !out.stderr.contains(&byte),
            "raw byte {byte:#04x} on stderr"
        );
    }
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\\x1b"), "{text}");
    // The site label is `file:line:function`, each part escaped.
    assert!(
        text.contains(&format!("/app/bad\\rfile.py:1:{CONTROL_SHOWN}")),
        "{text}"
    );
}

#[test]
fn every_text_report_escapes_names() {
    let (_dir, path) = write(&hostile());
    let p = path.to_str().unwrap();
    let commands: [&[&str]; 11] = [
        &["top"],
        &["top", "--by", "function"],
        &["tree"],
        &["leaks"],
        &["leaks", "--windows", "every:3"],
        &["oom"],
        &["segments"],
        &["summary"],
        &["windows"],
        &["flamegraph", "--folded"],
        &["compare", p],
    ];
    for args in commands {
        let mut all: Vec<&str> = args.to_vec();
        all.push(p);
        let (code, out, err) = run_cli(&all);
        assert_eq!(code, 0, "{all:?}: {err}");
        assert_eq!(raw_controls(&out), Vec::<String>::new(), "{all:?}: {out}");
        assert_eq!(raw_controls(&err), Vec::<String>::new(), "{all:?}: {err}");
    }
    // The names the reports show are there, escaped: the leak's site and the windows'
    // annotation name.
    let (_, leaks, _) = run_cli(&["leaks", p]);
    assert!(leaks.contains(CONTROL_SHOWN), "{leaks}");
    let (_, windows, _) = run_cli(&["windows", p]);
    assert!(windows.contains("micro\\x1bbatch"), "{windows}");
    let (_, summary, _) = run_cli(&["summary", p]);
    assert!(summary.contains("micro\\x1bbatch x8"), "{summary}");
}

#[test]
fn json_keeps_names_exactly() {
    let (_dir, path) = write(&hostile());
    let (code, out, err) = run_cli(&["top", "--json", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = j["devices"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["site"]["name"].as_str())
        .collect();
    assert!(names.contains(&CONTROL_NAME), "{names:?}");
}

/// The text of the page's inline data element.
fn inline_data(html: &str) -> &str {
    let open = "<script type=\"application/json\" id=\"ls-data\">";
    let start = html.find(open).expect("the page embeds its data") + open.len();
    let end = start + html[start..].find("</script>").expect("the element ends");
    &html[start..end]
}

#[test]
fn the_reports_inline_data_holds_no_markup() {
    let (dir, path) = write(&hostile());
    let page = dir.path().join("names.html");
    let (code, _, err) = run_cli(&[
        "report",
        "--windows",
        "every:3",
        path.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    let data = inline_data(&html);
    for bad in ["<!--", "<script", "</script", "<", ">", "&"] {
        assert!(!data.contains(bad), "{bad:?} in the inline data");
    }
    // It is the same data: the names come back exactly.
    let v: Value = serde_json::from_str(data).expect("the inline data is JSON");
    let text = v.to_string();
    assert!(text.contains(MARKUP_NAME));
    assert!(text.contains(&serde_json::to_string(CONTROL_NAME).unwrap()));
    // The page has as many script elements as it opens: five (the error trap, the data,
    // uPlot, the allocation timeline, the page's script), each ended.
    assert_eq!(html.matches("<script").count(), 5, "script elements");
    assert_eq!(html.matches("</script>").count(), 5, "script ends");
    // Outside the data the names are text, their controls visible escapes.
    assert!(html.contains(CONTROL_SHOWN));
    assert_eq!(
        raw_controls(&html.replace(['\t', '\r'], "")),
        Vec::<String>::new()
    );
}

#[test]
fn the_flamegraph_svg_is_valid_xml() {
    let (dir, path) = write(&hostile());
    let svg = dir.path().join("names.svg");
    let (code, _, err) = run_cli(&[
        "flamegraph",
        path.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    // XML 1.0 allows no C0 control other than tab, newline and CR in a document.
    let forbidden: Vec<String> = text
        .chars()
        .filter(|&c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        .map(|c| format!("U+{:04X}", c as u32))
        .collect();
    assert_eq!(forbidden, Vec::<String>::new());
    assert!(
        !text.contains("<!--<script>"),
        "the name is markup in the SVG"
    );
    assert!(text.contains("&lt;!--&lt;script&gt;"));
}

/// A file name holding a lone surrogate (a path decoded with `surrogateescape`), as
/// CPython's pickle (protocols 0 to 4: `surrogatepass` and raw-unicode-escape) and json
/// (`\udcff` escapes) write it, loads with the surrogate read as U+FFFD and every event
/// kept.
#[test]
fn lone_surrogates_load_as_replacement_characters() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import json, pickle, sys
frame = {"filename": "train_\udcff.py", "name": "step\ud800", "line": 7}
ev = lambda a, addr: {"action": a, "addr": addr, "size": 512, "stream": 0, "frames": [frame]}
snap = {"segments": [], "device_traces": [[ev("alloc", 1), ev("alloc", 2), ev("free_requested", 1)]]}
d = sys.argv[1]
for p in range(5):
    open(f"{d}/p{p}.pickle", "wb").write(pickle.dumps(snap, protocol=p))
open(f"{d}/s.json", "w").write(json.dumps(snap))
"#;
    let ok = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(dir.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "python wrote the files");
    let mut names: Vec<String> = (0..5).map(|p| format!("p{p}.pickle")).collect();
    names.push("s.json".into());
    for name in names {
        let snap = load(&dir.path().join(&name));
        let traces = snap.device_traces.as_ref().expect("traces");
        assert_eq!(traces[0].len(), 3, "{name}: every event kept");
        let f = snap.frames.get(leakscope::model::FrameId(0));
        assert_eq!(snap.strings.get(f.filename), "train_\u{FFFD}.py", "{name}");
        assert_eq!(snap.strings.get(f.name), "step\u{FFFD}", "{name}");
    }
}
