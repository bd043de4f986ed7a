"""The `d2l` the check's child process finds when the real package is not installed: `d2l.torch` is
attn-mt's stand-in (`book_d2l.py`), so `from d2l import torch as d2l` in a learner's file works.

`install()` adds a finder at the end of `sys.meta_path`, after every finder of installed packages, so an
installed d2l is always found first; only the child (`worker.py`) calls it. `used()` says whether the
file imported the stand-in, which the report notes.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

PACKAGE = "d2l"
MODULE = "d2l.torch"


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `d2l` (an empty package) and `d2l.torch` (the stand-in), and remembers being asked."""

    def __init__(self) -> None:
        self.loaded = False  # d2l.torch, the stand-in
        self.package = False  # d2l, its empty package

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for the two names; None for any other, which the finders before this one did not find."""
        if fullname not in (PACKAGE, MODULE):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == PACKAGE)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """The default module object."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Fill `d2l.torch` with the stand-in's names; `d2l` itself holds only its submodule."""
        if module.__name__ != MODULE:
            self.package = True
            return
        from attn_mt.check import book_d2l

        names = {name: value for name, value in vars(book_d2l).items() if not name.startswith("__")}
        module.__dict__.update(names, __getattr__=book_d2l.__getattr__, __doc__=book_d2l.__doc__)
        self.loaded = True


FINDER = StandInFinder()


def install() -> None:
    """Let this process import the stand-in as `d2l.torch` when no d2l is installed."""
    if FINDER not in sys.meta_path:
        sys.meta_path.append(FINDER)


def used() -> bool:
    """Whether this process imported the stand-in."""
    return FINDER.loaded


def used_package() -> bool:
    """Whether this process imported the stand-in's package `d2l` (for another of its modules, maybe)."""
    return FINDER.package
