"""What checking a block gave, case by case, and its lines in the report; no torch, so the parent process of
`attn-mt check` reads a child's results without loading it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from attn_mt.check.mistakes import BY_ID

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


@dataclass
class CaseResult:
    """One case: passed or not, the first difference, the mistake it shows, a note."""

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
        """The block's lines of the report; a mistake's lesson and a note are given once, the first time
        they come up (`taught` holds those given already, in the blocks before this one)."""
        taught = set() if taught is None else taught
        if not self.found:
            return f"{self.block}: not found (skipped)"
        passed = sum(case.passed for case in self.cases)
        lines = [f"{self.block}: {passed} of {len(self.cases)} cases passed"]
        for case in self.cases:
            detail = f": {case.detail}" if case.detail else ""
            lines.append(f"  {'ok  ' if case.passed else 'FAIL'}  {case.case}{detail}")
            if case.mistake:
                mistake = BY_ID[case.mistake]
                lines.append(f"        mistake [{mistake.id}]: {mistake.title}.")
                if mistake.id not in taught:
                    lines.append(f"        {mistake.lesson}")
                    taught.add(mistake.id)
            if case.note and f"note: {case.note}" not in taught:
                lines.append(f"        note: {case.note}")
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
