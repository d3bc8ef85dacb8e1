"""``leakscope mcp`` through the MCP Python SDK's own client over stdio: the server is
spawned as an agent's client would (``python -m leakscope mcp``); its tools are the
commands, and each answer is exactly what ``leakscope <command> FILE --json`` prints for
the same arguments; a file is loaded once per server (counted and timed); bad files and
bad arguments are tool errors that say what is wrong."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'leakscope[mcp]')")
if int(importlib.metadata.version("mcp").split(".")[0]) < 2:
    pytest.skip("leakscope mcp needs version 2 of the MCP SDK", allow_module_level=True)

import anyio  # noqa: E402  (installed with mcp)
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from cli import ROOT, cli  # noqa: E402
from leakscope import mcp as server_module  # noqa: E402

SCENARIOS = ROOT / "fixtures" / "scenarios"
LOADS = server_module.LOADS_KEY
TOOL_NAMES = {"summary", "top", "tree", "leaks", "windows", "oom", "segments", "compare",
              "ranks", "timeline"}


def cli_json(*args):
    out = subprocess.run(cli() + [str(a) for a in args] + ["--json"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def serve(body, *server_args):
    """Runs ``await body(session)`` against a fresh ``python -m leakscope mcp`` and
    returns what it returns."""
    env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "leakscope", "mcp", "--quiet", *server_args],
                                   env=env)

    async def run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return anyio.run(run)


def answer(result):
    """A successful tool result's document, checked to be the same as text and as
    structured content."""
    assert not result.is_error, result.content[0].text
    doc = json.loads(result.content[0].text)
    assert result.structured_content == doc
    return doc


def test_lists_the_commands_as_tools():
    tools = serve(lambda s: s.list_tools()).tools
    assert {t.name for t in tools} == TOOL_NAMES
    by_name = {t.name: t for t in tools}
    assert by_name["leaks"].input_schema["required"] == ["file"]
    assert by_name["compare"].input_schema["required"] == ["a", "b"]
    assert by_name["ranks"].input_schema["required"] == ["directory"]
    leaks = by_name["leaks"].input_schema["properties"]
    assert leaks["by"] == {"type": "string", "default": "site",
                           "description": leaks["by"]["description"]}
    assert leaks["device"]["type"] == ["integer", "string", "null"]
    assert leaks["warmup"]["type"] == "integer"
    assert "annotation" in leaks["windows"]["description"]   # the command's --help line
    assert by_name["leaks"].description.startswith("The call sites whose memory grows")


def test_every_argument_is_its_call_keyword_with_the_command_help():
    import inspect

    for name, fn in server_module.TOOLS.items():
        schema = server_module.input_schema(name, fn)
        keywords = [p for p in inspect.signature(fn).parameters if p != "self"]
        assert [p for p in schema["properties"] if p != "file"] == keywords, name
        # every argument the command line has says what it is (from its --help)
        help_text = subprocess.run(cli() + [name, "--help"], capture_output=True, text=True,
                                   check=True).stdout
        for arg, prop in schema["properties"].items():
            flag = "--" + arg.replace("_", "-")
            if flag in help_text or arg in schema["required"]:
                assert prop.get("description"), (name, arg)


def test_answers_are_the_cli_json():
    pp = (SCENARIOS / "pp_last_stage_recv_pinned.pickle").resolve()
    frag = (SCENARIOS / "fragmentation_oom.pickle").resolve()
    two = (SCENARIOS / "two_devices_recv_leak.pickle").resolve()
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
        ("compare", {"a": str(frag), "b": str(pp)}, ["compare", frag, pp]),
        ("ranks", {"directory": str(ranks_dir)}, ["ranks", ranks_dir]),
    ]

    async def body(session):
        results = [await session.call_tool(tool, args) for tool, args, _ in asked]
        return results, await session.list_resources()

    results, resources = serve(body)
    for (tool, args, cli_args), result in zip(asked, results):
        assert answer(result) == cli_json(*cli_args), (tool, args)
        # every file was read once, however many questions it answered
        assert set(result.meta[LOADS].values()) <= {1}, result.meta
    assert results[1].meta[LOADS] == {str(pp): 1}
    assert results[7].meta[LOADS] == {str(frag): 1, str(pp): 1}
    assert results[8].meta[LOADS] == {}           # a directory is not a snapshot to keep
    uris = {r.uri: r for r in resources.resources}
    assert set(uris) == {server_module.snapshot_uri(str(p)) for p in (pp, frag, two)}
    assert all(r.meta[LOADS] == 1 for r in resources.resources)


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
    assert text[2].startswith('by="nothing"')     # the library names the keyword
    assert "event" in text[3]
    assert "limit" in text[4] and "integer" in text[4]
    assert "colour" in text[5]
    assert "file" in text[6]


def test_entry_point_help_and_missing_sdk():
    out = subprocess.run([sys.executable, "-m", "leakscope", "mcp", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "--keep" in out.stdout
    # without the SDK: an ImportError that says how to install it
    blocked = ("import sys; sys.modules['mcp'] = None; sys.argv = ['leakscope', 'mcp'];"
               "from leakscope.__main__ import main; main()")
    out = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True)
    assert out.returncode != 0
    assert "pip install 'leakscope[mcp]'" in out.stderr
