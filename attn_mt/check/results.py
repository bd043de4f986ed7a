"""What checking a block gave, case by case, and its lines in the report; no torch, so the parent process of
`attn-mt check` reads a child's results without loading it.

A case's name and its mistake's id stay English in the results (they name things); the report translates
the name, the mistake's title and lesson where it shows them. A case's detail and note come written in the
language the check ran in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from attn_mt.check.mistakes import BY_ID
from attn_mt.i18n import _, pgettext

# The blocks in the order they are checked (blocks.BLOCKS, which tests/test_check.py compares).
BLOCK_NAMES = (
    "NWKernelRegression",
    "masked_softmax",
    "AdditiveAttention",
    "DotProductAttention",
    "transpose_qkv",
    "transpose_output",
    "MultiHeadAttention",
    "PositionalEncoding",
    "PositionWiseFFN",
    "AddNorm",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerDecoder",
    "Seq2SeqEncoder",
    "Seq2SeqAttentionDecoder",
)


def note_line(note: str) -> str:
    """`note: ...` in the language in force (the note itself comes written in it)."""
    return _("note: {note}").format(note=note)


@dataclass
class CaseResult:
    """One case: passed or not, the first difference, the mistake it shows, a note (`case` the English name
    blocks.py marks, `detail` and `note` in the check's language)."""

    case: str
    passed: bool
    detail: str = ""
    mistake: str = ""
    note: str = ""


@dataclass
class BlockResult:
    """One block: found in the learner's code or not, and its cases."""

    block: str
    found: bool
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Found, and every case passed."""
        return self.found and all(case.passed for case in self.cases)

    def text(self, taught: set[str] | None = None) -> str:
        """The block's lines of the report, in the language in force; a mistake's lesson and a note are
        given once, the first time they come up (`taught` holds those given already, in the blocks before
        this one)."""
        taught = set() if taught is None else taught
        if not self.found:
            return _("{block}: not found (skipped)").format(block=self.block)
        passed = sum(case.passed for case in self.cases)
        lines = [
            _("{block}: {passed} of {total} cases passed").format(
                block=self.block, passed=passed, total=len(self.cases)
            )
        ]
        ok, fail = pgettext("a case of attn-mt check", "ok"), pgettext("a case of attn-mt check", "FAIL")
        width = max(len(ok), len(fail))
        for case in self.cases:
            detail = f": {case.detail}" if case.detail else ""
            lines.append(f"  {(ok if case.passed else fail).ljust(width)}  {_(case.case)}{detail}")
            if case.mistake:
                mistake = BY_ID[case.mistake]
                lines.append(
                    "        " + _("mistake [{id}]: {title}.").format(id=mistake.id, title=_(mistake.title))
                )
                if mistake.id not in taught:
                    lines.append(f"        {_(mistake.lesson)}")
                    taught.add(mistake.id)
            if case.note and f"note: {case.note}" not in taught:
                lines.append("        " + note_line(case.note))
                taught.add(f"note: {case.note}")
        return "\n".join(lines)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> BlockResult:
        """Rebuild from `asdict` (the worker's JSON)."""
        cases = [CaseResult(**case) for case in data["cases"]]  # type: ignore[union-attr, arg-type]
        return cls(str(data["block"]), bool(data["found"]), cases)

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return asdict(self)
