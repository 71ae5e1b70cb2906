"""The house rules of docs/architecture.md, read from the imports: no upward import, no cycle, small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "labkit"

# Floors from the bottom up; a module may import its own package and any floor below its own.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("references", "hardware"),
    ("rig", "shapes"),
    ("predict",),
    ("measure",),
    ("sim", "dist"),
    ("teach",),
    ("storage", "inter_layer", "intra_layer", "offload", "reduction", "resilience", "economics", "future"),
    ("advisor",),
    ("practice",),
    ("course",),
    ("bench",),
    ("cli",),
)
FLOOR = {name: i for i, names in enumerate(FLOORS) for name in names}
MAX_LOOSE = 8
MAX_LINES = 300


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every labkit module ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("labkit")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("labkit"):
            for a in node.names:
                candidate = f"{node.module}.{a.name}"
                found.add(candidate if (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists()
                          or (PACKAGE.parent / candidate.replace(".", "/")).is_dir() else node.module)
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {m for m in imports(path) if m != name} for name, path in MODULES.items()}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_a_floor():
    packages = {package_of(m) for m in MODULES} - {""}
    assert packages <= set(FLOOR), f"packages without a floor in FLOORS: {sorted(packages - set(FLOOR))}"


def test_no_import_runs_upward_or_sideways():
    bad = []
    for module, targets in GRAPH.items():
        mine = package_of(module)
        if not mine:
            continue
        for target in targets:
            theirs = package_of(target)
            if theirs and theirs != mine and FLOOR[theirs] >= FLOOR[mine]:
                bad.append(f"{module} -> {target}")
    assert not bad, "imports that run up or sideways:\n" + "\n".join(sorted(bad))


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH.get(node, ())):
            if nxt not in GRAPH:
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in GRAPH:
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle():
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    GRAPH["labkit.errors"].add("labkit.errors_probe")
    GRAPH["labkit.errors_probe"] = {"labkit.errors"}
    try:
        assert _cycle() is not None
    finally:
        del GRAPH["labkit.errors_probe"]
        GRAPH["labkit.errors"].discard("labkit.errors_probe")


def test_few_loose_modules_and_every_package_says_its_job():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert len(loose) <= MAX_LOOSE, f"{len(loose)} loose modules at labkit/: {sorted(loose)}"
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, f"{init.relative_to(ROOT)} must say its package's job in its docstring"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_300_lines(path: Path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_LINES}): split it"

