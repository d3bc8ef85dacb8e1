"""``leakscope mcp`` through the MCP Python SDK's own client over stdio: the server is
spawned as an agent's client would; its tools are the commands, and each answer is exactly
what ``leakscope <command> FILE --json`` prints for the same arguments; a file is loaded once
per server (counted and timed); bad files and bad arguments are tool errors that say what is
wrong."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp", reason="the MCP SDK (its client drives the server) is not installed")
if int(importlib.metadata.version("mcp").split(".")[0]) < 2:
    pytest.skip("these tests use version 2 of the MCP SDK's client", allow_module_level=True)

import anyio  # noqa: E402  (installed with mcp)
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from cli import ROOT, cli  # noqa: E402

SCENARIOS = ROOT / "fixtures" / "scenarios"
LOADS = "leakscope/loads"
TOOL_NAMES = {"summary", "top", "tree", "leaks", "windows", "phases", "oom", "segments",
              "compare", "ranks", "timeline"}


def cli_json(*args):
    out = subprocess.run(cli() + [str(a) for a in args] + ["--json"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def serve(body, *server_args, command=None):
    """Runs ``await body(session)`` against a fresh ``leakscope mcp`` (the command line the
    tests drive, or ``command``) and returns what it returns."""
    command = command or cli()
    params = StdioServerParameters(command=command[0],
                                   args=[*command[1:], "mcp", *server_args],
                                   env=dict(os.environ))

    async def run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return anyio.run(run)


def answer(result):
    """A successful tool result's document."""
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def test_lists_the_commands_as_tools():
    tools = serve(lambda s: s.list_tools()).tools
    assert {t.name for t in tools} == TOOL_NAMES
    by_name = {t.name: t for t in tools}
    assert by_name["leaks"].input_schema["required"] == ["file"]
    assert by_name["compare"].input_schema["required"] == ["a", "b"]
    assert by_name["ranks"].input_schema["required"] == ["dir"]
    leaks = by_name["leaks"].input_schema["properties"]
    assert leaks["by"]["type"] == "string" and leaks["by"]["default"] == "site"
    assert "annotation" in leaks["by"]["description"]      # the command's --help line
    assert leaks["warmup"]["type"] == "integer"
    assert leaks["python_only"]["type"] == "boolean"
    assert leaks["file"]["type"] == ["string", "array"]    # one file, or a series
    assert by_name["top"].input_schema["properties"]["limit"]["type"] == "integer"
    assert by_name["leaks"].description.startswith("The call sites whose memory grows")


