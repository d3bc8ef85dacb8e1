"""leakscope's exceptions: one base, ``LeakscopeError``, and a class per kind of failure
the library names (``leakscope.ErrorKind``: its ``kind`` attribute is that word). Each
also derives from the built-in exception code already catches (``ValueError`` for bad
input and bad arguments, ``OSError`` for files that cannot be read or written)."""

from __future__ import annotations


class LeakscopeError(Exception):
    """Base of every error leakscope raises; ``kind`` says which (``truncated``,
    ``usage``, ...), as the ``error_kind`` of a run's rows does."""

    kind = "error"

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class SnapshotError(LeakscopeError, ValueError):
    """A file or object that is not a readable memory snapshot (not one, cut short,
    corrupt, unsafe, too large): the message names the file, the byte offset or trace
    entry, and what was expected."""

    kind = "corrupt"
    kinds = ("not_a_snapshot", "truncated", "corrupt", "unsafe", "too_large")


class UsageError(LeakscopeError, ValueError):
    """A request that does not fit its input: an option's value, a device, point or
    window the file does not hold, an output that names an input."""

    kind = "usage"
    kinds = ("usage",)


class ReadError(LeakscopeError, OSError):
    """An input that cannot be opened or read (missing, a directory, permissions)."""

    kind = "io"
    kinds = ("io",)


class WriteError(LeakscopeError, OSError):
    """An output that cannot be written."""

    kind = "write"
    kinds = ("write",)


_CLASSES = (LeakscopeError, SnapshotError, UsageError, ReadError, WriteError)
_BY_KIND = {k: c for c in _CLASSES for k in getattr(c, "kinds", ())}
for _c in _CLASSES:
    _c.__module__ = "leakscope"


def error(kind: str, message: str) -> LeakscopeError:
    """The exception for a library error of ``kind`` (the native layer calls this)."""
    return _BY_KIND.get(kind, LeakscopeError)(message, kind)
