"""The package's import graph, read from the source, and where it breaks the one-way flow.

    python scripts/import_graph.py            # counts, then the circles, the upward imports and the self-imports
    python scripts/import_graph.py --check    # the same; exit 1 on any circle, more than 3 upward imports, or any
                                              # module but aiayn/__init__.py importing aiayn itself

Every module under ``src/aiayn`` is parsed with :mod:`ast` (nothing is imported). Every import counts: at the top
of a module, inside a function, under ``if TYPE_CHECKING:``, and ``importlib.import_module("aiayn.x")`` with a
literal name. ``import aiayn.x.y`` and ``from aiayn.x import y`` lead to the deepest module named (``y`` where it is
a submodule, else ``aiayn.x``); ``from aiayn import x`` to the submodule ``x``, or to ``aiayn`` itself where ``x`` is
a name ``aiayn/__init__.py`` hands on (a self-import); relative imports are resolved against the importing module's
package. An edge is a pair of modules, counted once (at its first line). The packages Python runs before the module
named (``aiayn/models/__init__.py`` for ``aiayn.models.registry``, imported from outside ``aiayn.models``) are
edges too, for the circles only. A module named by a string the registry builds (``aiayn.models.<family>``) is no
import: dispatching through :mod:`aiayn.models.registry` is how the layers stay one-way.

The flow (:data:`ORDER`; the README's Layout): ``layers`` -> ``models`` -> ``decoding`` / ``training`` /
``evaluation`` / ``analysis`` / ``viz`` -> ``pipelines`` -> ``recipes`` / ``serve`` -> ``cli``. A module may import
its own level and any below it. Beside them:

* ``io.py``, ``defaults.py`` and ``version.py`` are at the bottom (files written atomically, digests;
  ``transformers``' defaults; ``__version__``): every package may read them, and they import nothing of ours.
* ``data`` (corpora, tokenizers, batches) sits with ``layers``, under ``models``: it imports no model.
* ``convert`` (keys, hub ids and shards, folders, export drivers) sits with ``decoding`` and ``training``, above
  ``models``: it reaches a family only through the registry. The helpers a family's key table (``hf.py``) and
  counts (``counts.py``) are written with sit below both, in :mod:`aiayn.models.keys` and
  :mod:`aiayn.models.formulas`.
* ``inference.py`` is the old name of ``pipelines`` (a re-export) and sits with it.
* ``benchmark`` measures pipelines, recipes and peers: above ``recipes`` and ``serve``, under ``cli``
  (``aiayn bench``).
* ``cli`` and ``__main__`` are the top; ``aiayn/__init__.py`` hands names on from everywhere and is imported by
  nothing of ours (part (c)).

:data:`DOORS` lists the imports that run up by design, each made inside the function that needs it (or for type
checkers only), so importing the module never runs them: a model's ``generate`` runs decoding, and
``from_pretrained`` / ``save_pretrained`` convert. A door is neither an upward import nor part of a circle; the same
import made at the top of a module is both.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "aiayn"

ORDER: dict[str, int] = {  # the package (or top-level module) under aiayn -> its level; lower imports nothing higher
    "io": 0,
    "defaults": 0,
    "version": 0,
    "layers": 1,
    "data": 1,
    "models": 2,
    "decoding": 3,
    "training": 3,
    "evaluation": 3,
    "analysis": 3,
    "viz": 3,
    "convert": 3,
    "pipelines": 4,
    "inference": 4,
    "recipes": 5,
    "serve": 5,
    "benchmark": 6,
    "cli": 7,
    "__main__": 7,
}
TOP = max(ORDER.values()) + 1  # aiayn/__init__.py
DOORS = (  # (importer, imported, why): a module or package each; upward by design, when made inside a function
    ("aiayn.models", "aiayn.decoding", "a model's generate runs decoding"),
    ("aiayn.models.pretrained", "aiayn.convert", "from_pretrained / save_pretrained read and write Hugging Face"),
    ("aiayn.viz.files", "aiayn.pipelines", "aiayn viz reads a saved run's attention through its pipeline"),
)
MAX_UPWARD = 3  # --check tolerates this many upward imports (work in progress); none of the other two kinds


@dataclass(frozen=True)
class Import:
    """An import: ``source`` (a module) imports ``target`` (a module of ours) at ``line`` of ``file``.

    ``deferred``: made inside a function or under ``if TYPE_CHECKING:``, so importing ``source`` does not run it.
    ``implied``: ``target`` is a package that Python runs first to import the module named (``import aiayn.models.
    registry`` runs ``aiayn/models/__init__.py``); counted for the circles, not listed as an import of its own.
    """

    source: str
    target: str
    file: Path
    line: int
    deferred: bool = False
    implied: bool = False


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package: dotted name -> file (a package is its ``__init__.py``)."""
    found = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _deepest(name: str, known: dict[str, Path]) -> str | None:
    """``name`` or its longest prefix that is a module of ours (``None``: none is)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def _literal_import(node: ast.AST) -> str | None:
    """The name in ``importlib.import_module("...")`` / ``import_module("...")`` with a literal string."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    value = node.args[0].value
    return value if name == "import_module" and isinstance(value, str) else None


