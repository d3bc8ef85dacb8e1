"""``python -m leakscope`` and the ``leakscope`` command of the wheel: the same command line
as the Rust binary (same options, output and exit codes), run in this process.

Example::

    $ python -m leakscope leaks run.pickle --json
"""

import sys

from . import _native


def main() -> None:
    """Runs the command line on ``sys.argv`` and exits with its code."""
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(_native.run_cli(["leakscope", *sys.argv[1:]], own_signals=True))


if __name__ == "__main__":
    main()
