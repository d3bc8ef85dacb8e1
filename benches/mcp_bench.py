#!/usr/bin/env python3
"""Timings of ``leakscope mcp`` (driven by ``benches/mcp.sh``; the MCP Python SDK's client).

    mcp_bench.py startup [--runs N] -- CMD [ARG...]
        spawn an MCP server (any: CMD ARG...) and time it to the ``initialize`` response
        and ``tools/list``, best of N (default 5)
    mcp_bench.py questions FILE --cli BIN [--runs N] [--server CMD]
        the acceptance figures on one snapshot, best of N (default 3) each:
        (a) ``BIN summary FILE``, the whole process;
        (b) the ten QUESTIONS as ``Snapshot`` method calls in this process, the file
            loaded once beforehand (not counted): the answers alone;
        (c) ``leakscope mcp`` (or --server CMD) spawned by the SDK's client, asked the same
            ten questions: from the spawn to the last answer;
        (c') the same with a minimal client that reads each answer with ``readline``;
        and the ratios (c) / ((a) + (b)) and (c') / ((a) + (b)).

The server is ``sys.executable -m leakscope mcp`` unless --server is given (``mcp.sh`` gives
the binary's ``leakscope mcp``). Progress goes to stderr, the figures to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

#: The ten questions: (tool, arguments) as the MCP tools take them, and the method calls.
QUESTIONS = [
    ("summary", {}),
    ("leaks", {}),
    ("top", {"at": "peak"}),
    ("top", {"at": "peak", "by": "user"}),
    ("oom", {}),
    ("windows", {}),
    ("segments", {"at": "peak"}),
    ("tree", {"at": "peak"}),
    ("timeline", {"max_allocations": 500}),
    ("leaks", {"device": 1}),
]


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def _client():
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    return anyio, ClientSession, StdioServerParameters, stdio_client


def _server(cmd: list[str]) -> object:
    _, _, StdioServerParameters, _ = _client()
    env = {k: os.environ[k] for k in ("PYTHONPATH", "RAYON_NUM_THREADS") if k in os.environ}
    return StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)


def startup_once(cmd: list[str]) -> tuple[float, int]:
    """Seconds from spawning ``cmd`` to the answers of ``initialize`` and ``tools/list``,
    and the number of tools listed."""
    anyio, ClientSession, _, stdio_client = _client()
    params = _server(cmd)

    async def run():
        start = time.perf_counter()
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                return time.perf_counter() - start, len(tools.tools)

    return anyio.run(run)


def mcp_questions_once(cmd: list[str], path: str) -> tuple[float, list[float], int]:
    """Seconds from spawning the server to the last of the ten answers, each answer's
    seconds, and the bytes of JSON text received."""
    anyio, ClientSession, _, stdio_client = _client()
    params = _server(cmd)

    async def run():
        start = time.perf_counter()
        each, received = [], 0
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for tool, args in QUESTIONS:
                    t = time.perf_counter()
                    r = await session.call_tool(tool, {"file": path, **args})
                    if r.is_error:
                        raise SystemExit(f"{tool} {args}: {r.content[0].text}")
                    each.append(time.perf_counter() - t)
                    received += len(r.content[0].text)
                    if (r.meta or {}).get("leakscope/loads", {}).get(path) != 1:
                        raise SystemExit(f"{tool}: the file was loaded again: {r.meta}")
                total = time.perf_counter() - start
        return total, each, received

    return anyio.run(run)


def raw_questions_once(cmd: list[str], path: str) -> tuple[float, list[float], int]:
    """As ``mcp_questions_once``, with a minimal client instead of the SDK's: JSON-RPC
    lines written to the server's stdin and read back with ``readline`` (the SDK's reader
    re-joins and re-splits its whole buffer for every 64 KiB it reads, so one answer of
    n bytes costs it O(n^2 / 64 KiB); this client reads each line once)."""
    start = time.perf_counter()
    env = {**os.environ}
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env)

    def send(msg: dict) -> None:
        p.stdin.write((json.dumps(msg) + "\n").encode())
        p.stdin.flush()

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "mcp_bench", "version": "0"}}})
    json.loads(p.stdout.readline())
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    each, received = [], 0
    for i, (tool, args) in enumerate(QUESTIONS, 1):
        t = time.perf_counter()
        send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
              "params": {"name": tool, "arguments": {"file": path, **args}}})
        r = json.loads(p.stdout.readline())["result"]
        if r.get("isError"):
            raise SystemExit(f"{tool} {args}: {r['content'][0]['text']}")
        each.append(time.perf_counter() - t)
        received += len(r["content"][0]["text"])
        if r.get("_meta", {}).get("leakscope/loads", {}).get(path) != 1:
            raise SystemExit(f"{tool}: the file was loaded again: {r.get('_meta')}")
    total = time.perf_counter() - start
    p.stdin.close()
    p.wait()
    return total, each, received


def answers_once(path: str) -> tuple[float, list[float], float]:
    """The ten questions as method calls on a snapshot loaded once (the load not counted):
    their total seconds, each one's, and the load's seconds."""
    import leakscope

    t = time.perf_counter()
    snap = leakscope.load(path)
    load_s = time.perf_counter() - t
    each = []
    for tool, args in QUESTIONS:
        t = time.perf_counter()
        getattr(snap, tool)(**args)
        each.append(time.perf_counter() - t)
    return sum(each), each, load_s


def cli_once(cli: str, path: str) -> float:
    t = time.perf_counter()
    subprocess.run([cli, "summary", path], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("startup")
    s.add_argument("--runs", type=int, default=5)
    s.add_argument("cmd", nargs=argparse.REMAINDER)
    q = sub.add_parser("questions")
    q.add_argument("file")
    q.add_argument("--cli", required=True)
    q.add_argument("--runs", type=int, default=3)
    q.add_argument("--server", default=None)
    a = ap.parse_args()

    if a.mode == "startup":
        cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
        if not cmd:
            ap.error("startup: give the server command after --")
        runs = []
        for i in range(a.runs):
            secs, n = startup_once(cmd)
            log(f"  run {i + 1}: {secs:.3f} s to initialize + tools/list ({n} tools)")
            runs.append(secs)
        print(json.dumps({"command": shlex.join(cmd), "runs": [round(x, 4) for x in runs],
                          "best_s": round(min(runs), 4)}))
        return 0

    path = os.path.abspath(a.file)
    server = shlex.split(a.server) if a.server else [sys.executable, "-m", "leakscope", "mcp"]
    log("warming the page cache...")
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass
    cli_runs, ans_runs, mcp_runs = [], [], []
    for i in range(a.runs):
        cli_runs.append(cli_once(a.cli, path))
        log(f"  (a) run {i + 1}: leakscope summary {cli_runs[-1]:.3f} s")
    for i in range(a.runs):
        total, each, load_s = answers_once(path)
        ans_runs.append((total, each, load_s))
        log(f"  (b) run {i + 1}: ten answers {total:.3f} s (load beforehand {load_s:.3f} s): "
            + ", ".join(f"{x:.3f}" for x in each))
    for i in range(a.runs):
        total, each, received = mcp_questions_once(server, path)
        mcp_runs.append((total, each, received))
        log(f"  (c) run {i + 1}: spawn to last answer {total:.3f} s: "
            + ", ".join(f"{x:.3f}" for x in each))
    raw_runs = []
    for i in range(a.runs):
        total, each, received = raw_questions_once(server, path)
        raw_runs.append((total, each, received))
        log(f"  (c') run {i + 1}: spawn to last answer, readline client {total:.3f} s: "
            + ", ".join(f"{x:.3f}" for x in each))
    a_s = min(cli_runs)
    b = min(ans_runs, key=lambda r: r[0])
    c = min(mcp_runs, key=lambda r: r[0])
    c2 = min(raw_runs, key=lambda r: r[0])
    print(json.dumps({
        "file": path, "bytes": os.path.getsize(path), "runs": a.runs,
        "questions": [f"{t} {json.dumps(args)}" for t, args in QUESTIONS],
        "a_cli_summary_s": round(a_s, 4),
        "b_answers_s": round(b[0], 4), "b_each_s": [round(x, 4) for x in b[1]],
        "b_load_s": round(b[2], 4),
        "c_mcp_s": round(c[0], 4), "c_each_s": [round(x, 4) for x in c[1]],
        "c_first_answer_s": round(c[1][0], 4), "c_json_bytes": c[2],
        "ratio": round(c[0] / (a_s + b[0]), 3),
        "c_readline_client_s": round(c2[0], 4), "c_readline_each_s": [round(x, 4) for x in c2[1]],
        "ratio_readline_client": round(c2[0] / (a_s + b[0]), 3),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