def _type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST, deferred: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under ``tree`` with whether importing the module leaves it unrun (inside a function or lambda,
    or under ``if TYPE_CHECKING:``)."""
    for child in ast.iter_child_nodes(tree):
        yield child, deferred
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _nodes(child, True)
        elif isinstance(child, ast.If) and _type_checking(child.test):
            for node in child.body:
                yield node, True
                yield from _nodes(node, True)
            for node in child.orelse:
                yield node, deferred
                yield from _nodes(node, deferred)
        else:
            yield from _nodes(child, deferred)


def imports_of(module: str, path: Path, known: dict[str, Path]) -> Iterator[Import]:
    """The imports of ``module`` (at ``path``) that lead to a module of ours, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node, deferred in _nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, one level up per dot past the first
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif (literal := _literal_import(node)) is not None:
            targets = [literal]
        line = getattr(node, "lineno", 0)
        for name in targets:
            target = _deepest(name, known) if _within(name, PACKAGE) else None
            if target is None or target == module:
                continue
            yield Import(module, target, path, line, deferred)
            parts = target.split(".")
            for n in range(2, len(parts)):  # the packages above the target that do not hold the importer
                if not _within(module, ".".join(parts[:n])):
                    yield Import(module, ".".join(parts[:n]), path, line, deferred, implied=True)


def graph(src: Path = SRC) -> tuple[dict[str, Path], list[Import]]:
    """``(modules, edges)``: every module of ours, and every edge between two of them, once: at its first line,
    ``deferred`` if every import making it is, ``implied`` if every one is."""
    known = modules(src)
    found: dict[tuple[str, str], Import] = {}
    for m, p in known.items():
        for i in imports_of(m, p, known):
            seen = found.get((i.source, i.target))
            if seen is None:
                found[(i.source, i.target)] = i
                continue
            first = seen if seen.implied <= i.implied and (seen.implied < i.implied or seen.line <= i.line) else i
            found[(i.source, i.target)] = replace(first, deferred=seen.deferred and i.deferred,
                                                  implied=seen.implied and i.implied)
    return known, sorted(found.values(), key=lambda i: (i.source, i.line, i.target))


def package_of(module: str) -> str:
    """The package (or top-level module) under ``aiayn`` that holds ``module`` (``aiayn`` for the top package)."""
    return module.split(".")[1] if "." in module else PACKAGE


def level(module: str) -> int:
    """``module``'s level in :data:`ORDER` (``aiayn`` itself is above everything).

    Raises:
        KeyError: a package :data:`ORDER` does not place (add it there).
    """
    package = package_of(module)
    if package == PACKAGE:
        return TOP
    if package not in ORDER:
        raise KeyError(f"{module}: package {package!r} is not in ORDER; place it in scripts/import_graph.py")
    return ORDER[package]


def is_door(i: Import) -> bool:
    """An import upward by design (:data:`DOORS`), made where importing its module does not run it."""
    return i.deferred and any(_within(i.source, a) and _within(i.target, b) for a, b, _ in DOORS)


def circles(names: list[str], edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module over ``edges`` but the doors (Tarjan's algorithm,
    iterative), each sorted, the largest first."""
    out: dict[str, set[str]] = {n: set() for n in names}
    for i in edges:
        out.setdefault(i.target, set())
        if not is_door(i):
            out.setdefault(i.source, set()).add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in out:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(out[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(out[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def upward(edges: list[Import]) -> list[Import]:
    """The imports from a lower level to a higher one, doors aside (those into ``aiayn`` itself are
    :func:`self_imports`)."""
    return [i for i in edges if not i.implied and i.target != PACKAGE and level(i.target) > level(i.source)
            and not is_door(i)]


def doors(edges: list[Import]) -> list[Import]:
    """The imports upward by design (:data:`DOORS`)."""
    return [i for i in edges if not i.implied and level(i.target) > level(i.source) and is_door(i)]


def self_imports(edges: list[Import]) -> list[Import]:
    """The imports of ``aiayn`` itself (``import aiayn``, ``from aiayn import name``) by any module but its
    ``__init__``."""
    return [i for i in edges if i.target == PACKAGE and i.source != PACKAGE]


def _shown(path: Path) -> Path:
    """``path`` from the repository's root where it is inside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _where(i: Import) -> str:
    return f"{_shown(i.file)}:{i.line}"


def _edge(i: Import) -> str:
    return f"  {_where(i):44} {i.source} ({level(i.source)}) -> {i.target} ({level(i.target)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 on a circle, more than {MAX_UPWARD} upward imports, or a self-import")
    parser.add_argument("--src", type=Path, default=SRC, help="the folder holding the aiayn package (default: src)")
    args = parser.parse_args(argv)
    known, edges = graph(args.src)
    try:
        rings, up, selfs, made = circles(list(known), edges), upward(edges), self_imports(edges), doors(edges)
    except KeyError as e:  # a package ORDER does not place
        print(f"import_graph: {e.args[0]}", file=sys.stderr)
        return 2
    print(f"modules: {len(known)}, imports: {sum(not i.implied for i in edges)} (module -> module, each once)")
    print(f"circles: {len(rings)} ({sum(len(r) for r in rings)} files in circles)")
    print(f"upward imports: {len(up)}")
    print(f"self-imports: {len(selfs)}")
    print(f"doors (upward by design, made when called): {len(made)}")
    print("\n(a) circles")
    for ring in rings:
        print(f"  {len(ring)} modules:")
        for name in ring:
            print(f"    {name:44} {_shown(known[name])}")
    print("\n(b) upward imports (level in ORDER)")
    for i in up:
        print(_edge(i))
    print("\n(c) self-imports")
    for i in selfs:
        print(f"  {_where(i):44} {i.source}")
    print("\ndoors")
    for i in made:
        print(_edge(i))
    if args.check and (rings or len(up) > MAX_UPWARD or selfs):
        print(f"\nfailed: {len(rings)} circles, {len(up)} upward imports (at most {MAX_UPWARD}), {len(selfs)} "
              f"self-imports", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
