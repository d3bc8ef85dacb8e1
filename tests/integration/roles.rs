//! Memory roles against the scenario generator's truth (each allocation's role as the
//! workload made it), on real files, in budgets and with the user's own rules.

use std::collections::BTreeMap;

use leakscope::attribute::roles::Role;
use leakscope::model::Action;

use crate::common::*;

/// `top --by role` at `at` on one device: bytes per role.
fn by_role(path: &str, at: &str, device: i64) -> BTreeMap<String, u64> {
    let v = leakscope_json(&[
        "top",
        path,
        "--at",
        at,
        "--by",
        "role",
        "--device",
        &device.to_string(),
        "--limit",
        "100",
    ]);
    v["devices"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(
                r["site"]["label"], r["role"],
                "a row keyed by role names it"
            );
            (
                r["role"].as_str().unwrap().to_string(),
                r["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Every shipped scenario, at the peak and at the end, each device: each role's bytes
/// within 5% of the truth's (so exactly where the truth has none).
#[test]
fn roles_match_the_generators_truth() {
    let mut off = Vec::new();
    let mut checked = 0;
    // Single files, then each file of the verl run directory (its truth lists them).
    let mut files: Vec<(String, std::path::PathBuf, serde_json::Value)> = scenario_truths()
        .into_iter()
        .map(|(name, truth)| {
            let path = fixture(&format!("scenarios/{name}.pickle"));
            (name, path, truth)
        })
        .collect();
    let run = read_json(&fixture("scenarios/verl_ranks/truth.json"));
    for f in run["files"].as_array().unwrap() {
        let rel = f["path"].as_str().unwrap();
        files.push((
            rel.to_string(),
            fixture(&format!("scenarios/verl_ranks/{rel}")),
            f.clone(),
        ));
    }
    for (name, path, truth) in files {
        let devices: Vec<serde_json::Value> = match truth["devices"].as_array() {
            Some(d) => d.clone(),
            None => vec![truth.clone()],
        };
        for (k, d) in devices.iter().enumerate() {
            let device = match truth["devices"].as_array() {
                Some(_) => d["device"].as_i64().unwrap_or(k as i64),
                None => 0,
            };
            for at in ["peak", "end"] {
                let point = &d[at];
                let live = point["live_requested_bytes"].as_u64().unwrap();
                let want: BTreeMap<String, u64> = point["by_role"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(r, v)| (r.clone(), v["bytes"].as_u64().unwrap()))
                    .collect();
                assert_eq!(
                    want.values().sum::<u64>(),
                    live,
                    "{name} {at}: truth adds up"
                );
                let got = by_role(path.to_str().unwrap(), at, device);
                assert_eq!(got.values().sum::<u64>(), live, "{name} {at}: roles add up");
                let roles: std::collections::BTreeSet<&String> =
                    want.keys().chain(got.keys()).collect();
                for r in roles {
                    let (w, g) = (
                        want.get(r).copied().unwrap_or(0),
                        got.get(r).copied().unwrap_or(0),
                    );
                    if w.abs_diff(g) > w / 20 {
                        off.push(format!("{name} d{device} {at} {r}: truth {w}, got {g}"));
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 50, "{checked} points");
    assert!(off.is_empty(), "{off:#?}");
}

/// With free stacks and without, with C++ engine frames, and with the weights traced:
/// exact where the rules decide every allocation.
#[test]
fn recording_variants_are_exact() {
    for name in [
        "plain_loop_control",
        "plain_loop_no_free_stacks",
        "plain_loop_cpp_stacks",
        "plain_loop_weights_traced",
    ] {
        let truth = read_json(&fixture(&format!("scenarios/{name}.truth.json")));
        for at in ["peak", "end"] {
            let want: BTreeMap<String, u64> = truth[at]["by_role"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(r, v)| (r.clone(), v["bytes"].as_u64().unwrap()))
                .collect();
            let got = by_role(
                fixture(&format!("scenarios/{name}.pickle"))
                    .to_str()
                    .unwrap(),
                at,
                0,
            );
            assert_eq!(got, want, "{name} at {at}");
        }
    }
}

/// The seed case: the kept receive buffer is an activation, its gradient a gradient, and
/// the group says the autograd graph is retained.
#[test]
fn the_retained_graph_is_named() {
    let f = fixture("scenarios/pp_last_stage_recv_pinned.pickle");
    let v = leakscope_json(&["leaks", f.to_str().unwrap()]);
    let suspects = v["devices"][0]["suspects"].as_array().unwrap();
    let role_of = |site: &str| {
        suspects
            .iter()
            .find(|s| s["site"]["label"].as_str().unwrap().ends_with(site))
            .map(|s| s["role"].as_str().unwrap().to_string())
    };
    assert_eq!(
        role_of("create_tensor_recv_prev").as_deref(),
        Some("activation")
    );
    assert_eq!(role_of("<no python frame>").as_deref(), Some("gradient"));
    let group = &v["devices"][0]["groups"][0];
    let roles: Vec<&str> = group["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["role"].as_str().unwrap())
        .collect();
    assert!(
        roles.contains(&"activation") && roles.contains(&"gradient"),
        "{roles:?}"
    );
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(["leaks", f.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("autograd graph is retained"), "{text}");
}

/// `check` with per-role limits: under the role's bytes at the peak it fails, at the
/// device's peak it passes (a role never holds more than everything); JUnit names the role.
#[test]
fn per_role_budgets_fail_and_pass() {
    let name = "plain_loop_kept_logits";
    let truth = read_json(&fixture(&format!("scenarios/{name}.truth.json")));
    let act = truth["peak"]["by_role"]["activation"]["bytes"]
        .as_u64()
        .unwrap();
    let peak = truth["peak"]["live_requested_bytes"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let budget = |limit: u64| {
        let p = dir.path().join(format!("b{limit}.toml"));
        std::fs::write(
            &p,
            format!("[memory]\npeak_requested = {{ activation = {limit}, gradient = {peak} }}\n"),
        )
        .unwrap();
        p
    };
    let f = fixture(&format!("scenarios/{name}.pickle"));
    let run = |b: &std::path::Path, junit: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .args(["check", f.to_str().unwrap(), "--budget"])
            .arg(b)
            .arg("--junit")
            .arg(junit)
            .output()
            .unwrap()
    };
    let junit = dir.path().join("j.xml");
    let out = run(&budget(act - 1), &junit);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("memory.peak_requested.activation"), "{xml}");
    let out = run(&budget(peak), &junit);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A role neither built in nor in [roles] is a budget error.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[memory]\npeak_requested = { weights = \"1 GiB\" }\n").unwrap();
    assert_eq!(run(&bad, &junit).status.code(), Some(2));
}

/// A `[roles]` rule comes first: Adam's `_init_group` memory under a name of the user's,
/// as many bytes as the truth's Adam sites hold at the end.
#[test]
fn user_roles_come_first() {
    let name = "plain_loop_kept_logits";
    let truth = read_json(&fixture(&format!("scenarios/{name}.truth.json")));
    let adam: u64 = truth["end"]["by_site"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(s, _)| s.contains("/torch/optim/adam.py:"))
        .map(|(_, v)| v["bytes"].as_u64().unwrap())
        .sum();
    assert!(adam > 0);
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles.toml");
    std::fs::write(
        &roles,
        "[roles]\n'optim/adam\\.py:\\d+:_init_group' = 'adam_state'\n",
    )
    .unwrap();
    let f = fixture(&format!("scenarios/{name}.pickle"));
    let v = leakscope_json(&[
        "top",
        f.to_str().unwrap(),
        "--by",
        "role",
        "--roles",
        roles.to_str().unwrap(),
    ]);
    let rows = v["devices"][0]["rows"].as_array().unwrap();
    let row = rows.iter().find(|r| r["role"] == "adam_state").unwrap();
    assert_eq!(row["bytes"].as_u64(), Some(adam));
    assert!(rows.iter().all(|r| r["role"] != "optimizer_state"));
}

/// Real files: AdamW's `_init_group` memory is optimizer state (torch_npu, two devices);
/// the Maphsge4 file's blocks made before recording are untraced, as many bytes as its
/// active blocks that no `alloc` event explains; on single passes recorded with free
/// stacks, memory released by `SavedVariable::reset_data` is activation.
#[test]
fn corpus_roles() {
    let Some(real) = corpus("corpus_roles") else {
        return;
    };
    let npu = real.join("torch_npu/snapshot_with_multi_devices.pkl");
    let v = leakscope_json(&["top", npu.to_str().unwrap(), "--limit", "1000"]);
    let mut seen = 0;
    for d in v["devices"].as_array().unwrap() {
        for r in d["rows"].as_array().unwrap() {
            if r["site"]["label"]
                .as_str()
                .unwrap()
                .ends_with(":_init_group")
            {
                assert_eq!(r["role"], "optimizer_state", "{r}");
                seen += 1;
            }
        }
    }
    assert!(seen >= 2, "AdamW state rows: {seen}");

    // Independently of the replay: active blocks whose address no alloc event names.
    let maph = real.join("cuda/era21_frames_no_time_us__segment_free__Maphsge4_select_n.pickle");
    let s = session(&maph);
    let snap = s.snapshot();
    let trace = snap.trace(0);
    let allocated: std::collections::HashSet<u64> = (0..trace.len())
        .filter(|&i| trace.action[i] == Action::ALLOC)
        .map(|i| trace.addr[i])
        .collect();
    let untraced: u64 = snap
        .segments
        .iter()
        .filter(|sg| sg.device_index() == 0)
        .flat_map(|sg| &sg.blocks)
        .filter(|b| b.state.is_active() && !allocated.contains(&b.address))
        .map(|b| b.requested_bytes())
        .sum();
    assert!(untraced > 13 << 30, "{untraced}");
    let got = by_role(maph.to_str().unwrap(), "end", 0);
    assert_eq!(got.get("untraced").copied(), Some(untraced));

    let more = real.parent().unwrap().join("real-more");
    for f in [
        "era210_ctx_no_usermd__memory_2.7b_train_seq128_bf16__aimetrics_assignment2-systems.pickle",
        "era210_ctx_usermd__xl_ctx512_full_step_bf16__LINYUNLinYun_CS336-assignment2-systems.pickle",
    ] {
        let path = more.join(f);
        if !path.exists() {
            continue;
        }
        let s = session(&path);
        let runs = s.runs(&leakscope::Options::default()).unwrap();
        let r = &runs[0];
        let snap = s.snapshot();
        let trace = snap.trace(r.device());
        let (mut saved, mut activation) = (0u64, 0u64);
        for (i, l) in r.replay.lifetimes.iter().enumerate() {
            let released = l.free_stack(trace).is_some_and(|st| {
                snap.stacks.get(st).iter().any(|fr| {
                    snap.strings
                        .get(snap.frames.get(*fr).name)
                        .contains("SavedVariable::reset_data")
                })
            });
            if released {
                saved += l.bytes;
                if r.attr.role(i) == Role::Activation.id() {
                    activation += l.bytes;
                }
            }
        }
        assert!(saved > 0, "{f}");
        assert_eq!(
            activation, saved,
            "{f}: released by SavedVariable is activation"
        );
    }
}

/// A trace without stacks (`context=None`) whose code annotated its phases
/// (`record_function("forward")` and the like) and its steps: the annotations give the
/// phases, so the rules decide what no stack could. Two steps; each: a batch made in the
/// step (kept until the next step's), a forward keeping an activation and freeing a
/// scratch, a backward freeing the activation (and its own scratch) and, in step 0,
/// making the gradient, an optimizer step making its state in step 0 and a scratch. The
/// weights are made before any of it. Bytes by hand.
#[test]
fn annotations_give_phases_without_stacks() {
    use crate::common::hand::*;
    use serde_json::json;
    // (action, slot, MiB): each slot its own 16 MiB stretch of one segment.
    let (w, batch0, batch1, act, scratch, grad, bscratch, state, oscratch) =
        (0u64, 1, 2, 3, 4, 5, 6, 7, 8);
    let mut trace = Vec::new();
    let mut anns = Vec::new();
    let mut t = 0i64;
    let mut ev = |trace: &mut Vec<serde_json::Value>, action: &str, slot: u64, mib: u64| {
        t += 10;
        let mut e = event(action, S + slot * 16 * MIB, mib * MIB);
        e["frames"] = json!([]);
        e["time_us"] = json!(t);
        trace.push(e);
        t
    };
    let ann = |anns: &mut Vec<serde_json::Value>, stage: &str, name: &str, t: i64| {
        anns.push(json!({"stage": stage, "name": name, "device": 0, "time_us": t + 5}));
    };
    let t0 = ev(&mut trace, "alloc", w, 8);
    ann(&mut anns, "START", "step0", t0);
    for step in 0..2 {
        let b = if step == 0 { batch0 } else { batch1 };
        if step == 1 {
            ev(&mut trace, "free_completed", batch0, 3);
        }
        let x = ev(&mut trace, "alloc", b, 3);
        ann(&mut anns, "START", "## forward ##", x);
        ev(&mut trace, "alloc", act, 10);
        ev(&mut trace, "alloc", scratch, 1);
        let x = ev(&mut trace, "free_completed", scratch, 1);
        ann(&mut anns, "END", "## forward ##", x);
        ann(&mut anns, "START", "backward", x + 2);
        if step == 0 {
            ev(&mut trace, "alloc", grad, 2);
        }
        ev(&mut trace, "alloc", bscratch, 1);
        ev(&mut trace, "free_completed", bscratch, 1);
        let x = ev(&mut trace, "free_completed", act, 10);
        ann(&mut anns, "END", "backward", x);
        ann(&mut anns, "START", "Optimizer.step#AdamW.step", x + 2);
        if step == 0 {
            ev(&mut trace, "alloc", state, 4);
        }
        ev(&mut trace, "alloc", oscratch, 1);
        let x = ev(&mut trace, "free_completed", oscratch, 1);
        ann(&mut anns, "END", "Optimizer.step#AdamW.step", x);
        ann(&mut anns, "END", &format!("step{step}"), x + 2);
        if step == 0 {
            ann(&mut anns, "START", "step1", x + 3);
        }
    }
    // A trailing event, so the last step's END lies before one.
    ev(&mut trace, "alloc", oscratch, 1);
    // The end state: one segment, the live slots active, the rest inactive.
    let live = [(w, 8), (batch1, 3), (grad, 2), (state, 4), (oscratch, 1)];
    let mut blocks = Vec::new();
    let mut at = S;
    for (slot, mib) in live {
        let a = S + slot * 16 * MIB;
        if a > at {
            blocks.push(block(at, a - at, 0, "inactive"));
        }
        blocks.push(block(a, mib * MIB, mib * MIB, "active_allocated"));
        at = a + mib * MIB;
    }
    let total = 9 * 16 * MIB;
    blocks.push(block(at, S + total - at, 0, "inactive"));
    let (_d, f) = written(vec![segment(S, total, blocks)], trace);
    // Add the annotations to the written document.
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
    doc["external_annotations"] = json!(anns);
    std::fs::write(&f, serde_json::to_vec(&doc).unwrap()).unwrap();
    let m = MIB;
    let want_end: BTreeMap<String, u64> = [
        ("parameter", 8 * m),
        ("activation", 3 * m),
        ("gradient", 2 * m),
        ("optimizer_state", 4 * m),
        // Made after the last step ended: no unit, no phase after it.
        ("unknown", m),
    ]
    .into_iter()
    .map(|(r, b)| (r.to_string(), b))
    .collect();
    assert_eq!(by_role(&f, "end", 0), want_end);
    // The peak: step 1's forward with its scratch live (8+2+4+3+10+1 MiB; step 1's
    // backward reaches the same and comes later).
    let want_peak: BTreeMap<String, u64> = [
        ("parameter", 8 * m),
        ("activation", 13 * m),
        ("gradient", 2 * m),
        ("optimizer_state", 4 * m),
        ("temporary", m),
    ]
    .into_iter()
    .map(|(r, b)| (r.to_string(), b))
    .collect();
    assert_eq!(by_role(&f, "peak", 0), want_peak);
    // Without the annotations, nothing says a phase: every traced byte is unknown.
    doc["external_annotations"] = json!([]);
    std::fs::write(&f, serde_json::to_vec(&doc).unwrap()).unwrap();
    let end = by_role(&f, "end", 0);
    assert_eq!(end.keys().collect::<Vec<_>>(), ["unknown"], "{end:?}");
}
