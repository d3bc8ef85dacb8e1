//! A pipeline stage before the last, by hand: Megatron-core's 1F1B schedule with two
//! warm-up forwards and mini-batches of four micro-batches, so half of each mini-batch's
//! windows run forwards only or backwards only. The schedule's `forward_step` marks the
//! micro-batches (`windows::pipeline`); what must be found is written here, in bytes.

use std::collections::HashMap;

use crate::common::*;

const SCHEDULES: &str = "/venv/megatron/core/pipeline_parallel/schedules.py";
const P2P: &str = "/venv/megatron/core/pipeline_parallel/p2p_communication.py";
const MIB: u64 = 1 << 20;

/// A frame: file, line, function.
type Frame = (&'static str, u32, &'static str);

const SCHEDULE: Frame = (
    SCHEDULES,
    2263,
    "forward_backward_pipelining_without_interleaving",
);
const MAIN: Frame = ("/app/train.py", 5, "main");
/// The receive of a micro-batch's input from the previous stage.
const RECV: [Frame; 4] = [
    (P2P, 331, "create_tensor_recv_prev"),
    (P2P, 400, "recv_forward"),
    SCHEDULE,
    MAIN,
];

/// `inner` called under the schedule's `forward_step`, defined in `schedule_file`.
fn in_forward_step(inner: Frame, schedule_file: &'static str) -> [Frame; 4] {
    [inner, (schedule_file, 437, "forward_step"), SCHEDULE, MAIN]
}

#[derive(Default)]
struct Trace {
    events: Vec<serde_json::Value>,
    next: u64,
    live: HashMap<u64, u64>,
}

impl Trace {
    fn alloc(&mut self, frames: &[Frame], bytes: u64) -> u64 {
        let addr = 0x7f00_0000_0000 + self.next;
        self.next += bytes.next_multiple_of(2 * MIB);
        self.live.insert(addr, bytes);
        self.push("alloc", addr, bytes, frames);
        addr
    }

    /// A free as PyTorch records it with `context="all"`: requested where the program let
    /// go (`frames`), then completed.
    fn free(&mut self, addr: u64, frames: &[Frame]) {
        let bytes = self.live.remove(&addr).expect("a live address");
        self.push("free_requested", addr, bytes, frames);
        self.push("free_completed", addr, bytes, frames);
    }

    /// A micro-batch's forward: its 16 MiB input received (then `after_receive` runs),
    /// then three layers that each save 8 MiB for the backward and free a 2 MiB
    /// temporary; `each_layer` runs after each. Returns the input and the saved
    /// activations.
    fn forward(
        &mut self,
        layer: &[Frame],
        after_receive: impl FnOnce(&mut Trace),
        mut each_layer: impl FnMut(&mut Trace),
    ) -> (u64, Vec<u64>) {
        let input = self.alloc(&RECV, 16 * MIB);
        after_receive(self);
        let mut saved = Vec::new();
        for _ in 0..3 {
            saved.push(self.alloc(layer, 8 * MIB));
            let tmp = self.alloc(layer, 2 * MIB);
            self.free(tmp, layer);
            each_layer(self);
        }
        (input, saved)
    }

    fn push(&mut self, action: &str, addr: u64, bytes: u64, frames: &[Frame]) {
        let frames: Vec<_> = frames
            .iter()
            .map(|(file, line, name)| serde_json::json!({"filename": file, "line": line, "name": name}))
            .collect();
        self.events.push(serde_json::json!({
            "action": action, "addr": addr, "size": bytes, "stream": 0, "frames": frames
        }));
    }

    fn write(self) -> tempfile::TempPath {
        let snap = serde_json::json!({"segments": [], "device_traces": [self.events]});
        let file = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
        std::fs::write(file.path(), snap.to_string()).unwrap();
        file.into_temp_path()
    }
}

/// Two mini-batches of four micro-batches on a stage with two warm-up forwards
/// ([`stage_of`]), each input freed right after its backward.
fn stage(leak: bool, schedule_file: &'static str) -> tempfile::TempPath {
    stage_of(leak, schedule_file, 2, &[4, 4], false)
}

