"""The API reference, generated from the docstrings by pdoc (``pip install -e ".[docs]"``).

    python scripts/api_docs.py            # writes docs/api/ (index.html and one page per module)
    python scripts/api_docs.py --check    # into a temporary folder; fails on any warning pdoc gives (CI)

Every module of the library is documented, the command line's (``aiayn.cli``, ``aiayn.__main__``) aside: the
packages' ``__all__`` lists their public names, and pdoc would otherwise stop at the top package. Docstrings
are read as reStructuredText (``:func:`...``` cross-references, as the code writes them). ``docs/api/`` is
not committed: it is made from the code, by this one command.
"""

from __future__ import annotations

import argparse
import pkgutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = ("aiayn.__main__", "aiayn.cli")


def modules() -> list[str]:
    import aiayn

    names = ["aiayn"] + [m.name for m in pkgutil.walk_packages(aiayn.__path__, "aiayn.")]
    return [n for n in names if not n.startswith(SKIP)]


def build(out: Path) -> list[str]:
    """Write the pages into ``out``; the warnings pdoc gave, as text."""
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="restructuredtext", show_source=True, search=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*modules(), output_directory=out)
    # every module is named, so a package that lists a submodule in __all__ adds it a second time: harmless
    return [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught
            if ("pdoc" in Path(w.filename).parts or "aiayn" in str(w.message))
            and "has already been added" not in str(w.message)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "api")
    p.add_argument("--check", action="store_true", help="build into a temporary folder; fail on any warning")
    args = p.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="aiayn-api-")) if args.check else args.out
    problems = build(out)
    for line in problems:
        print(line, file=sys.stderr)
    pages = sorted(out.rglob("*.html"))
    print(f"{len(pages)} pages in {out}; {len(problems)} warnings")
    return 1 if problems or not pages else 0


if __name__ == "__main__":
    sys.exit(main())
