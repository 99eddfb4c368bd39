"""One program per system for the ``streams`` suite, run as ``python -m benchmarks.streams.jobs.X SPEC``.

``SPEC`` is a JSON object (``input``, ``output``, ``workdir`` and the system's options). A
job prints one ``JOB-RESULT {json}`` line with what it measured itself; the caller measures
the wall time and the peak RSS of the whole process (``os.wait4``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

JOB_PREFIX = "JOB-RESULT "


def spec_from_argv(argv: list[str] | None = None) -> dict[str, Any]:
    """The job's spec: the first command-line argument, a JSON object."""
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    if not isinstance(spec, dict):
        raise SystemExit("the job spec must be a JSON object")
    return spec


def report(**fields: Any) -> None:
    """Print the job's own measurements for the caller."""
    sys.stdout.write(JOB_PREFIX + json.dumps(fields) + "\n")
    sys.stdout.flush()
