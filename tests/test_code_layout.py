"""The layout the design holds (docs/DESIGN.md): files of one concept, small enough to
read, and no import cycle in either language; the library never imports its tools."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / "python" / "tidemark"
TOOLS = ROOT / "tools" / "tidemark_tools"
RUST = [ROOT / "rust" / "tidemark-core" / "src", ROOT / "rust" / "tidemark-py" / "src"]
MAX_LINES = 800


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _py_modules() -> dict[str, Path]:
    mods = {}
    for pkg in (PY, TOOLS):
        for p in pkg.rglob("*.py"):
            parts = list(p.relative_to(pkg.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = p
    return mods


def _py_imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The modules of the package ``name`` imports, at any depth (a function's imports
    too), but not those only a type checker reads. Importing a submodule through its
    package (``from tidemark import _native``) is no edge to the package."""
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    typing_only = {
        id(n)
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
        for n in ast.walk(node)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            subs = {f"{base}.{a.name}" for a in node.names}
            out |= subs
            if not all(s in mods or s.endswith("._native") for s in subs):
                out.add(base)
    return {m for m in out if m in mods and m != name}


def test_no_python_module_over_the_limit() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in (PY, TOOLS)
        for p in pkg.rglob("*.py")
        if (n := _lines(p)) > MAX_LINES
    }
    assert not long, long


def test_no_rust_file_over_the_limit() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for src in RUST
        for p in src.rglob("*.rs")
        if not _rust_test_file(p) and (n := _lines(p)) > MAX_LINES
    }
    assert not long, long


def test_no_python_import_cycle() -> None:
    mods = _py_modules()
    graph = {m: _py_imports(m, p, mods) for m, p in mods.items()}
    assert _cycles(graph) == []


def test_the_library_imports_none_of_its_tools() -> None:
    mods = _py_modules()
    library = {m: p for m, p in mods.items() if not m.startswith("tidemark_tools")}
    uses = {
        m: sorted(i for i in _py_imports(m, p, mods) if i.startswith("tidemark_tools"))
        for m, p in library.items()
    }
    assert {m: u for m, u in uses.items() if u} == {}


def _lines(p: Path) -> int:
    return len(p.read_text().splitlines())


def _rust_test_file(p: Path) -> bool:
    return p.name == "tests.rs" or p.stem.endswith("_tests")


def _rust_module(src: Path, p: Path) -> tuple[str, ...]:
    parts = list(p.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


def _rust_paths(text: str) -> Iterable[tuple[str, list[str]]]:
    """``crate::``, ``super::`` and ``self::`` paths of code (not of comments or of an
    inline test module)."""
    cut = text.find("#[cfg(test)]\nmod tests {")
    code = re.sub(r"//[^\n]*", "", text if cut < 0 else text[:cut])
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", code):
        yield m.group(1), m.group(2).split("::")[1:]


def _rust_graph(src: Path) -> dict[str, set[str]]:
    """Modules (files) of one crate and the modules their code names, an ancestor or
    descendant module not counted (a parent declares its children)."""
    files = {_rust_module(src, p): p for p in src.rglob("*.rs") if not _rust_test_file(p)}

    def resolve(path: list[str]) -> tuple[str, ...] | None:
        for i in range(len(path), 0, -1):
            if tuple(path[:i]) in files:
                return tuple(path[:i])
        return None

    graph: dict[str, set[str]] = {"::".join(m): set() for m in files}
    for mod, p in files.items():
        for head, rest in _rust_paths(p.read_text()):
            base = [] if head == "crate" else list(mod)
            if head == "super":
                base = base[:-1]
                while rest and rest[0] == "super":
                    rest, base = rest[1:], base[:-1]
            target = resolve(base + rest)
            if target is None or mod[: len(target)] == target or target[: len(mod)] == mod:
                continue
            graph["::".join(mod)].add("::".join(target))
    return graph


def test_no_rust_module_cycle() -> None:
    for src in RUST:
        assert _cycles(_rust_graph(src)) == [], src
