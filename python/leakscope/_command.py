"""A command's keywords, read from the command line's own definitions (``_native.params``):
each Python call takes every option its command takes, with the command's names, defaults
and help, declared once in Rust."""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Callable, Dict, Optional

from . import _native

_TYPES = {"flag": bool, "integer": int, "number": float}


def _default(p: dict) -> Any:
    """A keyword's default as Python writes it (``"20"`` -> ``20``, a flag -> ``False``)."""
    if p["kind"] == "flag":
        return False
    if p["default"] is None:
        return None
    return _TYPES.get(p["kind"], str)(p["default"])


def command(name: str, output: Optional[str] = None) -> Callable[[Callable], Callable]:
    """Gives the decorated function (``f(positional..., **options)``) the keywords of the
    command ``name`` (for ``export``, those ``--{output}`` allows) after its own
    positional parameters: its help starts with the command's description (then the
    function's own notes) and lists them with its signature, a call binds them (an
    unknown keyword is a ``TypeError``) and ``options`` holds every keyword, defaults
    included, as the native layer reads them (unset ones left out, paths as text)."""
    params = _native.params(name, output)

    def wrap(f: Callable) -> Callable:
        own = [p for p in inspect.signature(f).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in own}
        extra = [inspect.Parameter(p["name"], inspect.Parameter.KEYWORD_ONLY,
                                   default=_default(p)) for p in params if p["name"] not in taken]
        sig = inspect.Signature(own + extra)

        @functools.wraps(f)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            mine = [bound.arguments.pop(p.name) for p in own]
            return f(*mine, **_given(bound.arguments))

        call.__signature__ = sig  # type: ignore[attr-defined]
        lines = [f"- ``{p['name']}``: {p['help']}"
                 + (f" (default ``{p['default']}``)" if p["default"] is not None else "")
                 for p in params]
        call.__doc__ = (f"{_native.about(name)} (``leakscope {name}``).\n\n"
                        + inspect.cleandoc(f.__doc__ or "") + f"\n\nKeywords (``leakscope {name}"
                        " --help``):\n\n" + "\n".join(lines) + "\n")
        return call

    return wrap


def _given(options: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in options.items():
        if v is None:
            continue
        out[k] = os.fspath(v) if isinstance(v, os.PathLike) else v
    return out
