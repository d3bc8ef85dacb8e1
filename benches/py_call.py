"""One Python call of the package, for `benches/ab.sh` to time two builds of it side by
side: loads FILE, runs CMD (a `Snapshot` method) and reads its result as a user does
(`to_dict()`, `rows()`, `str()`).

    printf '#!/bin/sh\nexec %s %s "$@"\n' /path/venv/bin/python benches/py_call.py > /tmp/py-new
    chmod +x /tmp/py-new
    AB_RUNS=7 benches/ab.sh /tmp/py-base /tmp/py-new big.pickle summary leaks
"""

import sys

import leakscope

command, path = sys.argv[1], sys.argv[-1]
result = getattr(leakscope.load(path), command)()
print(len(result.to_dict()), len(result.rows()), len(str(result)))
