"""The floors of the house: refseg's import graph, with the imports inside functions counted,
has one deliberate cycle and no arrow from a low floor up to a high one.

Nodes are the modules of ``refseg/`` (a package is its ``__init__``) and the compiled
``refseg._kernels``, a leaf of its own. An edge ``a -> b`` is an ``import`` or ``from ... import``
anywhere in ``a`` (module level or inside a function), a name of a package's lazy
``_PUBLIC`` table, or a literal ``import_module("refseg....")``. ``from pkg import name`` points
at ``pkg.name`` when that is a module, else at ``pkg``; the implicit import of a module's parent
packages is not an edge (it runs the parents' ``__init__``, whose own edges are counted), and
neither is an import under ``if TYPE_CHECKING:`` (it never runs), nor one by a computed name
(the citation scan of :mod:`refseg.audit.trace` imports every module by walking the package).

Run as a script (``python tests/test_layers.py [checkout]``) it prints the figures: modules,
edges, the cycles, the upward arrows.
"""
import ast
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.infrastructure

#: The one cycle the design keeps: a Tensor's arithmetic operators build the elementwise ops,
#: and those ops make Tensors.
DELIBERATE_CYCLES = [{"refseg.autograd.tensor", "refseg.autograd.elementwise"}]
#: The homes of vocabularies and the spec's reader, and all they may load (directly or not).
LEAF_HOMES = {
    "refseg.cite": set(),
    "refseg.registry": set(),
    "refseg.data.kinds": set(),
    "refseg.data.classes": set(),
    "refseg.data.synthetic_options": {"refseg.errors", "refseg.cite", "refseg.vocabulary"},
    "refseg.models.parts": {"refseg.data.classes"},
    "refseg.claim1.parameters": set(),
    "refseg.vocabulary": set(),
}
#: Floors that may not import upward.
LOW = ("refseg.claim1", "refseg.autograd", "refseg.models", "refseg.data")
#: Floors above them.
HIGH = ("refseg.run", "refseg.golden", "refseg.audit", "refseg.report", "refseg.cli",
        "refseg.commands")
#: The bottom modules (``refseg/*.py``) that are not the package, its entry points or the CLI.
NOT_BOTTOM = {"refseg", "refseg.__main__", "refseg.cli"}


def module_files(checkout: Path) -> dict[str, Path]:
    """{dotted module name: file} of ``refseg/`` in ``checkout``, ``_kernels.pyx`` included."""
    modules = {}
    for path in sorted((checkout / "refseg").rglob("*.py")):
        parts = path.relative_to(checkout).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    modules["refseg._kernels"] = checkout / "refseg" / "_kernels.pyx"
    return modules


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: None if is_package else -1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _strings(node: ast.AST) -> list[str]:
    """Module names named by a literal: ``_PUBLIC = {...}`` values, ``import_module("...")``."""
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
            isinstance(t, ast.Name) and t.id == "_PUBLIC" for t in node.targets):
        return [v.value for v in node.value.values if isinstance(v, ast.Constant)]
    if isinstance(node, ast.Call) and getattr(node.func, "attr",
                                              getattr(node.func, "id", None)) == "import_module":
        return [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
    return []


def _running_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:``."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", getattr(
                    child.test, "attr", None)) == "TYPE_CHECKING":
                todo += child.orelse
            else:
                todo.append(child)


def import_graph(checkout: Path) -> dict[str, set[str]]:
    """{module: the refseg modules it imports}, as the module docstring defines the edges."""
    modules = module_files(checkout)

    def resolve(name):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = {m: set() for m in modules}
    for module, path in modules.items():
        if path.suffix != ".py":
            continue
        for node in _running_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            targets = _strings(node)
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, module, path.name == "__init__.py")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for target in targets:
                if target == "refseg" or target.startswith("refseg."):
                    found = resolve(target)
                    if found and found != module:
                        edges[module].add(found)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _is_low(module: str, edges: dict[str, set[str]]) -> bool:
    if module.startswith(tuple(p + "." for p in LOW)) or module in LOW:
        return True
    is_package = any(other.startswith(module + ".") for other in edges)
    return module.count(".") == 1 and not is_package and module not in NOT_BOTTOM


