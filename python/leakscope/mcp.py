"""``leakscope mcp``: a Model Context Protocol server over stdio, for coding agents.

Its tools are the commands: each calls this package's method or function of the same
name and returns the result's ``to_dict()``, which is what ``leakscope <command> FILE
--json`` prints (as JSON text and as structured content). A tool's arguments are its
Python call's, read from the signature (names, types, defaults), with what the command's
``--help`` says of each; its description is the call's docstring. So ``TOOLS`` below is
the whole list and a new command is one line there. Each file is
loaded once per server and kept while its size and modification time stay the same; a
loaded file is a resource (``leakscope://snapshot/<absolute path>``: its summary).

Needs the MCP SDK (``pip install 'leakscope[mcp]'``). Progress goes to stderr; stdout is
the protocol.

Example (an MCP client's server entry)::

    {"mcpServers": {"leakscope": {"command": "leakscope", "args": ["mcp"]}}}
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import typing
import urllib.parse
from collections import OrderedDict
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from . import _native
from ._errors import LeakscopeError
from ._snapshot import Snapshot, compare, load, ranks

#: The tools: a name and the call it makes. A ``Snapshot`` method's ``self`` is the tool's
#: ``file`` argument; any other argument is the call's own keyword.
TOOLS: Dict[str, Callable[..., Any]] = {
    "summary": Snapshot.summary,
    "top": Snapshot.top,
    "tree": Snapshot.tree,
    "leaks": Snapshot.leaks,
    "windows": Snapshot.windows,
    "oom": Snapshot.oom,
    "segments": Snapshot.segments,
    "timeline": Snapshot.timeline,
    "compare": compare,
    "ranks": ranks,
}

URI_PREFIX = "leakscope://snapshot"
#: The key of the ``_meta`` of each tool result: how many times each file the call used
#: has been loaded by this server (1 while it stays cached).
LOADS_KEY = "leakscope/loads"

#: What the ``file`` of a ``Snapshot`` method's tool is (the command's own positional
#: argument also takes series and directories, which the tools do not).
FILE_DESCRIPTION = ("The snapshot file: pickle, JSON or leakscope cache; plain, .gz or .zst. "
                    "An absolute path, or relative to the server's working directory.")

log = logging.getLogger("leakscope.mcp")

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean",
               type(None): "null"}


def _json_types(hint: Any) -> List[str]:
    """The JSON types of a Python annotation; a path (``os.PathLike``) or a ``Snapshot``
    arrives as its file's name, a string."""
    out: List[str] = []
    for t in typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,):
        if t is Snapshot or t is os.PathLike or typing.get_origin(t) is os.PathLike:
            name = "string"
        elif t in _JSON_TYPES:
            name = _JSON_TYPES[t]
        else:
            raise TypeError(f"no JSON type for the annotation {t!r}")
        if name not in out:
            out.append(name)
    return out


def _params(fn: Callable[..., Any]) -> Iterator[Tuple[str, str, Any, Any]]:
    """Each argument of a tool: (its name in the tool, the call's keyword, annotation,
    default); a ``Snapshot`` method's ``self`` is the tool's ``file``."""
    hints = typing.get_type_hints(fn)
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            yield "file", "self", Snapshot, inspect.Parameter.empty
        else:
            yield p.name, p.name, hints[p.name], p.default


_OPTION = re.compile(r"^\s+(?:-\w, )?--([a-z][a-z-]*)(?: <[^>]+>)?(?:\s{2,}(\S.*))?$")
_POSITIONAL = re.compile(r"^\s+<[A-Z_]+>(?:\.\.\.)?\s{2,}(\S.*)$")


def cli_help(command: str) -> Tuple[List[str], Dict[str, str]]:
    """What ``leakscope <command> --help`` (the command line's own definition) says of
    each argument: the positional ones in order, the options by keyword."""
    with tempfile.TemporaryFile() as out:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            os.dup2(out.fileno(), 1)
            _native.run_cli(["leakscope", command, "--help"])
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    positional: List[str] = []
    options: Dict[str, str] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        m = _OPTION.match(line)
        if m:
            current = m.group(1).replace("-", "_")
            options[current] = m.group(2) or ""
            continue
        m = _POSITIONAL.match(line)
        if m:
            positional.append(m.group(1))
            current = None
        elif current is not None and line.strip():
            options[current] = (options[current] + " " + line.strip()).strip()
        else:
            current = None
    return positional, options


def description(fn: Callable[..., Any]) -> str:
    """A tool's description: its call's docstring, less the example."""
    return inspect.cleandoc(fn.__doc__ or "").split("Example::")[0].strip()


