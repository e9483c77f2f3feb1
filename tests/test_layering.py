"""Imports flow one way, as the README's Layout says: ``layers`` -> ``models`` -> ``decoding`` / ``training`` /
``evaluation`` / ``analysis`` / ``viz`` -> ``pipelines`` -> ``recipes`` / ``serve`` -> ``cli``. ``data`` sits beside
``layers`` and imports no model; ``convert`` (keys, folders, export drivers) sits above ``models``; ``benchmark``
measures from above ``recipes`` and ``serve``; nothing imports ``cli``; no module but ``aiayn/__init__.py`` imports
``aiayn`` itself.

The imports are read from the source by ``scripts/import_graph.py`` (the graph ``python scripts/import_graph.py``
prints): every ``import``, at the top of a module, inside a function or under ``TYPE_CHECKING``, written as
``import aiayn.x``, ``from aiayn.x import y``, ``from aiayn import x`` or relatively, so an import made late to save
start-up time counts too. The only imports that run up are the script's ``DOORS``, each made inside the method that
needs it: a model's ``generate`` runs decoding, and ``from_pretrained`` / ``save_pretrained`` convert."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _script():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("import_graph", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


g = _script()

MIDDLE = {"decoding", "training", "evaluation", "analysis", "viz", "convert"}
PIPELINES = {"pipelines", "inference"}  # inference.py: the old name of pipelines
TOP = {"recipes", "serve", "benchmark", "cli"}
ABOVE = {  # package -> the packages it may never import (doors aside)
    "layers": {"models", *MIDDLE, *PIPELINES, *TOP},
    "data": {"models", *MIDDLE, *PIPELINES, *TOP},  # data imports no model
    "models": {*MIDDLE, *PIPELINES, *TOP},  # the doors: generate -> decoding, from/save_pretrained -> convert
    "decoding": {"models", *PIPELINES, *TOP},  # loops run a model's session, and name no model
    "training": {*PIPELINES, *TOP},
    "evaluation": {*PIPELINES, *TOP},
    "analysis": {*PIPELINES, *TOP},
    "viz": {*PIPELINES, *TOP},
    "convert": {*PIPELINES, *TOP},
    "pipelines": TOP,
    "inference": TOP,
    "recipes": {"serve", "benchmark", "cli"},
    "serve": {"recipes", "benchmark", "cli"},  # scheduling only: it calls pipelines
    "benchmark": {"cli"},
    "cli": set(),  # the top: every row above names it, so nothing imports it
}
BOTTOM = ("io", "defaults", "version")  # modules every package may read, which import nothing of ours
SIDEWAYS = {("decoding", "models"), ("recipes", "serve"), ("serve", "recipes")}  # bans that are not upward


@pytest.fixture(scope="module")
def graph():
    return g.graph(SRC)


def _show(edges):
    return sorted(f"{g._where(i)}: {i.source} -> {i.target}" for i in edges)


def test_every_package_has_a_row():
    packages = {p.name for p in (SRC / "aiayn").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(ABOVE) - {"inference"}, "give a new package its row here and its level in ORDER"
    modules = {p.stem for p in (SRC / "aiayn").glob("*.py")} - {"__init__", "__main__"}
    assert modules == {"inference", *BOTTOM}


def test_the_rows_and_the_scripts_order_agree():
    """What a row bans is exactly what stands above the package in the script's ``ORDER`` (and :data:`SIDEWAYS`)."""
    for package, banned in ABOVE.items():
        above = {q for q in ABOVE if g.ORDER[q] > g.ORDER[package]}
        assert banned == above | {b for a, b in SIDEWAYS if a == package}, package
    assert all(g.ORDER[name] == 0 for name in BOTTOM)


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_no_module_imports_a_package_above_its_own(package, graph):
    _, edges = graph
    wrong = [i for i in edges if not i.implied and g.package_of(i.source) == package
             and g.package_of(i.target) in ABOVE[package] and not g.is_door(i)]
    assert not wrong, f"imports against the flow: {_show(wrong)}"


@pytest.mark.parametrize("module", BOTTOM)
def test_the_bottom_modules_import_nothing_of_ours(module, graph):
    _, edges = graph
    wrong = [i for i in edges if i.source == f"aiayn.{module}"]
    assert not wrong, _show(wrong)


