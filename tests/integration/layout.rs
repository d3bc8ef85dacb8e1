//! The layout docs/design.md promises, checked on the sources: no two files of `src/`
//! depend on each other (directly or round a longer loop), each stage imports only down
//! the data's path, and the binary's functions fit on a screen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use regex::Regex;

use crate::common::root;

/// Every `.rs` file under `src/`, by module path (`["session", "run"]`; `mod.rs`, `lib.rs`
/// and `main.rs` stand for their folder), with its code: comments and inline test
/// modules removed (a test module's `super::` is the file itself).
fn sources() -> BTreeMap<Vec<String>, String> {
    let src = root().join("src");
    let mut out = BTreeMap::new();
    let mut stack = vec![src.clone()];
    let comment = Regex::new(r"//[^\n]*").unwrap();
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.insert(module_of(&src, &p), code_of(&p, &comment));
            }
        }
    }
    out
}

fn module_of(src: &Path, p: &Path) -> Vec<String> {
    let rel = p.strip_prefix(src).unwrap().with_extension("");
    let mut m: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

fn code_of(p: &Path, comment: &Regex) -> String {
    let text = std::fs::read_to_string(p).unwrap();
    let text = comment.replace_all(&text, "").into_owned();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(k) => text[..k].to_string(),
        None => text,
    }
}

/// The files a file refers to: `crate::`, `super::` and `self::` paths (inside `use`
/// groups too), and calls into its own child modules by name outside `use` lines (a parent
/// that only re-exports its children does not depend on them).
fn references(
    module: &[String],
    code: &str,
    files: &BTreeMap<Vec<String>, String>,
) -> BTreeSet<Vec<String>> {
    let path = Regex::new(r"\b(crate|super|self)((?:::[A-Za-z_]\w*)+)").unwrap();
    let group = Regex::new(r"\b(crate|super|self)((?:::\w+)*)::\{([^;]*?)\}").unwrap();
    let child = Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").unwrap();
    let is_use = Regex::new(r"^\s*(pub(\([^)]*\))?\s+)?use\s").unwrap();
    let mut paths: Vec<(String, Vec<String>)> = Vec::new();
    let split = |s: &str| -> Vec<String> {
        s.split("::")
            .filter(|x| !x.is_empty() && *x != "self" && *x != "*")
            .map(str::to_string)
            .collect()
    };
    for c in group.captures_iter(code) {
        for item in c[3].split(|ch: char| ch == ',' || ch.is_whitespace()) {
            let mut p = split(&c[2]);
            p.extend(split(item.trim_matches(|ch| ch == '{' || ch == '}')));
            paths.push((c[1].to_string(), p));
        }
    }
    for c in path.captures_iter(code) {
        paths.push((c[1].to_string(), split(&c[2])));
    }
    let children: Vec<String> = child
        .captures_iter(code)
        .map(|c| c[1].to_string())
        .collect();
    for line in code.lines().filter(|l| !is_use.is_match(l)) {
        for c in &children {
            let call = Regex::new(&format!(r"(^|[^\w:]){c}::")).unwrap();
            if call.is_match(line) {
                paths.push(("self".into(), vec![c.clone()]));
            }
        }
    }
    let mut out = BTreeSet::new();
    for (kind, p) in paths {
        let mut full: Vec<String> = match kind.as_str() {
            "crate" => Vec::new(),
            // `super` of a folder's mod.rs is the folder's parent.
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            _ => module.to_vec(),
        };
        full.extend(p);
        // The longest prefix that is a file.
        while !full.is_empty() && !files.contains_key(&full) {
            full.pop();
        }
        if full != module && !full.is_empty() {
            out.insert(full);
        }
    }
    out
}

#[test]
fn no_two_source_files_depend_on_each_other() {
    let files = sources();
    assert!(files.len() > 50, "{} files", files.len());
    let edges: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> = files
        .iter()
        .map(|(m, code)| (m, references(m, code, &files)))
        .collect();
    // A cycle is an edge a -> b with a path back from b to a.
    let reaches = |from: &Vec<String>, to: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            if &n == to {
                return true;
            }
            if seen.insert(n.clone()) {
                todo.extend(edges.get(&n).into_iter().flatten().cloned());
            }
        }
        false
    };
    let mut cycles = Vec::new();
    for (a, bs) in &edges {
        for b in bs {
            if reaches(b, a) {
                cycles.push(format!("{} -> {}", a.join("/"), b.join("/")));
            }
        }
    }
    assert!(cycles.is_empty(), "files in import cycles: {cycles:#?}");
}

