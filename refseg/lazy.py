"""Packages whose public names are imported when first used (PEP 562), so that importing one
module of a package does not load its neighbours. Standard library only."""
from __future__ import annotations

import importlib
import sys

INFRASTRUCTURE = "lazy imports of a package's public names"


def lazy_names(package: str, public: dict[str, str]):
    """``(__getattr__, __dir__)`` for ``package``, whose names ``public`` maps to the modules that
    define them: a name is imported when first asked for and then kept in the package."""

    def __getattr__(name):
        if name in public:
            value = getattr(importlib.import_module(public[name]), name)
            vars(sys.modules[package])[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
