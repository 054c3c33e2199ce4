"""What the pytest plugin's function-scoped fixtures cost a test (set-up and tear-down).

Runs pytest on generated suites of N tests: each fixture variant against the same tests
without it; the difference divided by N is the overhead per test. Usage:

    python benchmarks/testing_overhead.py [-n 100] [--subprocess-n 20]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"

# name: (test signature, is async, marker)
VARIANTS = {
    "baseline (async, no fixture)": ("", True, ""),
    "nats_server in-process": ("nats_server", True, ""),
    "streaming_server in-process (file)": ("streaming_server", True, ""),
    "streaming_server in-process (memory)": ("streaming_server", True, 'store="memory"'),
    "baseline (sync, no fixture)": ("", False, ""),
    "nats_server subprocess": ("nats_server", False, ""),
    "streaming_server subprocess (file)": ("streaming_server", False, ""),
}


def suite(fixture: str, is_async: bool, marker: str, n: int) -> str:
    lines = ["import pytest", ""]
    for i in range(n):
        if marker:
            lines.append(f"@pytest.mark.tidings({marker})")
        lines.append(f"{'async ' if is_async else ''}def test_{i}({fixture}):")
        lines.append(f"    assert {fixture or 'True'}")
        lines.append("")
    return "\n".join(lines)


def pytest_seconds(workdir: Path) -> float:
    """pytest's own run time (collection to the end, without interpreter start-up)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         cwd=workdir, capture_output=True, text=True)
    m = re.search(r"(\d+) passed in ([\d.]+)s", out.stdout)
    if out.returncode != 0 or m is None:
        raise SystemExit(f"pytest failed in {workdir}:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    return float(m.group(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100, help="tests per in-process suite")
    ap.add_argument("--subprocess-n", type=int, default=20, help="tests per subprocess suite")
    ap.add_argument("--repeat", type=int, default=3, help="runs per suite (best is kept)")
    args = ap.parse_args()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tidings-overhead-") as tmp:
        for name, (fixture, is_async, marker) in VARIANTS.items():
            n = args.n if is_async else args.subprocess_n
            workdir = Path(tmp) / re.sub(r"\W+", "_", name)
            workdir.mkdir()
            (workdir / "pytest.ini").write_text(INI)
            (workdir / "test_overhead.py").write_text(suite(fixture, is_async, marker, n))
            best = min(pytest_seconds(workdir) for _ in range(args.repeat))
            results[name] = best / n
    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"per-test cost ({started}; best of {args.repeat} runs; ms per test)")
    for name, per_test in results.items():
        base = results["baseline (async, no fixture)" if "in-process" in name or "async" in name
                       else "baseline (sync, no fixture)"]
        extra = "" if name.startswith("baseline") else f"  overhead {1000 * (per_test - base):7.1f}"
        print(f"  {name:40s} {1000 * per_test:7.1f}{extra}")


if __name__ == "__main__":
    main()
