"""Checks a built tidemark wheel the way a user receives it.

    python scripts/check_wheel.py DIST_DIR [--max-glibc 2.17]

Takes the one wheel in ``DIST_DIR`` and checks that it is an abi3 wheel (one wheel for
every CPython >= 3.10), that its native module is stripped (no debug sections) and, with
``--max-glibc``, that the module needs no glibc symbol newer than that version (what the
``manylinux2014`` tag promises: glibc 2.17). Then it installs the wheel into a fresh
virtual environment (with pyarrow, its one dependency) and runs a small pipeline there,
outside the source tree, comparing the windows with the expected counts.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SMOKE = """
import pyarrow as pa
import tidemark as tm

t = pa.table({
    "k": ["a", "a", "b", "a"],
    "ts": pa.array([1_000, 2_000, 3_000, 25_000], pa.timestamp("ms")),
})
pipe = tm.Pipeline(
    key="k", event_time="ts", watermark=tm.BoundedOutOfOrderness("1s"),
    window=tm.Tumbling("10s"), aggs={"n": tm.count()},
)
op = pipe.operator()
first = op.process(t)[0]     # Spark's rule: a call closes what its starting watermark passed
rest = op.flush()[0]         # end of input closes the rest
windows = pa.concat_tables([first, rest]).to_pydict()
rows = sorted(zip(windows["k"], windows["window_start"], windows["n"]))
assert [(k, n) for k, _, n in rows] == [("a", 2), ("a", 1), ("b", 1)], rows
print("wheel smoke test passed:", tm.__file__)
"""


def glibc_versions(so: Path) -> list[tuple[int, ...]]:
    """The glibc symbol versions the shared object needs."""
    out = subprocess.run(["objdump", "-T", str(so)], capture_output=True, text=True, check=True)
    found = set(re.findall(r"GLIBC_(\d+(?:\.\d+)+)", out.stdout))
    return sorted(tuple(int(x) for x in v.split(".")) for v in found)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dist", type=Path)
    ap.add_argument("--max-glibc", help="highest glibc symbol version allowed, e.g. 2.17")
    args = ap.parse_args()
    wheels = sorted(args.dist.glob("tidemark-*.whl"))
    if len(wheels) != 1:
        print(f"expected one wheel in {args.dist}, found {wheels}", file=sys.stderr)
        return 1
    wheel = wheels[0]
    if "-abi3-" not in wheel.name or "-cp310-" not in wheel.name:
        print(f"{wheel.name}: not an abi3 wheel for CPython >= 3.10", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.startswith("tidemark/_native")]
            so_name = next(n for n in names if n.endswith(".so"))
            z.extract(so_name, tmpdir)
        so = tmpdir / so_name
        sections = subprocess.run(
            ["objdump", "-h", str(so)], capture_output=True, text=True, check=True
        ).stdout
        if ".debug_" in sections or ".symtab" in sections:
            print(f"{so_name}: not stripped", file=sys.stderr)
            return 1
        size_mb = so.stat().st_size / 1e6
        newest = glibc_versions(so)[-1]
        print(
            f"{wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB, {so_name} {size_mb:.1f} MB "
            f"unpacked, stripped, newest glibc symbol {'.'.join(map(str, newest))}"
        )
        if args.max_glibc:
            limit = tuple(int(x) for x in args.max_glibc.split("."))
            if newest > limit:
                print(f"needs glibc {newest} > {limit}", file=sys.stderr)
                return 1
        venv = tmpdir / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        py = venv / "bin" / "python"
        pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, str(wheel)], check=True)
        # Run from the temporary directory: the source tree's python/ is not importable.
        subprocess.run([str(py), "-c", SMOKE], check=True, cwd=tmpdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
