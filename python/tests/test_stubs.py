"""The type stubs of the binding (``_native.pyi``) say what the compiled module takes:
every function and method the module has is in the stubs with the same parameters, in
the same order, with the same defaults, and the stubs name nothing the module lacks."""

import ast
import inspect
from pathlib import Path

from leakscope import _native

# The stubs in the source tree (the installed copy may be older).
STUB = Path(__file__).resolve().parents[1] / "leakscope" / "_native.pyi"


def _stubbed() -> dict:
    """Name (``Class.method`` for methods) -> the stub's parameters ``[(name, default)]``,
    ``default`` the literal's value or ``inspect.Parameter.empty``."""
    out = {}

    def params(f: ast.FunctionDef, method: bool) -> list:
        args = f.args.args[1:] if method else f.args.args
        defaults = [inspect.Parameter.empty] * (len(args) - len(f.args.defaults))
        defaults += [ast.literal_eval(d) for d in f.args.defaults]
        return [(a.arg, d) for a, d in zip(args, defaults)]

    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = params(node, False)
        elif isinstance(node, ast.ClassDef):
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and not any(
                        isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list):
                    out[f"{node.name}.{f.name}"] = params(f, True)
    return out


def _compiled() -> dict:
    """The same for the compiled module, read from its signatures."""
    out = {}

    def params(obj) -> list:
        return [(p.name, p.default) for p in inspect.signature(obj).parameters.values()
                if p.name not in ("self", "$self")]

    for name, obj in vars(_native).items():
        if name.startswith("_"):
            continue
        if inspect.isclass(obj):
            try:  # a class built from Python: its constructor, as the stubs' __init__
                out[f"{name}.__init__"] = params(obj)
            except ValueError:
                pass
            for m, f in vars(obj).items():
                if not m.startswith("_") and callable(f):
                    out[f"{name}.{m}"] = params(f)
        elif callable(obj):
            out[name] = params(obj)
    return out


def test_the_stubs_are_the_compiled_module():
    stubbed, compiled = _stubbed(), _compiled()
    assert sorted(stubbed) == sorted(compiled)
    for name, got in compiled.items():
        want = stubbed[name]
        assert [p for p, _ in got] == [p for p, _ in want], name
        for (p, d), (_, stub_default) in zip(got, want):
            # A default the compiled signature cannot spell is shown as `...`.
            if d is not Ellipsis:
                assert d == stub_default, f"{name}({p}=...)"
