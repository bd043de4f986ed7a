"""Warnings over a long file: unknown words printed for the first few lines, then one summary line;
every other warning for its line; `--verbose` for all of them (attn_mt/commands/line_warnings.py)."""

from __future__ import annotations

import io

from attn_mt.commands.line_warnings import SHOWN_LINES, digested_words, print_line_warnings
from attn_mt.data.encode import UNKNOWN_SOURCE
from attn_mt.decoding.scoring import UNKNOWN_TARGET

CUT = "source cut to 10 tokens incl. <eos> (2 dropped: the end of the sentence is not translated)"


def printed(warnings: list[list[str]], verbose: bool = False) -> list[str]:
    """What print_line_warnings writes, line by line."""
    stream = io.StringIO()
    print_line_warnings(warnings, verbose, stream)
    return stream.getvalue().splitlines()


def test_a_warning_names_its_kind_and_words_after_a_sentence_number():
    assert digested_words(f"{UNKNOWN_SOURCE}: tom zzz") == (UNKNOWN_SOURCE, ["tom", "zzz"])
    assert digested_words(f"sentence 2: {UNKNOWN_TARGET}: qqq") == (UNKNOWN_TARGET, ["qqq"])
    assert digested_words(CUT) is None and digested_words(f"sentence 1: {CUT}") is None
    assert digested_words("sentence x: unknown source tokens") is None


def test_unknown_words_are_shown_for_the_first_lines_then_summed_up():
    lines: list[list[str]] = [[f"{UNKNOWN_SOURCE}: tom w{n}"] for n in range(1, 9)]  # lines 1-8
    lines[6].append(CUT)  # line 7: another kind of warning, printed whatever the count
    lines.insert(2, [])  # line 3: no warning
    lines.append([f"sentence 1: {UNKNOWN_SOURCE}: tom mary", f"sentence 2: {UNKNOWN_SOURCE}: mary"])  # 10
    got = printed(lines)
    shown = [f"attn-mt: warning: line {n}: {UNKNOWN_SOURCE}: tom w{w}" for n, w in [(1, 1), (2, 2), (4, 3)]]
    shown += [f"attn-mt: warning: line {n}: {UNKNOWN_SOURCE}: tom w{n - 1}" for n in (5, 6)]
    assert got == [
        *shown,
        f"attn-mt: warning: line 8: {CUT}",
        f"attn-mt: warning: {UNKNOWN_SOURCE} on 9 of 10 lines ({SHOWN_LINES} shown above): 10 distinct, "
        "most often tom (9), mary (1), w1 (1), w2 (1), w3 (1); --verbose prints every line",
    ]
    every = printed(lines, verbose=True)
    assert (
        len(every) == 8 + 1 + 2
        and every[-1] == f"attn-mt: warning: line 10: sentence 2: {UNKNOWN_SOURCE}: mary"
    )


def test_a_few_lines_need_no_summary_and_each_kind_is_counted_apart():
    lines = [[f"{UNKNOWN_SOURCE}: zzz"]] * SHOWN_LINES + [[f"{UNKNOWN_TARGET}: qqq"]] * (SHOWN_LINES + 1)
    got = printed(lines)
    assert len(got) == 2 * SHOWN_LINES + 1
    assert got[-1].startswith(
        f"attn-mt: warning: {UNKNOWN_TARGET} on {SHOWN_LINES + 1} of {len(lines)} lines"
    )
    assert "1 distinct, most often qqq (6)" in got[-1]


def test_translate_and_score_digest_a_file_of_unknown_words(tiny_runs, run_cli, tmp_path):
    source, target = tmp_path / "en.txt", tmp_path / "fr.txt"
    source.write_text("".join(f"zzz{n} alpha.\n" for n in range(12)), encoding="utf-8")
    target.write_text("".join(f"qqq{n} alpha.\n" for n in range(12)), encoding="utf-8")
    for verbose in ([], ["--verbose"]):
        done = run_cli("translate", str(tiny_runs.gru_bahdanau), "--input", str(source), *verbose)
        assert done.returncode == 0, done.stderr
        warnings = [line for line in done.stderr.splitlines() if line.startswith("attn-mt: warning:")]
        assert len(warnings) == (12 if verbose else SHOWN_LINES + 1), warnings
        assert warnings[0] == f"attn-mt: warning: line 1: {UNKNOWN_SOURCE}: zzz0"
        assert len(done.stdout.splitlines()) == 12
    scored = run_cli("score", str(tiny_runs.gru_bahdanau), "--source", str(source), "--target", str(target))
    assert scored.returncode == 0, scored.stderr
    warnings = [line for line in scored.stderr.splitlines() if line.startswith("attn-mt: warning:")]
    assert len(warnings) == 2 * SHOWN_LINES + 2
    assert warnings[-1].startswith(f"attn-mt: warning: {UNKNOWN_TARGET} on 12 of 12 lines")