def input_schema(name: str, fn: Callable[..., Any]) -> Dict[str, Any]:
    """The input schema (JSON Schema) of tool ``name``: a property per argument of its
    call's signature with its JSON type(s), default and what the command's ``--help``
    says of it (the arguments without a default are the command's positional ones, in
    order); those without a default required; nothing else accepted."""
    positional, options = cli_help(name)
    props: Dict[str, Any] = {}
    required: List[str] = []
    for arg, keyword, hint, default in _params(fn):
        types = _json_types(hint)
        prop: Dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
        if keyword == "self":
            text: Optional[str] = FILE_DESCRIPTION
            required.append(arg)
        elif default is inspect.Parameter.empty:
            text = positional[len(required)] if len(required) < len(positional) else None
            required.append(arg)
        else:
            text = options.get(keyword)
            if default is not None:
                prop["default"] = default
        if text:
            prop["description"] = text
        props[arg] = prop
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def snapshot_uri(path: str) -> str:
    """The resource URI of a loaded file (its absolute path, percent-encoded)."""
    return URI_PREFIX + urllib.parse.quote(path)


def uri_path(uri: str) -> str:
    """The file of a resource URI; ``ValueError`` for a URI of something else."""
    if not uri.startswith(URI_PREFIX + "/"):
        raise ValueError(f"not a leakscope snapshot resource: {uri} (expected {URI_PREFIX}/<path>)")
    return urllib.parse.unquote(uri[len(URI_PREFIX):])


class Snapshots:
    """The snapshots a server has loaded, by absolute path: each file is read once and
    kept while its size and modification time stay the same (at most ``keep`` files; the
    one asked about longest ago is dropped first). ``loads`` counts the reads per file."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self.loads: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._file_locks: Dict[str, threading.Lock] = {}
        self._kept: "OrderedDict[str, Tuple[Tuple[int, int], Snapshot]]" = OrderedDict()

    def get(self, path: str) -> Tuple[str, Snapshot]:
        """The file's absolute path and its snapshot, loaded now if it is not kept or has
        changed. A file that cannot be read raises the library's error."""
        full = os.path.abspath(os.path.expanduser(path))
        with self._lock:
            file_lock = self._file_locks.setdefault(full, threading.Lock())
        with file_lock:
            try:
                st = os.stat(full)
                stamp: Optional[Tuple[int, int]] = (st.st_size, st.st_mtime_ns)
            except OSError:
                stamp = None  # the library says what is wrong with it
            with self._lock:
                kept = self._kept.get(full)
                if kept is not None and stamp is not None and kept[0] == stamp:
                    self._kept.move_to_end(full)
                    return full, kept[1]
                self._kept.pop(full, None)
            log.info("loading %s%s", full,
                     "" if stamp is None else f" ({_native.format_size(stamp[0])})")
            start = time.perf_counter()
            snap = load(full)
            with self._lock:
                self.loads[full] = self.loads.get(full, 0) + 1
                if stamp is not None:
                    self._kept[full] = (stamp, snap)
                while len(self._kept) > self.keep:
                    dropped, _ = self._kept.popitem(last=False)
                    log.info("dropped %s (more than %d files loaded)", dropped, self.keep)
            log.info("loaded %s in %.2f s", full, time.perf_counter() - start)
            return full, snap

    def kept(self) -> List[str]:
        """The files kept loaded, the one asked about longest ago first."""
        with self._lock:
            return list(self._kept)


def call(snapshots: Snapshots, name: str, arguments: Dict[str, Any]) -> Tuple[dict, Dict[str, int]]:
    """Runs tool ``name``: the report's ``to_dict()`` and the load count of each file it
    used. An argument that may be a ``Snapshot`` and names a file is taken from
    ``snapshots`` (a directory, as ``compare`` takes, is passed on as it is)."""
    fn = TOOLS[name]
    kwargs: Dict[str, Any] = {}
    used: Dict[str, int] = {}
    for tool_name, keyword, hint, _ in _params(fn):
        if tool_name not in arguments:
            continue
        value = arguments[tool_name]
        may_be_snapshot = hint is Snapshot or Snapshot in typing.get_args(hint)
        if may_be_snapshot and isinstance(value, str) and not os.path.isdir(value):
            full, value = snapshots.get(value)
            used[full] = snapshots.loads[full]
        kwargs[keyword] = value
    # the document to_dict() returns, without the copy it makes: this result is not kept
    return fn(**kwargs)._data, used


