//! The call tree (`tree`) and flame graphs (`flamegraph`) against the scenario ground
//! truth: every number checked here comes from the truth files, never from leakscope.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use leakscope::analysis::At;
use leakscope::analysis::tree::{CallTree, DeviceTree, NodeKind};
use leakscope::attribute::{FrameFilters, GroupBy, NO_FRAME, UNTRACED};
use leakscope::render::flamegraph;
use regex::Regex;

use crate::common::*;

const SCENARIOS: &[&str] = &["pp_last_stage_recv_pinned", "fragmentation_oom"];

fn leakscope(args: &[&str]) -> Output {
    leakscope_in(&root(), args)
}

fn leakscope_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs")
}

fn scenario(stem: &str) -> String {
    fixture(&format!("scenarios/{stem}.pickle"))
        .to_str()
        .unwrap()
        .to_string()
}

/// `{site: (bytes, blocks)}`.
type Sites = BTreeMap<String, (u64, u64)>;

/// The points of a truth file: `(name, At, live bytes, sites)`.
fn truth_points(stem: &str) -> Vec<(&'static str, At, u64, Sites)> {
    let truth = read_json(&fixture(&format!("scenarios/{stem}.truth.json")));
    let mut out = Vec::new();
    for (name, at) in [("end", At::End), ("peak", At::Peak), ("oom", At::Oom)] {
        let t = &truth[name];
        if t.is_null() {
            continue;
        }
        let live = t
            .get("live_requested_bytes")
            .or_else(|| t.get("requested_bytes_live"))
            .and_then(|v| v.as_u64())
            .unwrap_or_else(|| panic!("{stem} {name}: no live bytes in the truth"));
        let sites = t["by_site"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    (v["bytes"].as_u64().unwrap(), v["blocks"].as_u64().unwrap()),
                )
            })
            .collect();
        out.push((name, at, live, sites));
    }
    out
}

fn report(stem: &str, at: At, filters: &FrameFilters) -> DeviceTree {
    let s = session(&fixture(&format!("scenarios/{stem}.pickle")));
    let opts = device_options(0, GroupBy::Site, filters.clone());
    let mut r = s.tree(&opts, at).expect("point resolves");
    r.devices.remove(0)
}

/// `basename:line:function`, written here independently of leakscope.
fn short(site: &str) -> String {
    if site == NO_FRAME || site == UNTRACED {
        return site.to_string();
    }
    // site = filename:line:function; the filename has no ':' in these fixtures.
    let (file, rest) = site.split_once(':').unwrap();
    format!("{}:{rest}", file.rsplit('/').next().unwrap())
}

fn check_sums(t: &CallTree, what: &str) {
    for n in t.graph().node_indices() {
        let node = t.node(n);
        let kids = t.children(n);
        let (b, k): (u64, u64) = kids.iter().fold((0, 0), |a, &c| {
            (a.0 + t.node(c).bytes, a.1 + t.node(c).blocks)
        });
        assert_eq!(
            node.bytes,
            node.self_bytes + b,
            "{what}: {}: inclusive = self + children",
            node.name
        );
        assert_eq!(
            node.blocks,
            node.self_blocks + k,
            "{what}: {}: blocks",
            node.name
        );
        if kids.is_empty() && n != t.root() {
            assert!(
                node.self_blocks > 0,
                "{what}: leaf {} holds nothing",
                node.name
            );
        }
        // Children come largest first.
        for w in kids.windows(2) {
            assert!(t.node(w[0]).bytes >= t.node(w[1]).bytes, "{what}: order");
        }
    }
}