/// Mini-batches of `sizes` micro-batches on a stage with `warm` warm-up forwards. Each
/// micro-batch receives a 16 MiB input (`create_tensor_recv_prev`), runs three layers that
/// save 8 MiB each for the backward (and free a 2 MiB temporary), and with `leak` keeps
/// 4 MiB at `/app/debug.py:7:keep` for good; its backward frees the saved activations,
/// then the schedule frees the input. `forward_step` is defined in `schedule_file`.
/// With `late`, an input whose backward ran in the steady phase is freed only once the
/// next input is received (Megatron drops it when `input_tensor` is rebound by
/// `send_backward_recv_forward`): in the next micro-batch's window.
fn stage_of(
    leak: bool,
    schedule_file: &'static str,
    warm: usize,
    sizes: &[usize],
    late: bool,
) -> tempfile::TempPath {
    let layer = in_forward_step(("/app/model.py", 30, "forward"), schedule_file);
    let keep = in_forward_step(("/app/debug.py", 7, "keep"), schedule_file);
    let backward: [Frame; 3] = [("/app/model.py", 60, "backward"), SCHEDULE, MAIN];
    let schedule: [Frame; 2] = [SCHEDULE, MAIN];
    let mut t = Trace::default();
    let mut pending: Option<u64> = None;
    let forward = |t: &mut Trace, pending: &mut Option<u64>| -> (u64, Vec<u64>) {
        // Dropped by the schedule as `input_tensor` is rebound to the one just received.
        let done = t.forward(
            &layer,
            |t| {
                if let Some(a) = pending.take() {
                    t.free(a, &schedule);
                }
            },
            |_| {},
        );
        if leak {
            t.alloc(&keep, 4 * MIB);
        }
        done
    };
    let backward_of = |t: &mut Trace, (input, saved): (u64, Vec<u64>), defer: bool| {
        let grad = t.alloc(&backward, 8 * MIB);
        for a in saved {
            t.free(a, &backward);
        }
        t.free(grad, &backward);
        if defer {
            return Some(input);
        }
        t.free(input, &schedule);
        None
    };
    for &m in sizes {
        let mut in_flight = std::collections::VecDeque::new();
        for j in 0..m {
            in_flight.push_back(forward(&mut t, &mut pending));
            if j >= warm {
                let oldest = in_flight.pop_front().unwrap();
                pending = backward_of(&mut t, oldest, late);
            }
        }
        while let Some(oldest) = in_flight.pop_front() {
            if let Some(a) = pending.take() {
                t.free(a, &schedule);
            }
            backward_of(&mut t, oldest, false);
        }
    }
    t.write()
}

