#!/usr/bin/env python3
"""Generate a large, realistic PyTorch CUDA memory-history snapshot for benchmarks.

The output is what ``torch.cuda.memory._dump_snapshot()`` writes: ``pickle.dump`` (protocol 4)
of ``{segments, device_traces, allocator_settings, external_annotations}``, with the key
orders of the Python path (docs/snapshot-format.md sections 3-8):

* trace entries ``action, addr, size, stream, time_us, compile_context, user_metadata,
  frames``; segments ``device, address, ..., frames, blocks`` (or ``blocks, frames`` when the
  segment has a recorded stack); blocks ``address, size, requested_size, state, frames``;
  frames ``name, filename, line``.
* Object sharing as py_symbolize produces it, so the pickle holds the same MEMOIZE / BINGET
  pattern as real files: every identical frame dict is one object (C++ frames sometimes
  exist twice, as distinct return addresses with the same symbol do); key and action
  strings are shared; one ``frames`` list per captured traceback, shared by the events
  and blocks that carry that traceback (``alloc`` with its triggering ``segment_alloc``
  and its live block; ``free_requested`` with its ``free_completed``; all the
  ``segment_free`` events of one ``empty_cache``); one shared ``[]`` for blocks with no
  recorded stack. ``--stack-sharing content`` instead makes every identical stack one
  list object (smaller events, about three times as many per MB).

Stacks come from frames.json (Megatron, TransformerEngine, FSDP2, HF, verl, vLLM):
``stacks='all'``-style stacks (C++ allocator/dispatcher frames, Python frames with CPython
eval frames interleaved, 20 to 60 frames) and pure Python stacks (``stacks='python'``).

The allocation pattern is a 1F1B-like training loop per device (device 0 Megatron-style
sites, device 1 FSDP/HF-style sites): saved activations alive across micro-batches and
freed in the backward, temporaries, per-mini-batch kept outputs, lazily created optimizer
state, a small true leak per micro-batch, cross-stream frees left pending, occasional
``empty_cache`` (segment_free) and ``segment_alloc`` on demand, blocks alive from before
recording started (ghost blocks / unmatched frees, as after a ring-buffer wrap), and
``external_annotations`` START/END pairs for ``micro_batch{j}`` and ``mini_batch{i}``.
The final ``segments`` list is consistent with the trace: live allocations are
``active_allocated`` blocks, pending cross-stream frees are ``active_pending_free``, and
the segment totals equal the sums over their blocks.

Python 3 standard library only. Deterministic for a given --seed and --size-mb.
"""

import argparse
import gc
import json
import os
import pickle
import random
import sys
import time

MiB = 1024 * 1024

SMALL_SIZE = 1 * MiB          # allocations <= 1 MiB go to the small pool
SMALL_SEGMENT = 2 * MiB       # small-pool segments are 2 MiB
LARGE_SEGMENT = 20 * MiB      # 1..10 MiB allocations share 20 MiB segments
MIN_LARGE_ALLOC = 10 * MiB    # above this, one segment rounded up to 2 MiB

# Key strings and values shared by every dict, as Module.cpp's py::str keys are.
ALLOC, FREE_REQ, FREE_DONE = 'alloc', 'free_requested', 'free_completed'
SEG_ALLOC, SEG_FREE = 'segment_alloc', 'segment_free'
NA, EMPTY_STR = 'N/A', ''


def fresh_na():
    # PyTorch builds compile_context as a new Python string for every entry (real files
    # carry one SHORT_BINUNICODE 'N/A' + MEMOIZE per event), unlike '' which CPython
    # interns. A shared object would make the file smaller and faster to read than real.
    return ''.join(('N', '/A'))
ACTIVE, PENDING, INACTIVE = 'active_allocated', 'active_pending_free', 'inactive'
LARGE, SMALL = 'large', 'small'

DEFAULT_START_US = 1773270053858957   # 7-byte LONG1, like the era210 fixtures
COMM_STREAM = 94563196289024          # a cudaStream_t pointer (6-byte LONG1)

# --------------------------------------------------------------------------------------
# Frames and stacks


def round_up(n, m):
    return (n + m - 1) // m * m


class FrameTable:
    """Interns frame dicts: one object per (name, filename, line, variant)."""

    def __init__(self):
        self.table = {}

    def get(self, name, filename, line, variant=0):
        key = (name, filename, line, variant)
        f = self.table.get(key)
        if f is None:
            f = {'name': name, 'filename': filename, 'line': line}
            self.table[key] = f
        return f

    def of(self, fj, variant=0):
        return self.get(fj['name'], fj['filename'], fj['line'], variant)