/// (a) The root holds the live bytes of the truth (and of `top --json`), the self bytes
/// add up to them, every node is its self plus its children, and the self bytes of the
/// nodes of each site are the truth's bytes for that site.
#[test]
fn tree_adds_up_to_the_truth() {
    let mut checked = 0;
    for stem in SCENARIOS {
        for (name, at, live, sites) in truth_points(stem) {
            let what = format!("{stem} at {name}");
            let r = report(stem, at, &FrameFilters::default());
            let t = &r.tree;
            let root = t.node(t.root());
            assert_eq!(root.name, "all");
            assert_eq!(root.bytes, live, "{what}: root bytes");
            assert_eq!(r.total_bytes, live, "{what}: total");
            assert_eq!(r.at.requested_bytes, live, "{what}: point");
            assert_eq!(root.self_bytes, 0, "{what}: root self");
            let blocks: u64 = sites.values().map(|s| s.1).sum();
            assert_eq!(root.blocks, blocks, "{what}: root blocks");
            let self_sum: u64 = t.graph().node_weights().map(|n| n.self_bytes).sum();
            assert_eq!(self_sum, live, "{what}: Σ self");
            check_sums(t, &what);
            // All frames of these scenarios are Python frames, so a node's self bytes
            // belong to the site its frame is.
            let mut by_site: Sites = BTreeMap::new();
            for n in t.graph().node_weights() {
                if n.self_blocks > 0 {
                    let e = by_site.entry(n.name.clone()).or_default();
                    e.0 += n.self_bytes;
                    e.1 += n.self_blocks;
                }
            }
            assert_eq!(by_site, sites, "{what}: self bytes by site");
            // The no-frame allocations hang off the root, nowhere else.
            for n in t.graph().node_indices() {
                if matches!(t.node(n).kind, NodeKind::NoFrame) {
                    assert_eq!(t.node(n).parent, Some(t.root()), "{what}");
                    assert_eq!(t.node(n).bytes, sites[NO_FRAME].0, "{what}: no frame");
                }
            }

            let out = leakscope(&["top", "--json", "--at", name, &scenario(stem)]);
            assert!(out.status.success(), "{what}: top");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(
                v["devices"][0]["at"]["requested_bytes"].as_u64(),
                Some(root.bytes),
                "{what}: top"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 5, "points checked");
}

/// `--focus` keeps only the allocations with a matching frame.
#[test]
fn tree_focus() {
    // At the peak of the pipeline scenario Adam's state is 8 blocks, 301,989,888 bytes
    // (truth), all allocated in adam.py:178:_init_group, which allocates directly.
    let mut filters = FrameFilters::default();
    filters.focus = Some(Regex::new(r"adam\.py:178:_init_group$").unwrap());
    let r = report("pp_last_stage_recv_pinned", At::Peak, &filters);
    assert_eq!(r.total_bytes, 301_989_888);
    assert_eq!(r.total_blocks, 8);
    assert_eq!(r.at.requested_bytes, 2_797_887_488);
    check_sums(&r.tree, "focus");
    let leaves: Vec<_> = r
        .tree
        .graph()
        .node_weights()
        .filter(|n| n.self_blocks > 0)
        .collect();
    assert_eq!(leaves.len(), 1);
    assert!(
        leaves[0]
            .name
            .ends_with("torch/optim/adam.py:178:_init_group")
    );
    let f = leaves[0].frame().unwrap();
    assert_eq!(
        (f.line.known(), f.function.as_str()),
        (Some(178), "_init_group")
    );

    let lines = flamegraph::folded(&r.tree);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].1, 301_989_888);
    assert!(
        lines[0].0.ends_with(";adam.py:178:_init_group"),
        "{}",
        lines[0].0
    );
}

/// (b) The folded counts add up to the live bytes, and for each site of the truth the
/// lines ending in it add up to its bytes.
#[test]
fn folded_stacks_match_the_truth() {
    for stem in SCENARIOS {
        for (name, at, live, sites) in truth_points(stem) {
            let what = format!("{stem} at {name}");
            let r = report(stem, at, &FrameFilters::default());
            let lines = flamegraph::folded(&r.tree);
            assert_eq!(lines.iter().map(|l| l.1).sum::<u64>(), live, "{what}: Σ");
            let mut expected: BTreeMap<String, u64> = BTreeMap::new();
            for (site, (bytes, _)) in &sites {
                if *bytes > 0 {
                    *expected.entry(short(site)).or_default() += bytes;
                }
            }
            let mut found: BTreeMap<String, u64> = BTreeMap::new();
            let mut distinct = std::collections::BTreeSet::new();
            for (stack, n) in &lines {
                assert!(distinct.insert(stack), "{what}: {stack} twice");
                assert!(!stack.contains(char::is_control), "{what}");
                let inner = stack.rsplit(';').next().unwrap();
                if inner == NO_FRAME {
                    assert_eq!(stack, NO_FRAME, "{what}: no-frame stacks are alone");
                }
                *found.entry(inner.to_string()).or_default() += n;
            }
            assert_eq!(found, expected, "{what}: bytes by innermost frame");
            // The text form: one `stack count` line each.
            let text = flamegraph::folded_text(&lines);
            assert_eq!(text.lines().count(), lines.len());
            let sum: u64 = text
                .lines()
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum();
            assert_eq!(sum, live, "{what}: text");
        }
    }
}

