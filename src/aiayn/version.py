"""The package's version, stated once: ``aiayn.__version__``, ``aiayn --version``, the wheel's metadata
(``pyproject.toml`` reads it from this file without importing anything) and what an export records.
A module of the package that needs it imports it from here, not from ``aiayn`` itself."""

__version__ = "0.1.0"

__all__ = ["__version__"]
