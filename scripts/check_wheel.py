"""Build the sdist and the wheel, install each into a fresh virtual environment, and run a smoke test (CI).

    python scripts/check_wheel.py                 # build into a temporary folder, check both, clean up
    python scripts/check_wheel.py --dist dist     # keep the built files in dist/

What a user gets from ``pip install aiayn`` must work without this checkout: each package is installed into a
new venv (outside the repository, PyTorch first, as the README pins it) and, from another folder,

- ``import aiayn`` gives the version the package metadata states, and the package ships ``py.typed``;
- ``aiayn --version`` and ``aiayn count gpt2`` answer (124,439,808 parameters, the published 124M);
- the default job trains its first 20 updates and writes its checkpoint (``aiayn train --steps 20``).

The wheel must also hold the licence, and no tests or benchmarks. Fails (status 1) at the first step that does.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"  # the CPU wheel the README installs first; a bare requirement would pull a CUDA build
SMOKE = r"""
import importlib.metadata, pathlib, aiayn
assert aiayn.__version__ == importlib.metadata.version("aiayn"), aiayn.__version__
assert (pathlib.Path(aiayn.__file__).parent / "py.typed").is_file(), "py.typed is missing"
assert "site-packages" in aiayn.__file__, f"imported from the checkout, not the install: {aiayn.__file__}"
print("import ok", aiayn.__version__)
"""


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    print("$", " ".join(map(str, cmd)), flush=True)
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def check_wheel_contents(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("aiayn/__init__.py", "aiayn/py.typed"):
        if needed not in names:
            sys.exit(f"{wheel.name} lacks {needed}")
    if not any(n.endswith("licenses/LICENSE") for n in names):
        sys.exit(f"{wheel.name} lacks the licence file")
    stray = [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/", "scripts/"))]
    if stray:
        sys.exit(f"{wheel.name} holds files that are not the package: {stray[:5]}")


def smoke(package: Path, work: Path) -> None:
    venv = work / f"venv-{package.suffix.strip('.') or 'sdist'}"
    run(sys.executable, "-m", "venv", venv)
    python, aiayn = venv / "bin" / "python", venv / "bin" / "aiayn"
    run(python, "-m", "pip", "install", "-q", TORCH, package)
    run(python, "-c", SMOKE, cwd=work)
    version = run(aiayn, "--version", cwd=work).strip()
    count = run(aiayn, "count", "gpt2", cwd=work)
    if "124,439,808" not in count:
        sys.exit(f"aiayn count gpt2 did not report 124,439,808 parameters:\n{count}")
    runs = work / "runs"
    run(aiayn, "train", "--steps", "20", "--no-progress", "--out", runs, cwd=work)
    if not list(runs.rglob("model.safetensors")):
        sys.exit(f"aiayn train --steps 20 wrote no checkpoint under {runs}")
    print(f"{package.name}: {version}, count and 20 updates of the default job: ok", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dist", type=Path, default=None, help="folder for the built files (default: temporary)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aiayn-wheel-") as tmp:
        work = Path(tmp)
        dist = args.dist.resolve() if args.dist else work / "dist"
        run(sys.executable, "-m", "build", "--outdir", dist, ROOT)  # the sdist, then the wheel from it
        wheel, sdist = next(dist.glob("aiayn-*.whl")), next(dist.glob("aiayn-*.tar.gz"))
        check_wheel_contents(wheel)
        for package in (wheel, sdist):
            smoke(package, work)
    print("wheel and sdist: built, installed into fresh venvs, smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