/// The check above finds the cycles it is meant to: the two of the code before the
/// session layer (the loader's memo and machine, a trace and its scan) in miniature.
#[test]
fn the_cycle_check_sees_a_cycle() {
    let mut files = BTreeMap::new();
    let m = |s: &str| s.split('/').map(str::to_string).collect::<Vec<_>>();
    files.insert(m("load/memo"), "use super::pickle::Value;".to_string());
    files.insert(m("load/pickle"), "pub memo: super::memo::Memo,".to_string());
    files.insert(
        m("load"),
        "mod memo;\nmod pickle;\npub use pickle::X;".to_string(),
    );
    assert!(
        references(&m("load/memo"), &files[&m("load/memo")], &files).contains(&m("load/pickle"))
    );
    assert!(
        references(&m("load/pickle"), &files[&m("load/pickle")], &files).contains(&m("load/memo"))
    );
    assert!(
        references(&m("load"), &files[&m("load")], &files).is_empty(),
        "re-exports"
    );
}

/// Imports that go down the data's path the wrong way: `(from, to)` top-level modules a
/// file of `from` may never reference. The session returns reports and never reaches the
/// output stages; render reads the reports' data (`report`) and never the session that
/// builds them; the reports are data below both, knowing no session and no output;
/// analyses know no budgets and no sessions; the binary goes through the session layer,
/// never the loader or the replay (`src/main.rs` only calls `cli`).
const FORBIDDEN: [(&str, &str); 13] = [
    ("analysis", "render"),
    ("analysis", "session"),
    ("analysis", "budget"),
    ("analysis", "export"),
    ("session", "render"),
    ("session", "export"),
    ("render", "export"),
    ("render", "session"),
    ("report", "session"),
    ("report", "render"),
    ("report", "export"),
    ("cli", "load"),
    ("cli", "replay"),
];

/// The files of `files` whose references break [`FORBIDDEN`], as `from -> to` lines.
fn wrong_way(files: &BTreeMap<Vec<String>, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (m, code) in files {
        let top = m.first().map_or("", String::as_str);
        for r in references(m, code, files) {
            let to = r.first().map_or("", String::as_str);
            if FORBIDDEN.contains(&(top, to)) {
                out.push(format!("{} -> {}", m.join("/"), r.join("/")));
            }
        }
    }
    out
}

#[test]
fn stages_import_only_down_the_datas_path() {
    let bad = wrong_way(&sources());
    assert!(bad.is_empty(), "imports against the stages: {bad:#?}");
}

/// The check above sees each kind of wrong import it forbids, in miniature (and lets the
/// right ones through: the session and render both reading `report`).
#[test]
fn the_stage_check_sees_wrong_imports() {
    let m = |s: &str| s.split('/').map(str::to_string).collect::<Vec<_>>();
    let mut files = BTreeMap::new();
    files.insert(m("render/top"), "pub struct X;".to_string());
    files.insert(m("session/x"), "use crate::render::top::X;".to_string());
    files.insert(m("report/top"), "pub struct TopReport;".to_string());
    files.insert(
        m("session/y"),
        "use crate::report::top::TopReport;".to_string(),
    );
    files.insert(
        m("render/text"),
        "use crate::report::top::TopReport;\nuse crate::session::y::build;".to_string(),
    );
    files.insert(
        m("report/check"),
        "pub fn f(s: &crate::session::x::Session, x: crate::render::top::X) {}".to_string(),
    );
    files.insert(m("budget/gate"), "pub struct Measured;".to_string());
    files.insert(
        m("analysis/y"),
        "use crate::budget::gate::Measured;".to_string(),
    );
    files.insert(m("load/cache"), "pub fn encode() {}".to_string());
    files.insert(
        m("cli/commands"),
        "fn f() { crate::load::cache::encode(); }".to_string(),
    );
    let bad = wrong_way(&files);
    assert_eq!(
        bad,
        [
            "analysis/y -> budget/gate",
            "cli/commands -> load/cache",
            "render/text -> session/y",
            "report/check -> render/top",
            "report/check -> session/x",
            "session/x -> render/top"
        ]
    );
}

#[test]
fn the_binarys_functions_fit_on_a_screen() {
    let src = root().join("src");
    let fn_start = Regex::new(r"^\s*(pub(\([^)]*\))?\s+)?fn\s+(\w+)").unwrap();
    let mut files = vec![src.join("main.rs")];
    files.extend(
        std::fs::read_dir(src.join("cli"))
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let Some(c) = fn_start.captures(l) else {
                continue;
            };
            // The function ends at the first line back at its own indentation with `}`.
            let indent = l.len() - l.trim_start().len();
            let end = lines[i..]
                .iter()
                .position(|x| x.len() - x.trim_start().len() == indent && x.trim() == "}")
                .unwrap_or(0);
            assert!(
                end < 60,
                "{}: fn {} is {} lines",
                f.display(),
                &c[3],
                end + 1
            );
        }
    }
}