FREE_CPP_COMMON = [
    ('c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free('
     'c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)', 'CUDACachingAllocator.cpp', 0),
    ('c10::intrusive_ptr<c10::StorageImpl, c10::detail::intrusive_target_default_null_type<'
     'c10::StorageImpl> >::reset_()', '', 0),
    ('c10::TensorImpl::~TensorImpl() [clone .localalias]', 'TensorImpl.cpp', 0),
]
FREE_CPP_PYTHON = [
    ('THPVariable_clear(THPVariable*)', 'python_variable.cpp', 0),
    ('THPVariable_dealloc(_object*)', 'python_variable.cpp', 0),
]
FREE_CPP_PY_TAILS = [
    [('PyObject_DelItem', '??', 0)],
    [('PyObject_DelItem', '??', 0), ('_Py_CheckFunctionResult', '??', 0)],
    [('_PyObject_GetDictPtr', '??', 0)],
    [('PyDict_SetItem', '??', 0)],
]
FREE_CPP_ENGINE = [
    ('torch::detail::(anonymous namespace)::ConcretePyInterpreterVTable::decref(_object*) const', 'PyInterpreter.cpp', 0),
    ('c10::TensorImpl::decref_pyobject() const', '??', 0),
]
FREE_ENGINE_MIDDLES = [
    [('torch::autograd::(anonymous namespace)::AccumulateGrad_apply_impl(std::vector<at::Tensor, '
      'std::allocator<at::Tensor> >&&, at::Tensor&, at::Tensor const&)', 'accumulate_grad.cpp', 0),
     ('torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)', '??', 0),
     ('torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)', '', 0)],
    [('std::vector<at::Tensor, std::allocator<at::Tensor> >::~vector()', '', 0)],
    [('torch::autograd::SavedVariable::reset_data()', 'saved_variable.cpp', 0),
     ('torch::autograd::generated::MmBackward0::release_variables()', 'Functions.h', 0),
     ('torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)', '', 0)],
]
FREE_ENGINE_TAIL = [
    ('torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, '
     'torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)', '??', 0),
    ('torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)', '??', 0),
    ('torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)', '??', 0),
    ('torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> '
     'const&, bool)', '', 0),
    ('std::error_code::default_error_condition() const', '??', 0),
    ('start_thread', './nptl/pthread_create.c', 442),
    ('__clone3', './misc/../sysdeps/unix/sysv/linux/x86_64/clone3.S', 81),
]
EMPTY_CACHE_CPP = [
    ('c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_block('
     'c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*, '
     'c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::ExpandableSegment*)', 'CUDACachingAllocator.cpp', 0),
    ('c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_blocks('
     'c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::BlockPool&, c10::cuda::MempoolId_t)', '', 0),
    ('c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_cached_blocks('
     'c10::cuda::MempoolId_t)', '', 0),
    ('c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache(c10::cuda::MempoolId_t)', '', 0),
    ('THCPModule_emptyCache(_object*, _object*)', 'Module.cpp', 0),
]
EMPTY_CACHE_PY = [
    ('empty_cache', '/usr/local/lib/python3.12/dist-packages/torch/cuda/memory.py', 224),
    ('aggressive_empty_cache', '/workspace/verl/verl/utils/memory_utils.py', 64),
]

# Dispatcher frames with long demangled names (>= 256 UTF-8 bytes: pickled as BINUNICODE).
_ES_ARGS = ('c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, '
            'std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>')
_TC_ARGS = ('at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, '
            'std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>')
LONG_DISPATCH = [
    ('c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<'
     'c10::CompileTimeFunctionPointer<at::Tensor (%s), &at::(anonymous namespace)::(anonymous namespace)::'
     'wrapper_CUDA__empty_strided>, at::Tensor, c10::guts::typelist::typelist<%s> >, at::Tensor (%s)>::call('
     'c10::OperatorKernel*, c10::DispatchKeySet, %s)' % (_ES_ARGS, _ES_ARGS, _ES_ARGS, _ES_ARGS),
     'RegisterCUDA_0.cpp', 0),
    ('c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<'
     'c10::CompileTimeFunctionPointer<at::Tensor (c10::DispatchKeySet, %s), &at::(anonymous namespace)::'
     '_to_copy>, at::Tensor, c10::guts::typelist::typelist<c10::DispatchKeySet, %s> >, at::Tensor ('
     'c10::DispatchKeySet, %s)>::call(c10::OperatorKernel*, c10::DispatchKeySet, %s)'
     % (_TC_ARGS, _TC_ARGS, _TC_ARGS, _TC_ARGS), 'RegisterBackendSelect.cpp', 0),
    ('c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<'
     'c10::CompileTimeFunctionPointer<at::Tensor (c10::DispatchKeySet, %s), &torch::autograd::VariableType::'
     '(anonymous namespace)::_to_copy>, at::Tensor, c10::guts::typelist::typelist<c10::DispatchKeySet, %s> >, '
     'at::Tensor (c10::DispatchKeySet, %s)>::call(c10::OperatorKernel*, c10::DispatchKeySet, %s)'
     % (_TC_ARGS, _TC_ARGS, _TC_ARGS, _TC_ARGS), 'VariableType_0.cpp', 0),
]

PY_MAIN_TAIL = ['PyEval_EvalCode', 'run_mod', 'pyrun_file', '_PyRun_SimpleFileObject',
                '_PyRun_AnyFileObject', 'pymain_run_file_obj', 'Py_BytesMain',
                '__libc_start_call_main', '__libc_start_main_impl', '_start']
EVAL_GLUE = ['_PyFunction_Vectorcall', '_PyObject_Call', 'PyObject_Call', 'cfunction_call',
             'slot_tp_call', 'method_vectorcall_VARARGS_KEYWORDS', 'partial_call', 'type_call',
             '_PyEval_EvalFrame']

