"""``python -m leakscope`` and the ``leakscope`` command of the wheel: the same command line
as the Rust binary (same options, output and exit codes), run in this process;
``leakscope mcp`` is the Model Context Protocol server of ``leakscope.mcp`` (stdio).

Example::

    $ python -m leakscope leaks run.pickle --json
    $ python -m leakscope mcp          # for an MCP client: see docs/agents.md
"""

import sys

from . import _native


def main() -> None:
    """Runs the command line on ``sys.argv`` and exits with its code."""
    if sys.argv[1:2] == ["mcp"]:
        from .mcp import main as mcp_main

        sys.exit(mcp_main(sys.argv[2:]))
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(_native.run_cli(["leakscope", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