def _sdk() -> Any:
    """The MCP SDK's modules, or an ``ImportError`` that says how to install them."""
    import importlib.metadata

    try:
        major = int(importlib.metadata.version("mcp").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        major = None
    if major is not None and major < 2:
        raise ImportError(f"leakscope mcp needs version 2 of the MCP Python SDK, not "
                          f"{importlib.metadata.version('mcp')}: pip install 'leakscope[mcp]'")
    try:
        import anyio
        import jsonschema
        import mcp.types as types
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server
        from mcp.shared.exceptions import MCPError
    except ImportError as e:
        raise ImportError(
            "leakscope mcp needs the MCP Python SDK (the 'mcp' package, version 2, on "
            "Python 3.10 or later): pip install 'leakscope[mcp]'") from e
    return argparse.Namespace(anyio=anyio, jsonschema=jsonschema, types=types, Server=Server,
                              stdio_server=stdio_server, MCPError=MCPError)


INSTRUCTIONS = """\
leakscope reads PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot files).
Start with `summary`; for memory that grows per step, `leaks` (then by="user" for the
caller's own frame, `windows` if the windows look wrong); for an out-of-memory error,
`oom` (and `segments` at="oom" for fragmentation); `top`/`tree` at="peak" for what holds
the peak; `compare` before/after a fix. Each file is loaded once and kept: asking more
questions about it is cheap. Paths are absolute or relative to the server's working
directory; results name files by their absolute path. Results are the JSON `leakscope <command> FILE --json` prints."""


def server(snapshots: Snapshots) -> Any:
    """The MCP server (the SDK's low-level ``Server``) over ``snapshots``."""
    sdk = _sdk()
    types = sdk.types
    from . import __version__

    tools = [types.Tool(name=name, description=description(fn), input_schema=input_schema(name, fn))
             for name, fn in TOOLS.items()]
    schemas = {t.name: t.input_schema for t in tools}

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        if params.name not in TOOLS:
            raise sdk.MCPError(types.INVALID_PARAMS, f"no tool {params.name!r}; the tools are "
                               + ", ".join(TOOLS))
        arguments = params.arguments or {}
        try:
            sdk.jsonschema.validate(arguments, schemas[params.name])
            doc, used = await sdk.anyio.to_thread.run_sync(
                partial(call, snapshots, params.name, arguments))
        except sdk.jsonschema.ValidationError as e:
            where = "".join(f"{p}: " for p in e.absolute_path)
            return _error(types, f"{params.name}: {where}{e.message}")
        except (LeakscopeError, ValueError, OSError, TypeError) as e:
            log.info("%s failed: %s", params.name, e)
            return _error(types, str(e))
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(doc, separators=(",", ":")))],
            structured_content=doc,
            _meta={LOADS_KEY: used})

    async def list_resources(ctx: Any, params: Any) -> Any:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=snapshot_uri(p), name=os.path.basename(p), title=p,
                           description="leakscope summary of the loaded snapshot",
                           mime_type="application/json",
                           _meta={LOADS_KEY: snapshots.loads.get(p, 0)})
            for p in snapshots.kept()])

    async def list_templates(ctx: Any, params: Any) -> Any:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            uri_template=URI_PREFIX + "{+path}", name="snapshot",
            description="leakscope summary of a snapshot file (loaded, and kept, on read)",
            mime_type="application/json")])

    async def read_resource(ctx: Any, params: Any) -> Any:
        try:
            path = uri_path(str(params.uri))
            doc, _ = await sdk.anyio.to_thread.run_sync(
                partial(call, snapshots, "summary", {"file": path}))
        except (LeakscopeError, ValueError, OSError) as e:
            raise sdk.MCPError(types.INVALID_PARAMS, str(e), {"uri": str(params.uri)})
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=params.uri, text=json.dumps(doc, separators=(",", ":")),
            mime_type="application/json")])

    return sdk.Server(
        "leakscope", version=__version__, instructions=INSTRUCTIONS,
        on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
        on_list_resource_templates=list_templates, on_read_resource=read_resource)


def _error(types: Any, message: str) -> Any:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def main(argv: Optional[List[str]] = None) -> int:
    """``leakscope mcp [--keep N]``: serves MCP on stdin/stdout until the client closes."""
    parser = argparse.ArgumentParser(
        prog="leakscope mcp",
        description="A Model Context Protocol server over stdio whose tools are leakscope's "
                    "commands (see docs/agents.md).")
    parser.add_argument("--keep", type=int, default=8, metavar="N",
                        help="files kept loaded at once (default 8); the one asked about "
                             "longest ago is dropped first")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    if args.keep < 1:
        parser.error("--keep must be at least 1")
    try:
        sdk = _sdk()
    except ImportError as e:
        print(f"leakscope mcp: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="leakscope mcp: %(message)s")
    logging.getLogger("mcp").setLevel(logging.WARNING)
    app = server(Snapshots(keep=args.keep))

    async def serve() -> None:
        async with sdk.stdio_server() as (read, write):
            await app.run(read, write, app.create_initialization_options())

    sdk.anyio.run(serve)
    return 0