/// `1,234,567`, as inferno writes counts.
fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// (c) The SVG is well-formed XML with the title and the total.
#[test]
fn svg_is_xml_with_the_total() {
    for stem in SCENARIOS {
        for (name, at, live, _) in truth_points(stem) {
            let what = format!("{stem} at {name}");
            let r = report(stem, at, &FrameFilters::default());
            let lines = flamegraph::folded(&r.tree);
            let title = format!("live memory at {name}");
            let svg = flamegraph::svg(&lines, &title, Some("subtitle here")).unwrap();
            let text = String::from_utf8(svg).unwrap();
            let doc = roxmltree::Document::parse_with_options(
                &text,
                roxmltree::ParsingOptions {
                    allow_dtd: true,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{what}: not XML: {e}"));
            assert_eq!(doc.root_element().tag_name().name(), "svg", "{what}");
            let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
            assert!(texts.iter().any(|t| t.contains(&title)), "{what}: title");
            let total = format!("all ({} bytes, 100%)", commas(live));
            assert!(
                texts.iter().any(|t| t.contains(&total)),
                "{what}: no `{total}` in the SVG"
            );
            assert!(!text.contains("<script src") && !text.contains("xlink:href=\"http"));
        }
    }
}

/// Frame names with `;`, spaces and digits do not break the folded format, and stacks
/// far deeper than any recursion would survive are fine in every output.
#[test]
fn odd_names_and_deep_stacks() {
    const DEPTH: usize = 3000;
    let dir = tempfile::tempdir().unwrap();
    let frames: Vec<serde_json::Value> = (0..DEPTH)
        .map(|i| serde_json::json!({"filename": format!("/app/m{}.py", i % 5), "line": i + 1, "name": format!("f{i}")}))
        .collect();
    let odd = vec![
        serde_json::json!({"filename": "/app/odd.py", "line": 7, "name": "a;b 12"}),
        serde_json::json!({"filename": "/app/main.py", "line": 1, "name": "<module>"}),
    ];
    let snap = serde_json::json!({
        "segments": [],
        "device_traces": [[
            {"action": "alloc", "addr": 1048576, "size": 512, "stream": 0, "frames": frames},
            {"action": "alloc", "addr": 1049088, "size": 1024, "stream": 0, "frames": odd},
            {"action": "alloc", "addr": 1050112, "size": 2048, "stream": 0, "frames": []},
        ]]
    });
    let path = dir.path().join("deep.json");
    std::fs::write(&path, snap.to_string()).unwrap();
    let p = path.to_str().unwrap();

    let out = leakscope(&["flamegraph", "--folded", p]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: BTreeMap<&str, u64> = text
        .lines()
        .map(|l| {
            let (s, n) = l.rsplit_once(' ').unwrap();
            (s, n.parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines["main.py:1:<module>;odd.py:7:a:b 12"], 1024);
    assert_eq!(lines[NO_FRAME], 2048);
    let (deep, n) = lines.iter().find(|l| l.0.starts_with("m4.py")).unwrap();
    assert_eq!(*n, 512);
    assert_eq!(deep.split(';').count(), DEPTH);
    assert!(deep.ends_with(";m0.py:1:f0"));

    let out = leakscope(&["tree", "--min-share", "0", p]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("[{DEPTH}] /app/m0.py:1:f0")),
        "depth mark"
    );
    let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(widest < 400, "lines stay narrow: {widest}");

    let out = leakscope(&["tree", "--json", p]);
    assert!(out.status.success());
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(json.starts_with("{\"schema\":\"leakscope.tree/4\""));
    assert_eq!(json.matches("\"children\":[]").count(), 3, "three leaves");
    assert!(json.contains("\"total_bytes\":3584"));

    let svg = dir.path().join("deep.svg");
    let out = leakscope(&["flamegraph", p, "-o", svg.to_str().unwrap()]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(&svg).unwrap();
    roxmltree::Document::parse_with_options(
        &text,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .expect("deep SVG parses");
    assert!(text.contains("all (3,584 bytes, 100%)"));
}

/// (d) The commands: exit codes, files, messages.
#[test]
fn cli_tree_and_flamegraph() {
    let pp = scenario("pp_last_stage_recv_pinned");
    // Truth: 2,797,887,488 bytes live at the peak, 117,440,512 traced without a Python
    // frame (4.2%) and 1,006,657,536 untraced (no event, no frame: 36.0%).
    let out = leakscope(&["tree", "--at", "peak", &pp]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let all = text
        .lines()
        .find(|l| l.ends_with("  all"))
        .expect("root line");
    assert!(all.contains("2.61 GiB") && all.contains("100.0%"), "{all}");
    let nf = text
        .lines()
        .find(|l| l.ends_with(NO_FRAME))
        .expect("no-frame line");
    assert!(nf.contains("112 MiB") && nf.contains("4.2%"), "{nf}");
    let untraced = text
        .lines()
        .find(|l| l.ends_with(UNTRACED))
        .expect("untraced line");
    assert!(
        untraced.contains("960 MiB") && untraced.contains("36.0%"),
        "{untraced}"
    );
    assert!(text.contains("smaller"), "1% pruning leaves summary lines");

    let out = leakscope(&["tree", "--json", "--at", "peak", &pp]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "leakscope.tree/4");
    assert_eq!(v["at"], "peak");
    let d = &v["devices"][0];
    assert_eq!(d["at"]["kind"], "peak");
    assert_eq!(d["at"]["event_index"], 2078);
    assert_eq!(d["total_bytes"], 2_797_887_488u64);
    assert_eq!(d["root"]["name"], "all");
    assert_eq!(d["root"]["bytes"], 2_797_887_488u64);
    assert!(d["root"].get("filename").is_none());
    let kids = d["root"]["children"].as_array().unwrap();
    let nf = kids.iter().find(|c| c["name"] == NO_FRAME).unwrap();
    assert_eq!(nf["bytes"], 117_440_512u64);
    assert_eq!(nf["self_bytes"], 117_440_512u64);
    assert_eq!(nf["blocks"], 7);
    let un = kids.iter().find(|c| c["name"] == UNTRACED).unwrap();
    assert_eq!(un["bytes"], 1_006_657_536u64);
    assert_eq!(un["blocks"], 6);
    let frame = kids
        .iter()
        .find(|c| c["name"] != NO_FRAME && c["name"] != UNTRACED)
        .unwrap();
    assert_eq!(
        frame["name"].as_str().unwrap(),
        format!(
            "{}:{}:{}",
            frame["filename"].as_str().unwrap(),
            frame["line"],
            frame["function"].as_str().unwrap()
        )
    );

    let out = leakscope(&["flamegraph", "--folded", "--at", "peak", &pp]);
    assert!(out.status.success());
    let sum: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, 2_797_887_488);

    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("x.svg");
    let out = leakscope(&["flamegraph", &pp, "-o", svg.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).expect("x.svg written");
    assert!(text.contains("live memory at end"));
    // Truth: 1,308,647,424 bytes live at the end.
    assert!(text.contains("all (1,308,647,424 bytes, 100%)"));
    let folded = dir.path().join("x.folded");
    let out = leakscope(&[
        "flamegraph",
        "--folded",
        &pp,
        "-o",
        folded.to_str().unwrap(),
    ]);
    assert!(out.status.success() && out.stdout.is_empty());
    assert!(std::fs::read_to_string(&folded).unwrap().ends_with('\n'));

    for (args, msg) in [
        (vec!["tree", "--at", "sometime"], "--at"),
        (vec!["flamegraph", "--folded", "--at", "event:x"], "--at"),
        (vec!["tree", "--at", "oom"], "no oom event"),
        (
            vec!["flamegraph", "--at", "event:999999999"],
            "past the end",
        ),
        (vec!["tree", "--min-share", "2"], "--min-share"),
        (vec!["tree", "--device", "7"], "no device 7"),
    ] {
        let mut a = args.clone();
        a.push(&pp);
        let out = leakscope_in(dir.path(), &a);
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{args:?}: {err}");
    }
    assert!(
        !dir.path().join("flamegraph.svg").exists(),
        "no file on errors"
    );
    // Without -o the SVG is flamegraph.svg in the current directory.
    let out = leakscope_in(dir.path(), &["flamegraph", "--at", "peak", &pp]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(dir.path().join("flamegraph.svg")).unwrap();
    assert!(text.contains("all (2,797,887,488 bytes, 100%)"));

    let out = leakscope(&["--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    for cmd in ["tree", "flamegraph"] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(cmd))
            .unwrap_or_else(|| panic!("{cmd} missing from --help"));
        assert!(line.len() > cmd.len() + 20, "{line}");
    }
}