def test_every_tool_argument_is_an_option_of_its_command():
    """The tools are read off the command line's definitions: each option a command's
    --help lists (less --json and --help) is an argument of its tool, and no other."""
    tools = {t.name: t for t in serve(lambda s: s.list_tools()).tools}
    for name, tool in tools.items():
        help_text = subprocess.run(cli() + [name, "--help"], capture_output=True, text=True,
                                   check=True).stdout
        flags = set(re.findall(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", help_text, re.M))
        flags -= {"json", "help"}
        props = tool.input_schema["properties"]
        options = {p for p in props if p not in tool.input_schema["required"]
                   and "--" + p.replace("_", "-") in help_text}
        assert {f.replace("-", "_") for f in flags} == options, name
        for p in props.values():
            assert p.get("description"), name


def test_answers_are_the_cli_json():
    pp = (SCENARIOS / "pp_last_stage_recv_pinned.pickle").resolve()
    frag = (SCENARIOS / "fragmentation_oom.pickle").resolve()
    two = (SCENARIOS / "two_devices_recv_leak.pickle").resolve()
    named = (SCENARIOS / "named_compiled_leak.pickle").resolve()
    ranks_dir = (SCENARIOS / "verl_ranks").resolve()
    windows = "frame:^forward_step$"
    asked = [
        ("leaks", {"file": str(pp)}, ["leaks", pp]),
        ("leaks", {"file": str(pp), "by": "user", "windows": windows},
         ["leaks", pp, "--by", "user", "--windows", windows]),
        ("leaks", {"file": str(two), "device": 0, "windows": windows},
         ["leaks", two, "--device", "0", "--windows", windows]),
        ("oom", {"file": str(frag)}, ["oom", frag]),
        ("oom", {"file": str(frag), "device": 0, "by": "user"},
         ["oom", frag, "--device", "0", "--by", "user"]),
        ("segments", {"file": str(frag), "at": "oom"}, ["segments", frag, "--at", "oom"]),
        ("top", {"file": str(pp), "at": "peak", "limit": 5},
         ["top", pp, "--at", "peak", "--limit", "5"]),
        ("top", {"file": str(named), "by": "metadata", "python_only": True},
         ["top", named, "--by", "metadata", "--python-only"]),
        ("phases", {"file": str(named)}, ["phases", named]),
        ("compare", {"a": str(frag), "b": str(pp)}, ["compare", frag, pp]),
        ("ranks", {"dir": str(ranks_dir)}, ["ranks", ranks_dir]),
    ]

    async def body(session):
        results = [await session.call_tool(tool, args) for tool, args, _ in asked]
        return results, await session.list_resources()

    results, resources = serve(body)
    for (tool, args, cli_args), result in zip(asked, results):
        assert answer(result) == cli_json(*cli_args), (tool, args)
    # every file was read once, however many questions it answered
    assert results[-1].meta[LOADS] == {str(p): 1 for p in (pp, frag, two, named)}
    assert results[1].meta[LOADS] == {str(pp): 1}
    uris = {r.uri for r in resources.resources}
    assert uris == {"leakscope://snapshot" + str(p) for p in (pp, frag, two, named)}


def test_a_resource_per_loaded_file_is_its_summary():
    frag = (SCENARIOS / "fragmentation_oom.pickle").resolve()

    async def body(session):
        assert (await session.list_resources()).resources == []
        await session.call_tool("oom", {"file": str(frag)})
        listed = (await session.list_resources()).resources
        read = await session.read_resource(listed[0].uri)
        return listed, read

    listed, read = serve(body)
    assert [r.uri for r in listed] == ["leakscope://snapshot" + str(frag)]
    assert listed[0].mime_type == "application/json"
    assert json.loads(read.contents[0].text) == cli_json("summary", frag)


@pytest.fixture(scope="module")
def big_snapshot(tmp_path_factory):
    """A snapshot whose loading takes far longer than a summary of it (the benchmark
    generator, at 40 MB)."""
    path = tmp_path_factory.mktemp("big") / "big.pickle"
    subprocess.run([sys.executable, str(ROOT / "benches" / "gen_big_snapshot.py"),
                    "--size-mb", "40", "--devices", "1", "-o", str(path)],
                   check=True, capture_output=True)
    return path


def test_a_second_question_does_not_reload_the_file(big_snapshot):
    f = str(big_snapshot)

    async def timed(session, tool, args):
        start = time.perf_counter()
        result = await session.call_tool(tool, args)
        return time.perf_counter() - start, result

    async def body(session):
        first = await timed(session, "summary", {"file": f})
        later = [await timed(session, "summary", {"file": f}) for _ in range(3)]
        segments = await timed(session, "segments", {"file": f, "at": "peak"})
        return first, later, segments

    (t_first, first), later, (_, segments) = serve(body)
    assert answer(first) == cli_json("summary", f)
    for _, r in later:
        assert answer(r) == answer(first)
        assert r.meta[LOADS] == {f: 1}
    assert segments.meta[LOADS] == {f: 1}
    # The first answer includes reading the file; the later ones do not. Best of three,
    # so a slow moment in one of them does not decide it.
    t_later = min(t for t, _ in later)
    assert t_later < 0.5 * t_first, (t_first, [t for t, _ in later])


def test_a_changed_file_is_read_again(tmp_path):
    f = tmp_path / "run.pickle"
    shutil.copy(SCENARIOS / "control_no_leak.pickle", f)

    async def body(session):
        before = await session.call_tool("summary", {"file": str(f)})
        shutil.copy(SCENARIOS / "fragmentation_oom.pickle", f)
        os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))
        after = await session.call_tool("summary", {"file": str(f)})
        return before, after

    before, after = serve(body)
    assert before.meta[LOADS] == {str(f): 1}
    assert after.meta[LOADS] == {str(f): 2}
    assert answer(after) == cli_json("summary", f)


def test_bad_files_and_arguments_are_tool_errors(tmp_path):
    missing = tmp_path / "missing.pickle"
    garbage = tmp_path / "garbage.pickle"
    garbage.write_bytes(b"\x80\x04not a snapshot at all")
    frag = str((SCENARIOS / "fragmentation_oom.pickle").resolve())

    async def body(session):
        return [await session.call_tool(tool, args) for tool, args in [
            ("leaks", {"file": str(missing)}),
            ("oom", {"file": str(garbage)}),
            ("leaks", {"file": frag, "by": "nothing"}),
            ("top", {"file": frag, "at": "event:999999"}),
            ("top", {"file": frag, "limit": "ten"}),
            ("oom", {"file": frag, "colour": True}),
            ("leaks", {}),
        ]]

    results = serve(body)
    assert all(r.is_error for r in results)
    text = [r.content[0].text for r in results]
    # a file that cannot be read: the library's own message, as the command line prints it
    for args, message in zip((["leaks", missing], ["oom", garbage]), text):
        err = subprocess.run(cli() + [str(a) for a in args], capture_output=True, text=True)
        assert err.returncode != 0
        assert message in err.stderr, (message, err.stderr)
    assert str(missing) in text[0] and str(garbage) in text[1]
    assert "'nothing'" in text[2] and "--by" in text[2]     # the command line's own error
    assert "event" in text[3]
    assert "'ten'" in text[4] and "--limit" in text[4]
    assert "colour" in text[5]
    assert "required" in text[6] and "FILES" in text[6]


def test_the_python_package_serves_the_same_tools():
    """``python -m leakscope mcp`` (the wheel's command, run in process) is the same
    server."""
    frag = str((SCENARIOS / "fragmentation_oom.pickle").resolve())

    async def body(session):
        tools = (await session.list_tools()).tools
        return {t.name for t in tools}, await session.call_tool("oom", {"file": frag})

    names, result = serve(body, command=[sys.executable, "-m", "leakscope"])
    assert names == TOOL_NAMES
    assert answer(result) == cli_json("oom", frag)