def test_models_import_neither_training_nor_analysis(graph):
    """Not even when called: a saved model is read in models (aiayn.models.checkpoint), and the families' counts
    add up aiayn.models.formulas."""
    _, edges = graph
    wrong = [i for i in edges if not i.implied and g.package_of(i.source) == "models"
             and g.package_of(i.target) in ("training", "analysis")]
    assert not wrong, _show(wrong)


def test_the_doors_are_three_each_made_in_one_place(graph):
    """The upward imports made on purpose, inside a function: a model's generate (decoding), from/save_pretrained
    (convert), and ``aiayn viz`` reading a run through its pipeline; the issue's ceiling is 3."""
    _, edges = graph
    made = {(i.source, g.package_of(i.target)) for i in g.doors(edges)}
    assert made == {("aiayn.models.pretrained", "decoding"), ("aiayn.models.pretrained", "convert"),
                    ("aiayn.viz.files", "pipelines")}, _show(g.doors(edges))
    assert len(g.doors(edges)) == 3, _show(g.doors(edges))


def test_decoding_imports_no_model(graph):
    """Not even when called: a model's generate imports decoding (a door), never the other way."""
    _, edges = graph
    wrong = [i for i in edges if not i.implied and g.package_of(i.source) == "decoding"
             and g.package_of(i.target) == "models"]
    assert not wrong, _show(wrong)


def test_no_module_but_init_imports_aiayn_itself(graph):
    """``import aiayn`` / ``from aiayn import name`` inside the package: import the module that defines the name."""
    _, edges = graph
    wrong = g.self_imports(edges)
    assert not wrong, _show(wrong)


def test_no_circles(graph):
    known, edges = graph
    assert g.circles(list(known), edges) == []


def test_the_reader_sees_every_way_of_importing(tmp_path):
    files = {
        "__init__.py": "name = 1\n",
        "a/__init__.py": "",
        "a/z.py": "thing = 1\n",
        "b/__init__.py": "",
        "b/y.py": "",
        "c/__init__.py": "",
        "d/__init__.py": "",
        "d/w.py": "",
        "e/__init__.py": "v = 1\n",
        "a/x.py": ("from typing import TYPE_CHECKING\n"
                   "import aiayn.b.y\n"
                   "from aiayn import c\n"
                   "from . import z\n"
                   "from .z import thing\n"
                   "def f():\n"
                   "    from aiayn.d import w\n"
                   "    import aiayn\n"
                   "if TYPE_CHECKING:\n"
                   "    from aiayn.e import v\n"),
    }
    for name, text in files.items():
        (tmp_path / "aiayn" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "aiayn" / name).write_text(text)
    _, edges = g.graph(tmp_path)
    found = {(i.target, i.deferred, i.implied) for i in edges if i.source == "aiayn.a.x"}
    assert found == {("aiayn.b.y", False, False), ("aiayn.b", False, True), ("aiayn.c", False, False),
                     ("aiayn.a.z", False, False), ("aiayn.d.w", True, False), ("aiayn.d", True, True),
                     ("aiayn", True, False), ("aiayn.e", True, False)}
    assert [i.source for i in g.self_imports(edges)] == ["aiayn.a.x"]  # `import aiayn`, inside a function too
    (tmp_path / "aiayn" / "b" / "y.py").write_text("from aiayn.a import x\n")
    assert g.circles(["aiayn.a.x", "aiayn.b.y"], g.graph(tmp_path)[1]) == [["aiayn.a.x", "aiayn.b.y"]]


def test_a_door_is_only_a_door_when_made_inside_a_function(tmp_path):
    for name, text in {"__init__.py": "", "models/__init__.py": "", "decoding/__init__.py": "",
                       "models/m.py": "from aiayn import decoding\n\ndef generate():\n    from aiayn import decoding\n",
                       "models/n.py": "def generate():\n    from aiayn import decoding\n"}.items():
        (tmp_path / "aiayn" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "aiayn" / name).write_text(text)
    _, edges = g.graph(tmp_path)
    assert [i.source for i in g.upward(edges)] == ["aiayn.models.m"]  # also at the top: runs on import
    assert [i.source for i in g.doors(edges)] == ["aiayn.models.n"]
