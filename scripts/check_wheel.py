"""Checks the built wheels the way a user receives them.

    python scripts/check_wheel.py DIST_DIR [--max-glibc 2.17] [--spark PYSPARK_VERSION]

``DIST_DIR`` holds the library's wheel (``tidemark_engine-*.whl``) and the tools'
(``tidemark_tools-*.whl``, the ``tidemark`` command: the library's ``demo`` extra).
The library's wheel must be abi3 (one wheel for every CPython >= 3.10), hold the
``tidemark`` package and nothing else (no tools), and have its native module stripped;
with ``--max-glibc``, the module may need no glibc symbol newer than that version (what
the ``manylinux2014`` tag promises: glibc 2.17).

Then a fresh virtual environment outside the source tree gets the library alone and runs
a small pipeline on pyarrow. With ``--spark``, a second one gets
``tidemark-engine[spark,demo]`` at that PySpark version and runs the README's first
example (a streaming query on Spark's ``rate`` source) and ``tidemark demo``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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


def readme_example() -> str:
    """The README's first Python block."""
    m = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert m, "README.md has no Python block"
    return m.group(1)


def glibc_versions(so: Path) -> list[tuple[int, ...]]:
    """The glibc symbol versions the shared object needs."""
    out = subprocess.run(["objdump", "-T", str(so)], capture_output=True, text=True, check=True)
    found = set(re.findall(r"GLIBC_(\d+(?:\.\d+)+)", out.stdout))
    return sorted(tuple(int(x) for x in v.split(".")) for v in found)


def venv_with(tmp: Path, name: str, requirements: list[str]) -> Path:
    """A fresh virtual environment with ``requirements``; its Python. uv installs them
    where it is beside this interpreter (its cache makes a second install quick), pip
    otherwise."""
    venv = tmp / name
    uv = Path(sys.executable).parent / "uv"
    bare = ["--without-pip"] if uv.exists() else []  # uv needs no pip in it
    subprocess.run([sys.executable, "-m", "venv", *bare, str(venv)], check=True)
    py = venv / "bin" / "python"
    if uv.exists():
        cmd = [str(uv), "pip", "install", "--quiet", "--python", str(py)]
    else:
        cmd = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*cmd, *requirements], check=True)
    return py


def check_contents(wheel: Path) -> list[str]:
    """What is wrong with the library wheel's contents (nothing but ``tidemark/`` and its
    metadata; no tools)."""
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/")[0] for n in z.namelist()}
        names = z.namelist()
    wrong = [t for t in tops if t != "tidemark" and not t.endswith(".dist-info")]
    wrong += [n for n in names if "tools" in n.split("/")[:-1] or "tidemark_tools" in n]
    return wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dist", type=Path)
    ap.add_argument("--max-glibc", help="highest glibc symbol version allowed, e.g. 2.17")
    ap.add_argument("--spark", metavar="VERSION", help="PySpark version for the Spark checks")
    args = ap.parse_args()
    wheels = sorted(args.dist.glob("tidemark_engine-*.whl"))
    tools = sorted(args.dist.glob("tidemark_tools-*.whl"))
    if len(wheels) != 1 or (args.spark and len(tools) != 1):
        print(f"expected one library and one tools wheel in {args.dist}", file=sys.stderr)
        return 1
    wheel = wheels[0]
    if "-abi3-" not in wheel.name or "-cp310-" not in wheel.name:
        print(f"{wheel.name}: not an abi3 wheel for CPython >= 3.10", file=sys.stderr)
        return 1
    wrong = check_contents(wheel)
    if wrong:
        print(f"{wheel.name}: holds more than the library: {wrong[:10]}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.startswith("tidemark/_native")]
            so_name = next(n for n in names if n.endswith(".so"))
            z.extract(so_name, tmpdir)
            files = len(z.namelist())
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
            f"{wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB, {files} files, {so_name} "
            f"{size_mb:.1f} MB unpacked, stripped, newest glibc symbol "
            f"{'.'.join(map(str, newest))}"
        )
        if args.max_glibc:
            limit = tuple(int(x) for x in args.max_glibc.split("."))
            if newest > limit:
                print(f"needs glibc {newest} > {limit}", file=sys.stderr)
                return 1
        # Run from the temporary directory: the source tree's python/ is not importable.
        py = venv_with(tmpdir, "venv", [str(wheel)])
        subprocess.run([str(py), "-c", SMOKE], check=True, cwd=tmpdir)
        if args.spark:
            spark_checks(tmpdir, wheel, tools[0], args.spark)
    return 0


def spark_checks(tmp: Path, wheel: Path, tools: Path, pyspark: str) -> None:
    """The README's first example and ``tidemark demo`` in a fresh environment with the
    library's ``spark`` and ``demo`` extras at PySpark ``pyspark``."""
    py = venv_with(
        tmp,
        "venv-spark",
        [
            f"tidemark-engine[spark,demo] @ {wheel.resolve().as_uri()}",
            f"tidemark-tools @ {tools.resolve().as_uri()}",
            f"pyspark=={pyspark}",
        ],
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PYSPARK_PYTHON=str(py), PYSPARK_DRIVER_PYTHON=str(py))
    env["PATH"] = f"{py.parent}:{env.get('PATH', '')}"
    cli = shutil.which("tidemark", path=str(py.parent))
    assert cli, "the demo extra installed no `tidemark` command"
    subprocess.run([cli, "--version"], env=env, check=True, stdout=subprocess.DEVNULL)
    work = tmp / "readme"
    work.mkdir()
    (work / "readme_example.py").write_text(readme_example())
    # One JVM for both: `tidemark demo` (its command's own main), then the README's
    # example.
    script = SPARK_RUN.format(report=str(tmp / "report"))
    out = subprocess.run(
        [str(py), "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    # The example's sink shows each micro-batch's closed windows: some close within its
    # wait; the demo writes its report.
    if (
        out.returncode != 0
        or "|count|" not in out.stdout.replace(" ", "")
        or not (tmp / "report" / "index.html").exists()
    ):
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
        raise SystemExit(
            f"the README's example or the demo failed (PySpark {pyspark}, exit {out.returncode})"
        )
    times = dict(re.findall(r"^(readme|demo|pyspark) (\S+)$", out.stdout, re.M))
    print(
        f"README example ({times['readme']} s) and tidemark demo ({times['demo']} s) ran on "
        f"PySpark {times['pyspark']} from {wheel.name}"
    )


SPARK_RUN = """
import runpy, time
import pyspark
from tidemark_tools.cli import main

# The demo first: the README's query then starts in a warm JVM (its first micro-batch
# must finish within the example's wait, however busy the machine).
t = time.monotonic()
code = main(["demo", "--events", "10000", "--tenants", "20", "--batches", "5",
             "--no-warm-up", "--out", {report!r}])
print("demo", round(time.monotonic() - t))
t = time.monotonic()
runpy.run_path("readme_example.py", run_name="__main__")
print("readme", round(time.monotonic() - t))
print("pyspark", pyspark.__version__)
raise SystemExit(code)
"""


if __name__ == "__main__":
    sys.exit(main())