def _is_high(module: str) -> bool:
    return module in HIGH or module.startswith(tuple(p + "." for p in HIGH))


def upward_arrows(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The edges from a low floor (or a bottom module) to a high floor."""
    return sorted((a, b) for a, targets in edges.items() for b in targets
                  if _is_low(a, edges) and _is_high(b))


def _checkout() -> Path:
    return Path(__file__).resolve().parent.parent


def test_the_graph_sees_imports_inside_functions_and_the_lazy_table():
    """The graph is not empty-handed: a function-level import, a ``_PUBLIC`` entry and the
    compiled kernels as a leaf of their own are all edges of today's tree."""
    edges = import_graph(_checkout())
    assert "refseg.golden" in edges["refseg.audit.trace"]  # inside write_matrix
    assert "refseg.run.training" in edges["refseg"]  # the lazy public tables
    assert "refseg.models.model" in edges["refseg.models"]
    assert "refseg._kernels" in edges["refseg.backend"]
    assert edges["refseg._kernels"] == set()
    assert "refseg" not in edges["refseg.backend"]


def test_the_graph_finds_a_planted_cycle_and_an_upward_arrow(tmp_path):
    package = tmp_path / "refseg"
    (package / "claim1").mkdir(parents=True)
    (package / "run").mkdir()
    for name in ("__init__.py", "claim1/__init__.py", "run/__init__.py", "_kernels.pyx"):
        (package / name).write_text("")
    (package / "claim1" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from refseg.run import c\n"
        "def f():\n    from refseg.run import b\n")
    (package / "run" / "c.py").write_text("from refseg.claim1 import a\n")
    (package / "run" / "b.py").write_text("from ..claim1.a import f\n")
    edges = import_graph(tmp_path)
    assert cycles(edges) == [{"refseg.claim1.a", "refseg.run.b"}]
    assert upward_arrows(edges) == [("refseg.claim1.a", "refseg.run.b")]


def test_no_import_cycle_but_the_deliberate_one():
    assert cycles(import_graph(_checkout())) == DELIBERATE_CYCLES


def test_no_low_module_imports_a_high_one():
    assert upward_arrows(import_graph(_checkout())) == []


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` loads, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for target in edges[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen - {start}


#: The reference: the wings that compute what the claims describe, one obvious algorithm per op.
#: None of them loads the engine (``refseg.engine``), directly or through another module.
REFERENCE = ("refseg.claim1", "refseg.autograd", "refseg.models", "refseg.data", "refseg.golden",
             "refseg.report.walkthrough", "refseg.images")


def _in(module: str, floors) -> bool:
    return any(module == f or module.startswith(f + ".") for f in floors)


def test_the_reference_never_loads_the_engine():
    edges = import_graph(_checkout())
    reference = [m for m in edges if _in(m, REFERENCE)]
    assert reference
    loads = {m: sorted(t for t in reachable(edges, m) if _in(t, ("refseg.engine",)))
             for m in reference}
    assert {m: t for m, t in loads.items() if t} == {}


def test_each_floor_keeps_to_its_own_arrows():
    """Reading an image needs nothing of claim 1; the runs (training, evaluation, the demo)
    do not reach up into the reports that show them."""
    edges = import_graph(_checkout())
    assert not [t for t in edges["refseg.images"] if _in(t, ("refseg.claim1",))]
    assert [(a, b) for a, targets in edges.items() if _in(a, ("refseg.run",))
            for b in targets if _in(b, ("refseg.report",))] == []


def test_vocabularies_live_in_leaves():
    edges = import_graph(_checkout())
    assert {home: reachable(edges, home) for home in LEAF_HOMES} == LEAF_HOMES


def main(checkout: Path) -> None:
    edges = import_graph(checkout)
    found = cycles(edges)
    print(f"modules {len(edges)}, edges {sum(map(len, edges.values()))}, "
          f"cycles {len(found)}, largest {max(map(len, found), default=0)}")
    for component in found:
        print(f"  cycle of {len(component)}: {' '.join(sorted(component))}")
    arrows = upward_arrows(edges)
    print(f"upward arrows {len(arrows)}")
    for a, b in arrows:
        print(f"  {a} -> {b}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else _checkout())
