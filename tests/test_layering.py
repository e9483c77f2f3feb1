"""Imports flow one way, as the README's Layout says: ``layers`` -> ``models`` -> ``decoding``, ``training``,
``evaluation``, ``analysis`` -> ``pipelines`` -> ``viz`` -> ``recipes`` -> ``cli``, and ``pipelines`` -> ``serve`` ->
``cli`` (the server only parses, calls a pipeline and answers). Read from the source (every
``import``, at the top of a module or inside a function), so an import made late to save start-up time counts too."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "aiayn"
ABOVE = {  # package -> the packages it may never import
    "layers": {"serve", "models", "pipelines", "viz", "recipes", "cli", "benchmark"},
    "models": {"serve", "pipelines", "viz", "recipes", "cli", "benchmark"},
    "decoding": {"serve", "pipelines", "viz", "recipes", "cli", "benchmark"},
    "training": {"serve", "pipelines", "viz", "recipes", "cli", "benchmark"},
    "evaluation": {"serve", "pipelines", "viz", "recipes", "cli", "benchmark"},
    "analysis": {"serve", "pipelines", "viz", "recipes", "cli", "benchmark"},
    "pipelines": {"serve", "viz", "recipes", "cli", "benchmark"},
    "viz": {"serve", "recipes", "cli", "benchmark"},
    "recipes": {"serve", "cli", "benchmark"},
    "serve": {"viz", "recipes", "cli", "benchmark"},
}


def imported(path: Path) -> set[str]:
    """The ``aiayn`` subpackages ``path`` imports anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        found |= {n.split(".")[1] for n in names if n.startswith("aiayn.")}
    return found


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_no_module_imports_a_package_above_its_own(package):
    wrong = {f"{path.relative_to(SRC)}: {', '.join(sorted(imported(path) & ABOVE[package]))}"
             for path in sorted((SRC / package).rglob("*.py")) if imported(path) & ABOVE[package]}
    assert not wrong, f"imports against the flow: {sorted(wrong)}"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from aiayn.recipes.lm import Config\n    import aiayn.cli\n")
    assert imported(module) == {"recipes", "cli"}
