"""The package as others adopt it: its version is stated once and reported, type checkers see its hints, and
the command line answers ``--help`` without loading PyTorch (the time it saves is measured by
``benchmarks/startup.py``, not here)."""

import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import aiayn


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_version_is_the_installed_distributions_and_the_command_reports_it():
    assert aiayn.__version__ == importlib.metadata.version("aiayn")
    out = subprocess.run([sys.executable, "-m", "aiayn", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"aiayn {aiayn.__version__}"


@pytest.mark.parametrize("code", [
    "import aiayn",
    "import aiayn.cli",
    "import aiayn.viz.files",
    "from aiayn.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
    "from aiayn.cli import main\ntry:\n    main(['count', '--help'])\nexcept SystemExit:\n    pass",
])
def test_the_command_line_and_the_top_level_import_leave_torch_unloaded(code):
    loaded = run_python(f"{code}\nimport sys\nprint('torch' in sys.modules, 'matplotlib' in sys.modules)")
    assert loaded.split()[-2:] == ["False", "False"], f"{code!r} loaded torch or matplotlib: {loaded}"


def test_lazy_names_are_the_real_functions_and_unknown_names_fail_clearly():
    from aiayn.models import build
    from aiayn.models.checkpoint import load
    from aiayn.training.checkpoint import load as old_home

    assert aiayn.build is build
    assert aiayn.load is load is old_home  # aiayn.training.checkpoint is an alias of aiayn.models.checkpoint
    assert set(aiayn.__all__) <= set(dir(aiayn))
    with pytest.raises(AttributeError, match="no attribute 'buld'"):
        aiayn.__getattr__("buld")
    viz = importlib.import_module("aiayn.viz")
    assert set(viz.__all__) == set(viz._LAZY)
    assert all(callable(getattr(viz, name)) for name in viz.__all__)


def test_the_package_ships_py_typed():
    assert (Path(aiayn.__file__).parent / "py.typed").is_file()
