"""`attn-mt check FILE` and `check(...)`: a learner's implementation of each block of the chapter, run
against attn-mt's own modules on the edge cases, with the common mistakes named.

`check(masked_softmax)` (in Jupyter) checks one function or class in this process and prints its
cases; `check(globals())` checks every block it finds. `check_file(path)` runs a file in a child
process with a time limit (process.py), which is what `attn-mt check` and any server must use; it
loads no torch in the calling process. Both report in the learner's language: `check(..., lang="zh")`,
else the language a notebook put in force (`use_language("zh")`, as the exercise notebooks' copies do),
else $ATTN_MT_LANG, else the locale's; `check_file` in the language in force.
"""

from __future__ import annotations

from collections.abc import Mapping

from attn_mt.check.mistakes import MISTAKES
from attn_mt.check.process import FileReport, check_file
from attn_mt.check.results import BLOCK_NAMES, BlockResult
from attn_mt.i18n import in_language, resolve_language
from attn_mt.i18n.catalogues import chosen_language

__all__ = ["BLOCK_NAMES", "MISTAKES", "BlockResult", "FileReport", "check", "check_file"]


def check(target: object, block: str | None = None, lang: str | None = None) -> list[BlockResult]:
    """Check a learner's function or class, or every block in a namespace (`globals()`); print the cases in
    `lang` (en, zh or vi; None: the language put in force, else $ATTN_MT_LANG, else the locale's)."""
    from attn_mt.check.runner import block_named, check_block, check_namespace

    with in_language(resolve_language(lang) if lang else chosen_language() or resolve_language()):
        if isinstance(target, Mapping):
            results = check_namespace(target, (block,) if block else ())
        else:
            results = [check_block(block_named(target, block), target)]
        taught: set[str] = set()
        for result in results:
            print(result.text(taught))
    return results
