"""Fair copy detection: code compared after normalising it, and only where a match means something.

Two solutions are compared on their syntax trees with everything a copier changes for free taken out
(the canonical-renaming and token-fingerprint approach of code-plagiarism checkers such as MOSS, Schleimer
et al., "Winnowing", SIGMOD 2003, and JPlag, Prechelt et al., 2002): every name the module binds (its
functions, classes, arguments, variables, attributes it assigns) renamed ``v0, v1, ...`` in order of first
use, docstrings and other bare strings, annotations, comments and formatting dropped. Names it does not
bind (``torch``, ``dist``, ``chunk``) stay: they are the API every solution must call.

A match with the key is only evidence for a solution long enough that two people writing it alone rarely
write the same tree: :data:`MIN_NODES` (150) nodes of the normalised tree. Measured on the key: its coding
answers normalise to 36-92 nodes (the one-line ``return w1.chunk(t, dim=0)[rank], w2.chunk(t, dim=1)[rank]``
36, ``states_per_gpu`` 76): formula code a student writes the same way unaided, so the natural answer *is*
the key's and no match is reported; its build-it modules normalise to 292-454 nodes (dozens of choices of
order, helper and loop, any of which an independent solution makes differently). Between students,
:func:`similarity` gives a figure (the Jaccard overlap of their token k-grams after the stub's own k-grams
are taken out, as MOSS's base file does: 1.0 for identical normal forms) for a pairs report, never a verdict.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from functools import cached_property
from itertools import combinations

MIN_NODES = 150  # nodes of the normalised tree below which a match with the key accuses no one (see below)
K = 8  # tokens per fingerprint k-gram: MOSS's noise threshold, short shared idioms left out
PAIR_REPORT = 0.8  # pairs at or above this overlap are listed in class.json (similarity.csv has every pair)


@dataclass(frozen=True)
class Normal:
    """A solution's normal form: the canonical dump, its node count, and (on demand) its token sequence."""

    dump: str
    nodes: int
    tree: ast.AST = field(repr=False, compare=False)

    @cached_property
    def tokens(self) -> tuple[str, ...]:
        return tuple(_tokens(self.tree))

    @property
    def long_enough(self) -> bool:
        return self.nodes >= MIN_NODES


class _Canon(ast.NodeTransformer):
    """Rename what the module binds, drop docstrings, bare strings and annotations."""

    def __init__(self, bound: set[str], attrs: set[str]) -> None:
        self.names: dict[str, str] = {}
        self.bound, self.attrs = bound, attrs

    def _name(self, name: str) -> str:
        if name not in self.bound and name not in self.attrs:
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        return kept or [ast.Pass()]

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(getattr(node, "body", None), list):
            node.body = self._body(node.body)
        return super().generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name, node.returns = self._name(node.name), None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self._name(node.name)
        return self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg, node.annotation, node.type_comment = self._name(node.arg), None, None
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        node.attr = node.attr if node.attr not in self.attrs else self._name(node.attr)
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return self.visit(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if node.module == "__future__" else self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> ast.AST:
        node.asname = None if node.asname is None else self._name(node.asname)
        return node


def _bound(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names a module binds itself (not imports, not builtins) and the attributes it assigns."""
    names, attrs, imported = set(), set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            names.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            attrs.add(n.attr)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            imported |= {a.name.split(".")[0] for a in n.names if a.asname is None}
            names |= {a.asname for a in n.names if a.asname}  # an alias is the writer's choice: renamed too
    return names - imported - set(dir(builtins)), attrs


def normal(source: str) -> Normal | None:
    """The normal form of ``source`` (a module or a function), or None when it does not parse."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, RecursionError, ValueError):
        return None
    return normal_tree(tree)


def normal_tree(tree: ast.AST) -> Normal:
    """The normal form of a parsed module, function or class (changed in place: pass a copy to keep it)."""
    tree = _Canon(*_bound(tree)).visit(tree)
    ast.fix_missing_locations(tree)
    nodes = sum(1 for _ in ast.walk(tree))
    return Normal(ast.dump(tree, annotate_fields=False, include_attributes=False), nodes, tree)


def _tokens(tree: ast.AST) -> list[str]:
    """A pre-order token stream: node types, with names, attributes and constants spelled out."""
    out = []
    for n in ast.walk(tree):
        label = type(n).__name__
        for attr in ("id", "attr", "arg", "name"):
            value = getattr(n, attr, None)
            if isinstance(value, str):
                label += f":{value}"
        if isinstance(n, ast.Constant):
            label += f":{n.value!r}"
        out.append(label)
    return out


def is_key_copy(source: str, key_source: str) -> bool:
    """Whether ``source`` is the key's solution once normalised, and long enough for that to mean a copy."""
    mine, key = normal(source), normal(key_source)
    return mine is not None and key is not None and key.long_enough and mine.dump == key.dump


def _grams(n: Normal) -> set[tuple[str, ...]]:
    return {n.tokens[i:i + K] for i in range(max(1, len(n.tokens) - K + 1))}


def similarity(a: Normal, b: Normal, base: Normal | None = None) -> float:
    """The Jaccard overlap of two normal forms' token k-grams, less the ``base``'s (the stub both started
    from); 1.0 for the same normal form."""
    if a.dump == b.dump:
        return 1.0
    common = _grams(base) if base is not None else set()
    ga, gb = _grams(a) - common, _grams(b) - common
    return len(ga & gb) / len(ga | gb) if ga | gb else 0.0


@dataclass(frozen=True)
class Pair:
    """Two students' solutions of one item and how alike they are (a figure, not a verdict)."""

    item: str
    a: str
    b: str
    similarity: float
    long_enough: bool  # both at least MIN_NODES: below it, alike answers are expected


def pairs(sources: dict[str, dict[str, str]], bases: dict[str, str] | None = None) -> list[Pair]:
    """Every pair of students per item (``{item: {student: source}}``), most alike first; ``bases`` gives an
    item's stub, whose k-grams every solution shares and which therefore count for neither."""
    out = []
    for item, by_student in sorted(sources.items()):
        base = normal((bases or {}).get(item, ""))
        normals = {s: n for s, src in sorted(by_student.items()) if (n := normal(src)) is not None}
        for (a, na), (b, nb) in combinations(normals.items(), 2):
            out.append(Pair(item, a, b, round(similarity(na, nb, base), 3), na.long_enough and nb.long_enough))
    return sorted(out, key=lambda p: (-p.similarity, p.item, p.a, p.b))