/// A middle stage of a deep pipeline (three warm-up forwards) in mini-batches of three
/// and five, each input dropped when the next is received: the first mini-batch is all
/// warm-up and cool-down, and in both each input goes after its own micro-batch's
/// backward, one at a time, though the survivors outlive 2 to 4 window boundaries (2 in
/// the first mini-batch; 4, 3 and 2 in the second). The inputs are in flight, not retained; a leak of 4 MiB per micro-batch is
/// found in all 8.
#[test]
fn a_deep_pipelines_inputs_going_a_micro_batch_at_a_time_are_in_flight() {
    let clean = stage_of(false, SCHEDULES, 3, &[3, 5], true);
    let d = leakscope_json(&["leaks", clean.to_str().unwrap(), "--windows", "pipeline"])["devices"]
        [0]
    .clone();
    assert_eq!(d["windows"]["count"], 8, "{}", d["windows"]);
    let suspects = d["suspects"].as_array().unwrap();
    assert!(suspects.is_empty(), "{suspects:#?}");
    let recv = format!("{P2P}:331:create_tensor_recv_prev");
    let row = d["not_suspects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["site"]["label"] == recv.as_str())
        .unwrap_or_else(|| panic!("{recv} not listed: {d}"));
    assert_eq!(row["kind"], "in-flight", "{row}");

    let leaky = stage_of(true, SCHEDULES, 3, &[3, 5], true);
    let d = leakscope_json(&["leaks", leaky.to_str().unwrap(), "--windows", "pipeline"])["devices"]
        [0]
    .clone();
    assert_the_leak_per_micro_batch(&d, 8);
}

/// The one suspect of a device of `leaks`: the 4 MiB kept per micro-batch at
/// `/app/debug.py:7:keep`, a leak grown in each of its `windows`.
fn assert_the_leak_per_micro_batch(d: &serde_json::Value, windows: u64) -> &serde_json::Value {
    let suspects = d["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1, "{suspects:#?}");
    let s = &suspects[0];
    assert_eq!(s["site"]["label"], "/app/debug.py:7:keep");
    assert_eq!(s["kind"], "leak");
    assert_eq!(s["bytes_per_window"], 4 * MIB);
    assert_eq!(s["windows_growing"], windows);
    s
}

fn leaks_auto(trace: &tempfile::TempPath) -> serde_json::Value {
    leakscope_json(&["leaks", trace.to_str().unwrap()])["devices"][0].clone()
}

/// A leak of 4 MiB per micro-batch on a stage before the last is found per micro-batch:
/// the windows are the schedule's 8 micro-batches (each from the receive of its input),
/// the leak grows in all 8; the inputs and activations, handed back a micro-batch at a
/// time after each one's backward in the cool-down, are no suspect. Without the leak, no
/// suspect at all.
#[test]
fn a_pipeline_stages_micro_batches_are_its_windows() {
    let leaky = stage(true, SCHEDULES);
    let d = leaks_auto(&leaky);
    assert_eq!(d["windows"]["spec"], "pipeline", "{}", d["windows"]);
    assert_eq!(d["windows"]["count"], 8);
    assert_eq!(d["windows"]["verdicts"], true);
    let s = assert_the_leak_per_micro_batch(&d, 8);
    assert_eq!(s["bytes_at_end"], 8 * 4 * MIB);

    let clean = stage(false, SCHEDULES);
    let d = leaks_auto(&clean);
    assert_eq!(d["windows"]["spec"], "pipeline");
    assert_eq!(
        d["suspects"].as_array().unwrap().len(),
        0,
        "{:#?}",
        d["suspects"]
    );
}

/// A `forward_step` of the program's own (not in Megatron's schedules) is no schedule's
/// mark: the same trace is not cut at it.
#[test]
fn only_a_schedules_own_function_marks_micro_batches() {
    let own = stage(true, "/app/train_loop.py");
    let d = leaks_auto(&own);
    assert_ne!(d["windows"]["spec"], "pipeline", "{}", d["windows"]);
    let (code, _, err) = run_cli(&["leaks", own.to_str().unwrap(), "--windows", "pipeline"]);
    assert_eq!(code, 0, "{err}");
    let asked = leakscope_json(&["windows", own.to_str().unwrap(), "--windows", "pipeline"]);
    assert_eq!(asked["devices"][0]["source"], "whole-trace", "{asked}");
}

/// The last stage, three mini-batches of `m` micro-batches. Each backward leaves a
/// 16 MiB temporary of its own (`/app/model.py:61:backward`) that the next forward frees
/// (memory handed to the next window). With `pinned`, each micro-batch's output
/// (8 KiB at `/app/loss.py:12:logprobs`) is kept until its mini-batch ends, and with it
/// the received input and the 16 MiB gradient the backward made for it at
/// `/app/model.py:61:backward`; the kept outputs are dropped together at the end of each
/// mini-batch. Without it, each is freed as soon as it is used.
fn last_stage(pinned: bool, m: usize) -> tempfile::TempPath {
    let layer = in_forward_step(("/app/model.py", 30, "forward"), SCHEDULES);
    let out = in_forward_step(("/app/loss.py", 12, "logprobs"), SCHEDULES);
    let backward: [Frame; 3] = [("/app/model.py", 61, "backward"), SCHEDULE, MAIN];
    let drop: [Frame; 2] = [("/app/engine.py", 80, "train_batch"), MAIN];
    let mut t = Trace::default();
    let mut straddle: Option<u64> = None;
    for _ in 0..3 {
        let mut kept = Vec::new();
        for _ in 0..m {
            let (input, saved) = t.forward(
                &layer,
                |_| {},
                |t| {
                    if let Some(s) = straddle.take() {
                        t.free(s, &layer);
                    }
                },
            );
            let output = t.alloc(&out, 8 << 10);
            let grad = t.alloc(&backward, 16 * MIB);
            for a in saved {
                t.free(a, &backward);
            }
            straddle = Some(t.alloc(&backward, 16 * MIB));
            if pinned {
                kept.extend([input, grad, output]);
            } else {
                t.free(grad, &backward);
                t.free(output, &[SCHEDULE, MAIN]);
                t.free(input, &[SCHEDULE, MAIN]);
            }
        }
        for a in kept {
            t.free(a, &drop);
        }
    }
    t.write()
}

/// On the last stage, what a kept output pins is retained, 16 MiB per micro-batch for the
/// input and for its gradient, 8 KiB for the output, in mini-batches as short as three:
/// each mini-batch end frees what its micro-batches kept in one burst, while the
/// temporaries each backward hands to the next forward (from the gradient's own site)
/// are in flight, not evidence against the burst. The same run without the pin: no suspect.
/// Likewise in mini-batches of two, where only the first micro-batch keeps anything past
/// its own end, freed with the second's own at the mini-batch end.
#[test]
fn what_a_kept_output_pins_is_retained_in_mini_batches_of_three() {
    for m in [3, 2] {
        what_a_kept_output_pins(m);
    }
}

/// [`what_a_kept_output_pins_is_retained_in_mini_batches_of_three`] in mini-batches of
/// `m`.
fn what_a_kept_output_pins(m: usize) {
    let pinned = last_stage(true, m);
    let d = leaks_auto(&pinned);
    assert_eq!(d["windows"]["spec"], "pipeline", "{}", d["windows"]);
    assert_eq!(d["windows"]["count"], 3 * m);
    let mut got: Vec<(String, String, u64)> = d["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let label = s["site"]["label"].as_str().unwrap().to_string();
            (
                label,
                s["kind"].as_str().unwrap().to_string(),
                s["bytes_per_window"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    let retained = |site: &str, bytes: u64| (site.to_string(), "retained".to_string(), bytes);
    assert_eq!(
        got,
        vec![
            retained("/app/loss.py:12:logprobs", 8 << 10),
            retained("/app/model.py:61:backward", 16 * MIB),
            retained(&format!("{P2P}:331:create_tensor_recv_prev"), 16 * MIB),
        ],
        "{d}"
    );

    let clean = last_stage(false, m);
    let d = leaks_auto(&clean);
    assert_eq!(
        d["suspects"].as_array().unwrap().len(),
        0,
        "{:#?}",
        d["suspects"]
    );
}

/// The first stage of four, two mini-batches of four micro-batches: its three warm-up
/// forwards and the first steady one follow each other with nothing received between, so
/// the schedule's `forward_step` is entered once per mini-batch as the allocations show
/// it. Each forward embeds its input (`/app/model.py:10:embed`, 16 MiB), runs three layers
/// that save 8 MiB each, and with `leak` keeps 4 MiB at `/app/debug.py:7:keep` for good;
/// each backward receives its 16 MiB gradient (`create_tensor_recv_next`), makes an 8 MiB
/// one of its own, and frees what its forward saved.
fn first_stage(leak: bool) -> tempfile::TempPath {
    let embed = in_forward_step(("/app/model.py", 10, "embed"), SCHEDULES);
    let layer = in_forward_step(("/app/model.py", 30, "forward"), SCHEDULES);
    let keep = in_forward_step(("/app/debug.py", 7, "keep"), SCHEDULES);
    let backward: [Frame; 3] = [("/app/model.py", 60, "backward"), SCHEDULE, MAIN];
    let recv_grad: [Frame; 4] = [
        (P2P, 339, "create_tensor_recv_next"),
        (P2P, 420, "recv_backward"),
        SCHEDULE,
        MAIN,
    ];
    let mut t = Trace::default();
    let forward = |t: &mut Trace| -> Vec<u64> {
        let mut saved = vec![t.alloc(&embed, 16 * MIB)];
        for _ in 0..3 {
            saved.push(t.alloc(&layer, 8 * MIB));
        }
        if leak {
            t.alloc(&keep, 4 * MIB);
        }
        saved
    };
    let backward_of = |t: &mut Trace, saved: Vec<u64>| {
        let g = t.alloc(&recv_grad, 16 * MIB);
        let grad = t.alloc(&backward, 8 * MIB);
        for a in saved {
            t.free(a, &backward);
        }
        t.free(grad, &backward);
        t.free(g, &[SCHEDULE, MAIN]);
    };
    for _ in 0..2 {
        let mut in_flight: std::collections::VecDeque<Vec<u64>> =
            (0..4).map(|_| forward(&mut t)).collect();
        while let Some(oldest) = in_flight.pop_front() {
            backward_of(&mut t, oldest);
        }
    }
    t.write()
}

/// On the first stage the schedule's micro-batches are found though their entries merged:
/// a call opens with the allocation that opens the windows and follows the one that
/// closes them, and the calls so counted are the eight backward passes. The leak grows
/// in each of the 8, by 4 MiB.
#[test]
fn the_first_stages_forwards_in_a_row_are_micro_batches_of_their_own() {
    let leaky = first_stage(true);
    let path = leaky.to_str().unwrap();
    let asked = leakscope_json(&["windows", path, "--windows", "pipeline"]);
    assert_eq!(
        asked["devices"][0]["starts"].as_array().unwrap().len(),
        8,
        "{asked}"
    );
    let d = leakscope_json(&["leaks", path, "--windows", "pipeline"])["devices"][0].clone();
    assert_the_leak_per_micro_batch(&d, 8);

    let clean = first_stage(false);
    let asked = leakscope_json(&["windows", clean.to_str().unwrap(), "--windows", "pipeline"]);
    assert_eq!(
        asked["devices"][0]["starts"].as_array().unwrap().len(),
        8,
        "{asked}"
    );
}

/// The first stage of four running forwards only (log-probs under no_grad), two
/// mini-batches of four micro-batches. Nothing is allocated between two of its forwards:
/// each embeds its input (`/app/model.py:10:embed`, 16 MiB), runs three layers whose 8 MiB
/// activations die in the layer, makes its 16 MiB output and frees the embedding, and with
/// `leak` keeps 4 MiB at `/app/debug.py:7:keep` for good; the schedule then sends the
/// output and frees it, from its own frame (the free's stack), before the next forward.
/// The engine gathers each mini-batch's results (1 MiB at `/app/engine.py:20:infer_batch`).
fn forward_only_first_stage(leak: bool) -> tempfile::TempPath {
    let embed = in_forward_step(("/app/model.py", 10, "embed"), SCHEDULES);
    let layer = in_forward_step(("/app/model.py", 30, "forward"), SCHEDULES);
    let keep = in_forward_step(("/app/debug.py", 7, "keep"), SCHEDULES);
    let engine: [Frame; 2] = [("/app/engine.py", 20, "infer_batch"), MAIN];
    let mut t = Trace::default();
    for _ in 0..2 {
        for _ in 0..4 {
            let input = t.alloc(&embed, 16 * MIB);
            for _ in 0..3 {
                let a = t.alloc(&layer, 8 * MIB);
                t.free(a, &layer);
            }
            let out = t.alloc(&layer, 16 * MIB);
            t.free(input, &layer);
            if leak {
                t.alloc(&keep, 4 * MIB);
            }
            t.free(out, &[SCHEDULE, MAIN]);
        }
        let gathered = t.alloc(&engine, MIB);
        t.free(gathered, &engine);
    }
    t.write()
}

/// Where a free was made tells the calls apart when no allocation does: the schedule frees
/// each sent output from outside `forward_step`, so the eight forwards are eight windows
/// though no backward pass counts them, and the 4 MiB kept per forward is a leak in each.
#[test]
fn a_free_from_outside_the_schedules_call_ends_it() {
    let leaky = forward_only_first_stage(true);
    let path = leaky.to_str().unwrap();
    let d = leakscope_json(&["leaks", path, "--windows", "pipeline"])["devices"][0].clone();
    assert_eq!(d["windows"]["count"], 8, "{}", d["windows"]);
    let s = assert_the_leak_per_micro_batch(&d, 8);
    assert_eq!(s["bytes_at_end"], 8 * 4 * MIB);

    let clean = forward_only_first_stage(false);
    let d = leakscope_json(&["leaks", clean.to_str().unwrap(), "--windows", "pipeline"])["devices"]
        [0]
    .clone();
    assert_eq!(d["windows"]["count"], 8, "{}", d["windows"]);
    assert_eq!(
        d["suspects"].as_array().unwrap().len(),
        0,
        "{:#?}",
        d["suspects"]
    );
}