# Role and requested-size model per frames.json stack (h=4096, TP=2, bf16, vocab 151936).
#   kind 'tok': bytes per token (size follows the micro-batch token count)
#   kind 'fix': fixed bytes
ROLES = {
    'mcore_pp_recv_prev_1f1b_steady': ('saved', 'tok', 8192),
    'mcore_pp_recv_prev_warmup': ('saved', 'tok', 8192),
    'mcore_pp_recv_next_grad': ('bwd', 'tok', 8192),
    'mcore_qkv_activation': ('saved', 'tok', 12288),
    'mcore_core_attention': ('saved', 'tok', 4096),
    'mcore_mlp_fc1': ('saved', 'tok', 28672),
    'mcore_recompute_layer_forward': ('temp', 'tok', 8192),
    'mcore_recompute_in_backward': ('bwd', 'tok', 12288),
    'mcore_output_layer_logits': ('logits', 'tok', 151936),
    'mcore_logprobs_last_stage': ('kept', 'tok', 4),
    'mcore_loss_func': ('loss', 'tok', 4),
    'mcore_backward_engine_thread': ('bwd', 'tok', 8192),
    'mcore_te_backward_dgrad': ('bwd', 'tok', 8192),
    'mcore_grad_buffer_init': ('persistent', 'fix', 256 * MiB),
    'mcore_optimizer_step': ('step', 'fix', 48 * MiB),
    'optimizer_state_lazy_init': ('lazy', 'fix', 64 * MiB),
    'fsdp2_all_gather_unshard': ('comm', 'fix', 96 * MiB),
    'fsdp2_all_gather_copy_out': ('saved', 'fix', 48 * MiB),
    'fsdp2_reduce_scatter_post_backward': ('comm', 'fix', 96 * MiB),
    'hf_mlp_activation': ('saved', 'tok', 24576),
    'hf_lm_head_logits': ('logits', 'tok', 303872),
    'fsdp_temperature_scaling_copy': ('logits', 'tok', 303872),
    'fsdp_logprobs': ('kept', 'tok', 4),
    'fsdp_logprobs_forward_only': ('kept', 'tok', 4),
    'fsdp_backward_main_thread_entry': ('bwd', 'fix', 2 * MiB),
    'vllm_weight_sync_bucket': ('sync', 'fix', 512 * MiB),
}
DEV0_PREFIXES = ('mcore_', 'optimizer_state_lazy_init', 'vllm_')
DEV1_PREFIXES = ('fsdp', 'hf_', 'optimizer_state_lazy_init', 'vllm_')

MAX_TOKENS = 8192


class Site:
    """An allocation site: one alloc stack plus its size model and role."""
    __slots__ = ('base', 'role', 'stack', 'kind', 'per', 'slot', 'stream', 'free_stacks', 'cls')

    def __init__(self, base, role, stack, kind, per, stream, free_stacks):
        self.base, self.role, self.stack = base, role, stack
        self.kind, self.per, self.stream = kind, per, stream
        self.free_stacks = free_stacks
        max_req = per * MAX_TOKENS if kind == 'tok' else per
        self.slot = round_up(max(max_req, 1), 512)
        self.cls = None


class StackPool:
    def __init__(self, fj, rng, n_stacks, devices):
        self.fj = fj
        self.rng = rng
        self.ft = FrameTable()
        self.stacks = []          # every distinct stack (alloc and free), content-unique
        self.seen = set()
        self.cpy = {k: v for k, v in fj['cpython_frames'].items()}
        self.sites = {d: [] for d in range(devices)}
        self.empty_cache_stack = None
        self._build(n_stacks, devices)

    # ---- helpers
    def cf(self, name):
        return self.ft.of(self.cpy[name])

    def raw(self, t, variant=0):
        return self.ft.get(t[0], t[1], t[2], variant)

    def add(self, frames):
        key = tuple(id(f) for f in frames)
        if key in self.seen:
            return None
        self.seen.add(key)
        self.stacks.append(frames)
        return frames

    def split_base(self, st):
        py = st['stacks_python']
        allsimp = st['stacks_all_simplified']
        n_py = len(py)
        cpp = allsimp[:len(allsimp) - n_py] if n_py else list(allsimp)
        py_all = allsimp[len(allsimp) - n_py:] if n_py else []
        return cpp, py_all

    def python_part(self, py, shift_lines, rng):
        """Python frames of a stack, innermost first, with the innermost lines moved."""
        out = []
        for i, fj in enumerate(py):
            line = fj['line']
            if i < len(shift_lines):
                line += shift_lines[i]
            out.append(self.ft.get(fj['name'], fj['filename'], line))
        return out

    def interleave(self, pyframes, rng, p_eval, p_glue):
        out = []
        for f in pyframes:
            out.append(f)
            if rng.random() < p_eval:
                out.append(self.cf('_PyEval_EvalFrameDefault'))
                if rng.random() < p_glue:
                    out.append(self.cf(rng.choice(EVAL_GLUE)))
        return out

    def fit(self, cpp, mixed_py, tail, target):
        """Trim eval frames, then middle Python frames, so len <= target (>= 20 kept)."""
        total = len(cpp) + len(mixed_py) + len(tail)
        if total <= target:
            return cpp + mixed_py + tail
        evalf = self.cf('_PyEval_EvalFrameDefault')
        glue = set(id(self.cf(n)) for n in EVAL_GLUE)
        py = list(mixed_py)
        # drop interleaved CPython frames from the outer half first
        i = len(py) - 1
        while len(cpp) + len(py) + len(tail) > target and i > len(py) // 3:
            if py[i] is evalf or id(py[i]) in glue:
                del py[i]
            i -= 1
        # then drop Python frames from the middle (keep the innermost 8 and outermost 10)
        while len(cpp) + len(py) + len(tail) > target and len(py) > 18:
            del py[len(py) // 2]
        return cpp + py + tail

    # ---- construction
    def _build(self, n_stacks, devices):
        fj, rng = self.fj, self.rng
        bases = fj['stacks']
        names = sorted(bases)
        cpp_prefixes = []
        splits = {}
        for name in names:
            cpp, py = self.split_base(bases[name])
            splits[name] = (cpp, py)
            if cpp:
                key = tuple((f['name'], f['filename'], f['line']) for f in cpp)
                if key not in [tuple((f['name'], f['filename'], f['line']) for f in c) for c in cpp_prefixes]:
                    cpp_prefixes.append(cpp)

        # free stacks: allocator free path + Python (or autograd engine thread) context
        n_free = max(50, n_stacks // 4)
        free_stacks = []
        head = [self.ft.of(fj['cpp_frames'][k]) for k in ('unwind', 'gather', 'gather_with_cpp')]
        attempts = 0
        while len(free_stacks) < n_free and attempts < n_free * 20:
            attempts += 1
            name = rng.choice(names)
            cpp, py = splits[name]
            common = head + [self.raw(t) for t in FREE_CPP_COMMON]
            if not py or rng.random() < 0.3:
                mid = rng.choice(FREE_ENGINE_MIDDLES)
                st = common + [self.raw(t) for t in FREE_CPP_ENGINE] + [self.raw(t) for t in mid] \
                    + [self.raw(t) for t in FREE_ENGINE_TAIL]
                if py and rng.random() < 0.5:
                    # a Python autograd Function.backward deleting a saved tensor
                    st = st[:len(common) + 2] + self.python_part(py[:3], [rng.randint(-6, 6)], rng) + \
                        [self.cf('_PyEval_EvalFrameDefault')] + st[len(common) + 2:]
            else:
                start = rng.randint(0, min(4, len(py) - 1))
                pyf = self.python_part(py[start:], [rng.randint(-20, 20)], rng)
                cpp_tail = [self.raw(t) for t in FREE_CPP_PYTHON] + \
                    [self.raw(t) for t in rng.choice(FREE_CPP_PY_TAILS)]
                tail = [self.cf(n) for n in PY_MAIN_TAIL] if py[-1]['name'] == '<module>' else []
                target = rng.randint(20, 60)
                st = self.fit(common + cpp_tail, self.interleave(pyf, rng, 0.6, 0.25), tail, target)
            st = self.add(st)
            if st is not None:
                free_stacks.append(st)
        self.free_stacks = free_stacks

        ec = head + [self.raw(t) for t in EMPTY_CACHE_CPP] + [self.ft.get(*t) for t in EMPTY_CACHE_PY]
        self.empty_cache_stack = self.add(ec) or ec

        # alloc stacks: variants of each base (C++ prefix from any base, moved lines,
        # CPython frames interleaved), 60 % stacks='all' style, 40 % pure Python
        per_dev_names = []
        for d in range(devices):
            if devices == 1:
                per_dev_names.append(list(names))
            else:
                pre = DEV0_PREFIXES if d == 0 else DEV1_PREFIXES
                per_dev_names.append([n for n in names if n.startswith(pre)])
        n_alloc = n_stacks
        made = 0
        attempts = 0
        while made < n_alloc and attempts < n_alloc * 20:
            attempts += 1
            d = made % devices
            name = rng.choice(per_dev_names[d])
            cpp, py = splits[name]
            shifts = [rng.choice((0, 0, 0, 1, 2, 3, 5, 8, -2, -4, 11, 17)) for _ in range(rng.randint(1, 3))]
            pyf = self.python_part(py, shifts, rng) if py else []
            if rng.random() < 0.6 or not py:
                pre = cpp if (rng.random() < 0.5 or not cpp_prefixes) else rng.choice(cpp_prefixes)
                if not pre:
                    pre = rng.choice(cpp_prefixes)
                # C++ frames: a second object with the same symbol now and then
                pre_f = [self.ft.of(f, 1 if (f['line'] == 0 and rng.random() < 0.1) else 0) for f in pre]
                if rng.random() < 0.3 and len(pre_f) > 8:
                    pre_f.insert(rng.randint(7, len(pre_f) - 1), self.raw(rng.choice(LONG_DISPATCH)))
                tail = [self.cf(n) for n in PY_MAIN_TAIL] if (py and py[-1]['name'] == '<module>') else []
                glue = [self.cf('cfunction_call')] if py and rng.random() < 0.5 else []
                target = rng.randint(20, 60)
                st = self.fit(pre_f + glue, self.interleave(pyf, rng, 0.5, 0.3), tail, target)
            else:
                st = pyf
            st = self.add(st)
            if st is None:
                continue
            made += 1
            role, kind, per = ROLES.get(name, ('temp', 'fix', 1 * MiB))
            r = rng.random()
            if role in ('persistent', 'lazy', 'sync', 'step', 'comm') or kind == 'fix':
                per = round_up(int(per * rng.choice((0.25, 0.5, 1, 1, 1.5, 2))), 512)
            elif r < 0.35:
                # small tensors whose byte count is not a multiple of 512: biases, norms,
                # int32 index / position tensors, fp32 scalars per token
                kind = rng.choice(('fix', 'fix', 'tok'))
                per = rng.choice((4, 2, 8)) * (rng.randint(1, 60000) if kind == 'fix' else rng.randint(1, 16))
            elif r < 0.6:
                per = max(2, int(per * rng.choice((0.5, 0.75, 1.25, 2, 3))))
            stream = COMM_STREAM if role == 'comm' or name.startswith('fsdp2_') else 0
            fs = [rng.choice(free_stacks) for _ in range(3)]
            self.sites[d].append(Site(name, role, st, kind, per, stream, fs))


# --------------------------------------------------------------------------------------
# Allocator simulation


class Segment:
    __slots__ = ('addr', 'total', 'stream', 'small', 'cls', 'free', 'requested', 'nslots', 'frames', 'device')

    def __init__(self, addr, total, stream, small, cls, nslots, frames, device):
        self.addr, self.total, self.stream, self.small = addr, total, stream, small
        self.cls, self.nslots, self.frames, self.device = cls, nslots, frames, device
        self.free = list(range(nslots - 1, -1, -1))   # pop() gives the lowest slot first
        self.requested = {}                           # slot -> [req, frames, state]


class SizeClass:
    __slots__ = ('slot', 'stream', 'segs', 'avail', 'seg_total', 'nslots', 'small')

    def __init__(self, slot, stream):
        self.slot, self.stream = slot, stream
        self.small = slot <= SMALL_SIZE
        if self.small:
            self.seg_total = SMALL_SEGMENT
        elif slot <= MIN_LARGE_ALLOC:
            self.seg_total = LARGE_SEGMENT
        else:
            self.seg_total = round_up(slot, 2 * MiB)
        self.nslots = self.seg_total // slot
        self.segs = []
        self.avail = []


class Device:
    def __init__(self, index, sim):
        self.index = index
        self.sim = sim
        self.trace = []
        self.classes = {}
        self.segments = []
        self.next_addr = 0x7300_0000_0000 + index * 0x0400_0000_0000
        self.free_ranges = {}
        self.t = sim.start_us + index * 37
        self.pending = []          # cross-stream frees: [due_event_count, handle, frames]
        self.n_seg_alloc = 0
        self.n_seg_free = 0

    def cls_for(self, site):
        key = (site.slot, site.stream)
        c = self.classes.get(key)
        if c is None:
            c = self.classes[key] = SizeClass(site.slot, site.stream)
        return c

    def tick(self):
        sim = self.sim
        sim.tix = (sim.tix + 1) & 4095
        self.t += sim.incs[sim.tix]
        return self.t

    def new_segment(self, c, frames, emit):
        total = c.seg_total
        rl = self.free_ranges.get(total)
        if rl:
            addr = rl.pop()
        else:
            addr = self.next_addr
            self.next_addr += total + (2 * MiB if self.sim.rng.random() < 0.3 else 0)
        seg = Segment(addr, total, c.stream, c.small, c, c.nslots, frames, self.index)
        c.segs.append(seg)
        c.avail.append(seg)
        self.segments.append(seg)
        if emit:
            self.n_seg_alloc += 1
            self.trace.append({'action': SEG_ALLOC, 'addr': addr, 'size': total, 'stream': c.stream,
                               'time_us': self.tick(), 'compile_context': fresh_na(), 'user_metadata': EMPTY_STR,
                               'frames': frames})
        return seg

    def alloc(self, site, tokens, emit=True):
        c = site.cls
        if c is None:
            c = site.cls = self.cls_for(site)
        req = site.per * tokens if site.kind == 'tok' else site.per
        if not site.stack:
            frames = self.sim.empty_frames      # allocated before recording: no context
        else:
            frames = list(site.stack) if self.sim.per_traceback else site.stack
        if not c.avail:
            self.new_segment(c, frames if emit else self.sim.empty_frames, emit)
        seg = c.avail[-1]
        i = seg.free.pop()
        if not seg.free:
            c.avail.pop()
        addr = seg.addr + i * c.slot
        rec = [req, frames, ACTIVE]
        seg.requested[i] = rec
        if emit:
            self.trace.append({'action': ALLOC, 'addr': addr, 'size': req, 'stream': c.stream,
                               'time_us': self.tick(), 'compile_context': fresh_na(), 'user_metadata': EMPTY_STR,
                               'frames': frames})
            if self.pending and self.pending[0][0] <= len(self.trace):
                self.complete_pending()
        return (seg, i, addr, req, site)

    def free(self, h, cross_stream=False):
        seg, i, addr, req, site = h
        st = site.free_stacks[self.sim.rng_free() % 3]
        frames = list(st) if self.sim.per_traceback else st
        stream = seg.stream
        tr = self.trace
        tr.append({'action': FREE_REQ, 'addr': addr, 'size': req, 'stream': stream,
                   'time_us': self.tick(), 'compile_context': fresh_na(), 'user_metadata': EMPTY_STR,
                   'frames': frames})
        if cross_stream:
            seg.requested[i][2] = PENDING
            self.pending.append((len(tr) + 40 + (len(tr) % 200), h, frames))
            return
        tr.append({'action': FREE_DONE, 'addr': addr, 'size': req, 'stream': stream,
                   'time_us': self.tick(), 'compile_context': fresh_na(), 'user_metadata': EMPTY_STR,
                   'frames': frames})
        self.release(seg, i)

    def complete_pending(self, all_=False):
        n = len(self.trace)
        while self.pending and (all_ or self.pending[0][0] <= n):
            _, h, frames = self.pending.pop(0)
            seg, i, addr, req, site = h
            self.trace.append({'action': FREE_DONE, 'addr': addr, 'size': req, 'stream': seg.stream,
                               'time_us': self.tick(), 'compile_context': fresh_na(), 'user_metadata': EMPTY_STR,
                               'frames': frames})
            self.release(seg, i)

    def release(self, seg, i):
        del seg.requested[i]
        seg.free.append(i)
        if len(seg.free) == 1:
            seg.cls.avail.append(seg)

    def empty_cache(self):
        frames = list(self.sim.pool.empty_cache_stack) if self.sim.per_traceback else self.sim.pool.empty_cache_stack
        keep = []
        for seg in self.segments:
            if not seg.requested:
                c = seg.cls
                c.segs.remove(seg)
                if seg in c.avail:
                    c.avail.remove(seg)
                self.free_ranges.setdefault(seg.total, []).append(seg.addr)
                self.n_seg_free += 1
                self.trace.append({'action': SEG_FREE, 'addr': seg.addr, 'size': seg.total, 'stream': seg.stream,
                                   'time_us': self.tick(), 'compile_context': fresh_na(), 'user_metadata': EMPTY_STR,
                                   'frames': frames})
            else:
                keep.append(seg)
        self.segments = keep

    def final_segments(self):
        out = []
        empty = self.sim.empty_frames
        for seg in sorted(self.segments, key=lambda s: s.addr):
            slot = seg.cls.slot
            blocks = []
            alloc_sz = active_sz = req_sz = 0
            pos = 0                      # byte offset covered so far
            for i in sorted(seg.requested):
                req, frames, state = seg.requested[i]
                start = i * slot
                if start > pos:
                    blocks.append({'address': seg.addr + pos, 'size': start - pos,
                                   'requested_size': 0 if (pos // 512) % 3 else start - pos,
                                   'state': INACTIVE, 'frames': empty})
                blocks.append({'address': seg.addr + start, 'size': slot, 'requested_size': req,
                               'state': state, 'frames': frames})
                active_sz += slot
                if state == ACTIVE:
                    alloc_sz += slot
                    req_sz += req
                pos = start + slot
            if pos < seg.total:
                blocks.append({'address': seg.addr + pos, 'size': seg.total - pos,
                               'requested_size': 0 if (pos // 512) % 3 else seg.total - pos,
                               'state': INACTIVE, 'frames': empty})
            d = {'device': self.index, 'address': seg.addr, 'total_size': seg.total,
                 'allocated_size': alloc_sz, 'active_size': active_sz, 'requested_size': req_sz,
                 'stream': seg.stream, 'segment_type': SMALL if seg.small else LARGE,
                 'segment_pool_id': tuple([0, 0]), 'is_expandable': False}
            if seg.frames:
                d['blocks'] = blocks          # py_symbolize assigns frames last
                d['frames'] = seg.frames
            else:
                d['frames'] = seg.frames
                d['blocks'] = blocks
            out.append(d)
        return out


class Workload:
    """Drives one device through mini-batches of 1F1B micro-batches."""

    def __init__(self, dev, sites, rng, sim, micro_per_mini=4, layers=6, pp_depth=2):
        self.dev, self.rng, self.sim = dev, rng, sim
        self.m = micro_per_mini
        self.layers = layers
        self.pp = pp_depth
        by = {}
        for s in sites:
            by.setdefault(s.role, []).append(s)
        self.by = by
        self.fwd = by.get('saved', []) + by.get('temp', [])
        self.bwd = by.get('bwd', []) + by.get('temp', [])
        self.loss = (by.get('loss', []) + by.get('temp', [])[:4]) or by.get('kept', []) or self.fwd
        self.bwd = self.bwd or self.fwd
        self.logits = by.get('logits', [])
        self.kept_sites = by.get('kept', [])
        self.comm = by.get('comm', [])
        self.leak_site = (by.get('kept') or by.get('loss') or sites)[0]
        self.micro = 0
        self.mini = 0
        self.leaked = []
        self.ghost_frees = []
        self.lazy_done = False

    def prelive(self):
        """Blocks alive before recording started: ghosts, and some freed later (unmatched)."""
        dev, rng = self.dev, self.rng
        # parameters and buffers allocated before recording began: no stack, never freed
        small = [2 * h for h in (1024, 2048, 4096, 5120, 8192, 14336, 28672)] + \
                [4 * h for h in (1024, 4096, 8192, 14336)] + [rng.randint(1, 20000) * 4 for _ in range(30)]
        large = [round_up(int(a * b * 2), 512) for a in (1024, 2048, 4096) for b in
                 (640, 1024, 1536, 2048, 3072, 4096)] + \
                [rng.randint(2 * MiB, 40 * MiB) // 4 * 4 for _ in range(20)]
        param_sites = {}
        for _ in range(self.sim.n_params):
            size = rng.choice(small) if rng.random() < 0.4 else rng.choice(large)
            site = param_sites.get(size)
            if site is None:
                site = param_sites[size] = Site('param', 'persistent', [], 'fix', size, 0, [])
            dev.alloc(site, 0, emit=False)
        persistent = self.by.get('persistent', [])
        for s in persistent[:4]:                 # e.g. the DDP grad buffers
            dev.alloc(s, MAX_TOKENS, emit=False)
        pool = self.fwd or list(self.by.values())[0]
        for _ in range(24):
            h = dev.alloc(rng.choice(pool), rng.randint(1024, MAX_TOKENS), emit=False)
            if rng.random() < 0.5:
                self.ghost_frees.append(h)

    def annotate(self, stage, name):
        self.sim.annotations.append({'stage': stage, 'name': name, 'device': self.dev.index,
                                     'time_us': self.dev.tick()})

    def temporaries(self, sites, n, tokens, queue):
        rng, dev = self.rng, self.dev
        for _ in range(n):
            queue.append(dev.alloc(rng.choice(sites), tokens))
            while len(queue) > rng.randint(0, 3):
                dev.free(queue.pop(0))

    def micro_batch(self, saved_by_mb, kept):
        dev, rng = self.dev, self.rng
        j = self.micro
        self.micro += 1
        tokens = rng.randint(MAX_TOKENS // 4, MAX_TOKENS)
        dev.t += rng.randint(200, 2000)
        self.annotate('START', 'micro_batch%d' % j)
        q = []
        saved = []
        for _layer in range(self.layers):
            if self.comm:
                h = dev.alloc(rng.choice(self.comm), tokens)
                q.append(h)
            for _ in range(4):
                s = rng.choice(self.fwd)
                h = dev.alloc(s, tokens)
                if s.role == 'saved':
                    saved.append(h)
                else:
                    q.append(h)
                while len(q) > rng.randint(0, 3):
                    hh = q.pop(0)
                    dev.free(hh, cross_stream=hh[4].stream != 0 and rng.random() < 0.05)
        if self.logits:
            lg = dev.alloc(rng.choice(self.logits), tokens)
            if self.kept_sites:
                kept.append(dev.alloc(rng.choice(self.kept_sites), tokens))
            self.temporaries(self.loss, 3, tokens, q)
            dev.free(lg)
        # the leak: a small tensor per micro-batch that is never freed
        self.leaked.append(dev.alloc(self.leak_site, tokens))
        while q:
            dev.free(q.pop(0))
        saved_by_mb.append(saved)
        if len(saved_by_mb) > self.pp:
            self.backward(saved_by_mb.pop(0), tokens)
        if self.ghost_frees:
            dev.free(self.ghost_frees.pop())
        self.annotate('END', 'micro_batch%d' % j)

    def backward(self, saved, tokens):
        dev, rng = self.dev, self.rng
        q = []
        for h in reversed(saved):
            if self.bwd:
                self.temporaries(self.bwd, rng.randint(1, 2), tokens, q)
            dev.free(h)
        while q:
            dev.free(q.pop(0))

    def mini_batch(self):
        dev, rng = self.dev, self.rng
        i = self.mini
        self.mini += 1
        self.annotate('START', 'mini_batch%d' % i)
        saved_by_mb, kept = [], []
        for _ in range(self.m):
            self.micro_batch(saved_by_mb, kept)
        while saved_by_mb:                       # 1F1B cooldown
            self.backward(saved_by_mb.pop(0), MAX_TOKENS // 2)
        for h in kept:                           # model outputs kept for the whole mini-batch
            dev.free(h)
        if not self.lazy_done:                   # Adam state created on the first step
            self.lazy_done = True
            for s in self.by.get('lazy', [])[:16]:
                dev.alloc(s, MAX_TOKENS)
        q = []
        if self.by.get('step'):
            self.temporaries(self.by['step'], 6, MAX_TOKENS, q)
        while q:
            dev.free(q.pop(0))
        if self.by.get('sync') and i % 4 == 3:   # weight sync to the rollout engine
            for _ in range(rng.randint(1, 3)):
                dev.free(dev.alloc(rng.choice(self.by['sync']), MAX_TOKENS))
        if i % 64 == 31 and self.sim.allow_empty_cache:
            dev.empty_cache()
        self.annotate('END', 'mini_batch%d' % i)


class Sim:
    def __init__(self, args, fj):
        self.args = args
        self.rng = random.Random(args.seed)
        self.per_traceback = args.stack_sharing == 'traceback'
        self.start_us = DEFAULT_START_US
        r = random.Random(args.seed + 1)
        self.incs = [r.choice((1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 377)) for _ in range(4096)]
        self.tix = 0
        self._fc = 0
        self.empty_frames = []
        self.annotations = []
        self.allow_empty_cache = True
        self.n_params = args.params
        self.pool = StackPool(fj, self.rng, args.stacks, args.devices)
        self.devices = [Device(d, self) for d in range(args.devices)]
        self.workloads = []
        for d, dev in enumerate(self.devices):
            w = Workload(dev, self.pool.sites[d], random.Random(args.seed * 1000 + d), self)
            w.prelive()
            self.workloads.append(w)

    def rng_free(self):
        self._fc = (self._fc * 1103515245 + 12345) & 0x7fffffff
        return self._fc >> 16

    def n_events(self):
        return sum(len(d.trace) for d in self.devices)

    def step(self):
        """One round: a mini-batch on every device."""
        for d, w in enumerate(self.workloads):
            w.mini_batch()

    def finish(self):
        """End of recording: a few cross-stream frees still waiting for their stream."""
        for w in self.workloads:
            sites = w.comm or w.fwd
            for _ in range(2):
                h = w.dev.alloc(w.rng.choice(sites), MAX_TOKENS // 2)
                w.dev.free(h, cross_stream=True)

    def snapshot(self):
        segs = []
        for dev in self.devices:
            segs.extend(dev.final_segments())
        ann = sorted(self.annotations, key=lambda a: a['time_us'])
        if self.args.no_annotations:
            ann = []
        return {
            'segments': segs,
            'device_traces': [dev.trace for dev in self.devices],
            'allocator_settings': {
                'PYTORCH_CUDA_ALLOC_CONF': '', 'max_split_size': -1,
                'garbage_collection_threshold': 0.0, 'expandable_segments': False,
                'pinned_num_register_threads': 1, 'release_lock_on_cudamalloc': False,
                'pinned_use_cuda_host_register': False, 'graph_capture_record_stream_reuse': False,
                'roundup_power2_divisions': {str(1 << k): 0 for k in range(16)},
            },
            'external_annotations': ann,
        }


# --------------------------------------------------------------------------------------


def default_frames_json():
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.environ.get('LEAKSCOPE_FRAMES_JSON', ''),
              os.path.join(here, 'frames.json'),
              os.path.join(here, '..', '..', 'shared', 'frames.json'),
              os.path.join(here, '..', 'shared', 'frames.json')):
        if p and os.path.exists(p):
            return os.path.normpath(p)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--size-mb', type=float, default=520,
                    help='minimum output size in MB (10^6 bytes); default 520')
    ap.add_argument('-o', '--output', required=True, help='output pickle path')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--devices', type=int, choices=(1, 2), default=2)
    ap.add_argument('--stacks', type=int, default=3000, help='distinct alloc stacks (default 3000)')
    ap.add_argument('--params', type=int, default=1500,
                    help='parameter tensors per device alive (without stacks) before recording began')
    ap.add_argument('--stack-sharing', choices=('traceback', 'content'), default='traceback',
                    help="'traceback' (default): one frames list per captured traceback, as "
                         "py_symbolize does; 'content': identical stacks are one list object")
    ap.add_argument('--frames-json', default=None, help='path to frames.json (default: benches/frames.json, a copy of shared/frames.json)')
    ap.add_argument('--meta', default=None, help='write a JSON summary here (default: OUTPUT.meta.json)')
    ap.add_argument('--no-annotations', action='store_true',
                    help='leave external_annotations empty (a plain script: windows must be '
                         'found from functions and call sites)')
    args = ap.parse_args()

    fpath = args.frames_json or default_frames_json()
    if not fpath or not os.path.exists(fpath):
        sys.exit('gen_big_snapshot: frames.json not found; pass --frames-json PATH')
    with open(fpath) as f:
        fj = json.load(f)

    t0 = time.time()
    gc.disable()                                # millions of acyclic containers
    target = int(args.size_mb * 1e6)
    sim = Sim(args, fj)

    # Calibrate bytes per event from two pickles of the partial snapshot (the whole dict:
    # segments are pickled first, so the trace's key strings get LONG_BINGET references),
    # then generate up to the estimate.
    def snapshot_bytes():
        return len(pickle.dumps(sim.snapshot(), protocol=4))

    cal = []
    mark2 = int(min(200_000, max(5_000, target / 200 / 3)))
    for mark in (mark2 * 3 // 10, mark2):
        while sim.n_events() < mark:
            sim.step()
        cal.append((sim.n_events(), snapshot_bytes()))
    (e1, s1), (e2, s2) = cal
    per_event = (s2 - s1) / max(1, e2 - e1)

    def estimate():
        return s2 + (sim.n_events() - e2) * per_event

    goal = target * 1.005
    while estimate() < goal:
        # no empty_cache near the end, so the final segments list is well populated
        sim.allow_empty_cache = estimate() < 0.8 * goal
        sim.step()
    t_gen = time.time() - t0

    out = args.output
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + '.tmp'
    while True:
        sim.finish()
        snap = sim.snapshot()
        with open(tmp, 'wb') as f:
            pickle.dump(snap, f, protocol=4)
        size = os.path.getsize(tmp)
        if size >= target:
            break
        # short (the estimate was optimistic): generate more and dump again
        need = (target * 1.01 - size) / per_event
        n0 = sim.n_events()
        while sim.n_events() < n0 + need:
            sim.step()
        del snap
    os.replace(tmp, out)
    t_all = time.time() - t0

    n_ev = [len(d.trace) for d in sim.devices]
    uniq_stacks = set()
    list_objs = set()
    for d in sim.devices:
        for e in d.trace:
            fr = e['frames']
            list_objs.add(id(fr))
            uniq_stacks.add(tuple(map(id, fr)))
    frames_used = set()
    for k in uniq_stacks:
        frames_used.update(k)
    n_blocks = sum(len(s['blocks']) for s in snap['segments'])
    actions = {}
    for d in sim.devices:
        for e in d.trace:
            actions[e['action']] = actions.get(e['action'], 0) + 1
    meta = {
        'file': out, 'bytes': size, 'size_mb_requested': args.size_mb, 'seed': args.seed,
        'devices': args.devices, 'stack_sharing': args.stack_sharing, 'stacks_option': args.stacks,
        'events': sum(n_ev), 'events_per_device': n_ev, 'actions': actions,
        'unique_stacks': len(uniq_stacks), 'frames_list_objects': len(list_objs),
        'unique_frame_objects': len(frames_used),
        'unique_frame_contents': len(set((f['name'], f['filename'], f['line']) for f in sim.pool.ft.table.values())),
        'segments': len(snap['segments']), 'blocks': n_blocks,
        'external_annotations': len(snap['external_annotations']),
        'generate_s': round(t_gen, 1), 'total_s': round(t_all, 1),
        'generator': 'benches/gen_big_snapshot.py',
    }
    with open(args.meta or out + '.meta.json', 'w') as f:
        json.dump(meta, f, indent=1)
    print('wrote %s: %d bytes (%.1f MB, %.1f MiB)' % (out, size, size / 1e6, size / MiB))
    print('trace events: %d (per device %s); actions %s' % (sum(n_ev), n_ev, actions))
    print('unique stacks: %d (frames list objects: %d); frame dicts: %d objects, %d distinct contents'
          % (meta['unique_stacks'], meta['frames_list_objects'], meta['unique_frame_objects'],
             meta['unique_frame_contents']))
    print('segments: %d, blocks: %d, external_annotations: %d'
          % (meta['segments'], n_blocks, meta['external_annotations']))
    print('time: %.1f s generating, %.1f s total' % (t_gen, t_all))


if __name__ == '__main__':
    main()
