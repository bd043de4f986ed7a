"""`attn-mt check` and `attn_mt.check`: a learner's blocks run against attn-mt's modules.

The correct solution (tests/check_solutions/d2l_blocks.py, the book's 1.0 code) passes every block, and
so does the older edition's signatures; each common mistake, planted into that solution by one text
edit, is named; the variants that name mistakes equal attn-mt's modules with every switch at the book's
setting; a file that loops forever, imports what is missing, ends the process, asks for input or
prints without end gets one clear line within its limit, and nothing it started outlives the check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support.helpers import ROOT
from support.planted_mistakes import PLANTED, SOLUTION

from attn_mt.check import BLOCK_NAMES, check, check_file
from attn_mt.check.blocks import BLOCKS
from attn_mt.check.mistakes import BY_ID, MISTAKES
from attn_mt.check.process import OUTPUT_KEEP, OUTPUT_LIMIT
from attn_mt.check.runner import DROPOUT_NOTE, SEED, all_close, check_namespace, reference_for
from attn_mt.check.variants import BOOK
from attn_mt.check.worker import load
from attn_mt.commands.check import run_check
from attn_mt.errors import UserError

SOLUTIONS = ROOT / "tests" / "check_solutions"

# The older edition's signatures (d2l 0.17): sizes of every input, transposes as functions.
OLDER_EDITION = """

class AdditiveAttention(nn.Module):
    def __init__(self, key_size, query_size, num_hiddens, dropout, **kwargs):
        super().__init__(**kwargs)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        self.attention_weights = masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


def transpose_qkv(X, num_heads):
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1).permute(0, 2, 1, 3)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X, num_heads):
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2]).permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


class PositionWiseFFN(nn.Module):
    def __init__(self, ffn_num_input, ffn_num_hiddens, ffn_num_outputs):
        super().__init__()
        self.dense1 = nn.Linear(ffn_num_input, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X):
        return self.dense2(self.relu(self.dense1(X)))
"""


def load_text(text: str, folder: Path) -> dict[str, object]:
    """The globals of a learner's file holding `text`."""
    path = folder / "blocks.py"
    path.write_text(text, encoding="utf-8")
    return load(path)


def test_every_mistake_has_a_planted_test_and_a_row_in_the_docs() -> None:
    assert sorted(PLANTED) == sorted(mistake.id for mistake in MISTAKES)
    assert len(PLANTED) >= 12
    rows = [
        line.split(" | ")[0].strip("| `") for line in (ROOT / "docs" / "check.md").read_text().splitlines()
    ]
    assert [row for row in rows if row in BY_ID] == [mistake.id for mistake in MISTAKES]


def test_the_book_solution_passes_every_block(tmp_path: Path) -> None:
    results = check_namespace(load(SOLUTION))
    assert [result.block for result in results] == [block.name for block in BLOCKS] == list(BLOCK_NAMES)
    failures = [result.text() for result in results if not result.passed]
    assert not failures, "\n".join(failures)
    cases = [case for result in results for case in result.cases]
    # the book's -1e6 gives a query with no valid key uniform weights; accepted, with a note
    zero_length = [case for case in cases if case.case == "a valid length of 0"]
    assert len(zero_length) == 4 and all("uniform" in case.note for case in zero_length)


def test_the_older_editions_signatures_pass(tmp_path: Path) -> None:
    namespace = load_text(SOLUTION.read_text(encoding="utf-8") + OLDER_EDITION, tmp_path)
    results = check_namespace(
        namespace, ("AdditiveAttention", "transpose_qkv", "transpose_output", "PositionWiseFFN")
    )
    assert all(result.passed for result in results), "\n".join(result.text() for result in results)


# a planted mistake that also makes a second one: .repeat(h) on a 2-D valid_lens fails as 1-D-only code does
ALSO_NAMED = {"valid-lens-tiled": {"valid-lens-2d-as-1d"}}


@pytest.mark.parametrize("mistake_id", sorted(PLANTED))
def test_a_planted_mistake_is_named(mistake_id: str, tmp_path: Path) -> None:
    block, old, new = PLANTED[mistake_id]
    text = SOLUTION.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"the solution must hold {old!r} once"
    [result] = check_namespace(load_text(text.replace(old, new), tmp_path), (block,))
    assert not result.passed
    named = {case.mistake for case in result.cases if not case.passed}
    allowed = {mistake_id, "", *ALSO_NAMED.get(mistake_id, ())}
    assert named == {mistake_id} or (mistake_id in named and named <= allowed), result.text()
    assert f"mistake [{mistake_id}]: {BY_ID[mistake_id].title}" in result.text()


def test_a_mistake_in_masked_softmax_is_named_in_the_attention_that_calls_it(tmp_path: Path) -> None:
    text = SOLUTION.read_text(encoding="utf-8").replace("value=-1e6", "value=0")
    [result] = check_namespace(load_text(text, tmp_path), ("MultiHeadAttention",))
    failing = [case for case in result.cases if not case.passed]
    assert [case.case for case in result.cases if case.passed] == ["no valid_lens"]
    assert {case.mistake for case in failing if "train" not in case.case} == {"mask-with-zero"}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_the_variants_at_the_books_settings_equal_attn_mts_modules(block) -> None:
    for index, case in enumerate(block.cases):
        if case.train:
            continue
        inputs = case.inputs(torch.Generator().manual_seed(SEED + index))
        reference = reference_for(block, case)
        with torch.no_grad():
            expected = block.run_reference(reference, inputs, case.sizes)
            assert all_close(block.variant(reference, inputs, case.sizes, BOOK), expected), case.name


def test_check_of_one_function_prints_its_cases(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    namespace = load_text(
        SOLUTION.read_text(encoding="utf-8").replace("dim=-1)\n\n\nclass", "dim=1)\n\n\nclass"), tmp_path
    )
    [result] = check(namespace["masked_softmax"])
    printed = capsys.readouterr().out
    assert "masked_softmax: 1 of 6 cases passed" in printed
    assert "mistake [softmax-wrong-axis]" in printed and not result.passed
    check(namespace["masked_softmax"], lang="vi")  # in Jupyter, in the learner's language
    printed = capsys.readouterr().out
    assert "masked_softmax: 1/6 trường hợp đạt" in printed
    assert (
        "lỗi sai [softmax-wrong-axis]: softmax theo sai trục (theo truy vấn, không phải theo khóa)."
        in printed
    )


def run_cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    """`attn-mt check ...` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "attn_mt", "check", *arguments], capture_output=True, text=True
    )


def test_cli_names_a_mistake_and_exits_1(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(SOLUTION.read_text(encoding="utf-8").replace(" / math.sqrt(d)", ""), encoding="utf-8")
    done = run_cli(str(wrong), "--block", "masked_softmax", "--block", "DotProductAttention")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "masked_softmax: 6 of 6 cases passed" in done.stdout
    assert "mistake [no-scaling]: no 1/sqrt(d) scaling of the dot products." in done.stdout
    assert done.stdout.rstrip().endswith("1 of 2 blocks passed")


def planted_file(mistake_id: str, folder: Path) -> tuple[str, Path]:
    """The book's solution with one planted mistake, written to a file: its block and the file."""
    block, old, new = PLANTED[mistake_id]
    path = folder / f"{mistake_id}.py"
    path.write_text(SOLUTION.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    return block, path


def test_cli_names_a_planted_mistake_in_chinese(tmp_path: Path) -> None:
    block, wrong = planted_file("mask-off-by-one", tmp_path)
    done = run_cli(str(wrong), "--block", block, "--lang", "zh")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["masked_softmax：6 个用例中通过了 1 个", "  通过  没有 valid_lens"]
    assert lines[2].startswith("  失败  一维 valid_lens: output[0:2, 0:2, 0:4] 不同（其 16 个元素中有 ")
    assert lines[2].endswith("（输入：X (2, 2, 4), valid_lens [2, 3]）")  # written by the check's child
    assert (
        lines[3]
        == "        错误 [mask-off-by-one]：掩蔽多保留了一个键（用了 <= valid_len 而不是 < valid_len）。"
    )
    assert lines[4].startswith("        当 j < valid_len 时第 j 个键才是真实的（位置从 0 开始数）")
    assert lines[-1] == "1 个块中通过了 0 个"


def test_cli_names_a_planted_mistake_in_the_language_of_attn_mt_lang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTN_MT_LANG", "vi")
    block, wrong = planted_file("mask-with-zero", tmp_path)
    done = run_cli(str(wrong), "--block", block)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["masked_softmax: 1/6 trường hợp đạt", "  đạt  không có valid_lens"]
    assert lines[2].startswith("  LỖI  valid_lens 1 chiều: output[0:2, 0:2, 0:4] khác (16 trong 16 phần tử")
    assert lines[2].endswith("(đầu vào: X (2, 2, 4), valid_lens [2, 3])")
    assert lines[3] == "        lỗi sai [mask-with-zero]: phần đệm bị che bằng 0 thay vì một số âm rất lớn."
    assert lines[4].startswith("        Một điểm bị che bằng 0 vẫn cho exp(0) = 1 trong softmax")
    assert lines[-1] == "0/1 khối đạt"
    missing = run_cli(str(tmp_path / "nowhere.py"), "--lang", "zh")
    assert missing.returncode == 2 and f"没有这个要检查的文件：{tmp_path / 'nowhere.py'}" in missing.stderr


def test_a_file_that_never_finishes_is_stopped_within_its_limit(tmp_path: Path) -> None:
    looping = tmp_path / "looping.py"
    looping.write_text(
        "def masked_softmax(X, valid_lens):\n    while True:\n        pass\n", encoding="utf-8"
    )
    start = time.monotonic()
    report = check_file(looping, timeout_s=8)
    assert time.monotonic() - start < 13
    assert report.error == (
        "looping.py did not finish within 8 s (stopped in masked_softmax): look for a loop that never ends"
    )
    assert not report.passed


def test_a_file_that_imports_what_is_missing_says_so(tmp_path: Path) -> None:
    path = tmp_path / "imports.py"
    path.write_text("import torch\nfrom d2l_not_installed import torch as d2l\n", encoding="utf-8")
    report = check_file(path, timeout_s=60)
    assert report.error == (
        "line 2 of imports.py imports d2l_not_installed, which is not installed in this Python; write the "
        "blocks with torch alone (attn-mt check needs no d2l)"
    )
    assert "error: line 2 of imports.py" in report.text()


def test_unknown_block_is_a_user_error() -> None:
    with pytest.raises(
        UserError,
        match="--block masked_sofmax: not one of NWKernelRegression, masked_softmax, AdditiveAttention",
    ):
        run_check(SOLUTION, ["masked_sofmax"], 60)


def test_a_file_starting_with_a_byte_order_mark_loads_as_python_runs_it(tmp_path: Path) -> None:
    path = tmp_path / "saved_by_notepad.py"
    path.write_bytes(b"\xef\xbb\xbf" + SOLUTION.read_bytes())
    report = check_file(path, ("masked_softmax",), timeout_s=60)
    assert report.error == ""
    assert report.passed, report.text()


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), float("-inf"), 0.0, -1.0])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused(timeout: float) -> None:
    with pytest.raises(UserError, match=r"^--timeout must be a positive finite number of seconds, got "):
        run_check(SOLUTION, [], timeout)
    with pytest.raises(UserError, match=r"^timeout_s must be a positive finite number of seconds"):
        check_file(SOLUTION, timeout_s=timeout)


def test_a_file_that_ends_the_process_while_loading_says_so(tmp_path: Path) -> None:
    path = tmp_path / "leaves.py"
    path.write_text("import os\nprint('bye', flush=True)\nos._exit(0)\n", encoding="utf-8")
    report = check_file(path, timeout_s=60)
    assert report.error == (
        "leaves.py ended the check's process while loading the file (exit code 0); its last output: bye"
    )
    assert not report.passed


def test_a_process_the_file_starts_does_not_outlive_the_check(tmp_path: Path) -> None:
    path = tmp_path / "spawns.py"
    path.write_text(
        "import pathlib, subprocess, sys\n"
        "sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "pathlib.Path('sleeper.pid').write_text(str(sleeper.pid))\n",
        encoding="utf-8",
    )
    report = check_file(path, timeout_s=60)
    assert report.text().endswith("no block found in spawns.py: define them under the book's names")
    pid = int((tmp_path / "sleeper.pid").read_text())
    assert process_state(pid) in ("gone", "Z"), f"the file's child {pid} still runs after the check"


def process_state(pid: int) -> str:
    """The state letter of process `pid` in /proc ('Z' for a zombie), or 'gone'; SIGKILL takes effect
    asynchronously, so a process still in its last moments is waited for, up to 10 s."""
    stat = Path(f"/proc/{pid}/stat")
    state = "gone"
    for _ in range(100):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return "gone"
        if state == "Z":
            return state
        time.sleep(0.1)
    return state


def test_input_fails_at_once_even_when_the_checks_own_stdin_is_open(tmp_path: Path) -> None:
    path = tmp_path / "asks.py"
    path.write_text("size = int(input('how many heads? '))\n", encoding="utf-8")
    read_end, write_end = os.pipe()  # stdin that stays open and empty: input() would wait on it
    try:
        done = subprocess.run(
            [sys.executable, "-m", "attn_mt", "check", str(path), "--timeout", "30"],
            stdin=read_end,
            capture_output=True,
            text=True,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.strip() == (
        "error: line 1 of asks.py raised EOFError: EOF when reading a line while the file was loaded; "
        "attn-mt check gives the file no input, so input() fails at once: define the blocks without asking "
        "for input"
    )


def test_a_file_that_prints_without_end_is_stopped(tmp_path: Path) -> None:
    path = tmp_path / "floods.py"
    path.write_text(
        "import sys\nfor _ in range(40):\n    sys.stdout.write('x' * (1 << 20))\n"
        + SOLUTION.read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    report = check_file(path, ("masked_softmax",), timeout_s=60)
    assert report.error == (
        f"floods.py printed more than {OUTPUT_LIMIT >> 20} MiB (stopped while loading the file): print less, "
        "such as a tensor's shape rather than the tensor"
    )
    assert OUTPUT_LIMIT < 40 << 20


def test_only_the_start_and_end_of_a_long_output_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "chatty.py"
    path.write_text(
        "import os\nfor i in range(20000):\n    print('line', i)\nos._exit(3)\n", encoding="utf-8"
    )
    report = check_file(path, timeout_s=60)
    said = "chatty.py ended the check's process while loading the file (exit code 3); its last output: "
    assert report.error.startswith(said + "line 0\nline 1\n")
    assert report.error.endswith("line 19998\nline 19999")
    printed = sum(len(f"line {i}\n") for i in range(20000))
    left_out = printed - 2 * OUTPUT_KEEP
    assert f"\n[... {left_out} bytes of its output left out ...]\n" in report.error
    assert len(report.error) < len(said) + 2 * OUTPUT_KEEP + 100


# issue 71: what a learner's 35 files showed -----------------------------------------------------------------


def test_blocks_that_add_into_their_input_in_place_are_named_not_passed() -> None:
    # the positional encoding's X += gave the right numbers; the add & norm's X += was blamed on dropout
    results = check_namespace(load(SOLUTIONS / "in_place.py"), ("PositionalEncoding", "AddNorm"))
    for result in results:
        assert not result.passed
        assert all(case.mistake == "changes-its-input" for case in result.cases), result.text()
        assert all("changed the caller's X in place" in case.detail for case in result.cases)
        assert "applies dropout" not in result.text() and "dropout-" not in result.text(), result.text()


def test_the_in_place_add_and_norm_would_fail_a_backward_pass(tmp_path: Path) -> None:
    namespace = load(SOLUTIONS / "in_place.py")
    block = namespace["AddNorm"](4, 0.0)
    X, Y = torch.randn(2, 3, 4, requires_grad=True), torch.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="in-place operation"):
        block(X, Y).sum().backward()


def test_a_hard_coded_bias_is_named_as_such_not_as_layer_names(tmp_path: Path) -> None:
    block, old, new = PLANTED["bias-hard-coded"]
    [result] = check_namespace(
        load_text(SOLUTION.read_text(encoding="utf-8").replace(old, new), tmp_path), (block,)
    )
    assert result.cases[0].detail == (
        "your MultiHeadAttention has biases the book's MultiHeadAttention does not have here: W_q.bias"
    )
    assert "name the layers" not in result.text()


def test_a_mistake_that_is_not_dropout_gets_no_dropout_hint(tmp_path: Path) -> None:
    for mistake in ("no-scaling", "valid-lens-tiled", "norm-before-add", "query-from-first-layer"):
        block, old, new = PLANTED[mistake]
        text = SOLUTION.read_text(encoding="utf-8").replace(old, new)
        [result] = check_namespace(load_text(text, tmp_path), (block,))
        [train] = [case for case in result.cases if case.case == "dropout 0.5 in train mode"]
        assert train.mistake == mistake and not train.note, result.text()
        assert "applies dropout" not in result.text()


def test_dropout_in_the_wrong_place_still_gets_the_dropout_hint(tmp_path: Path) -> None:
    text = SOLUTION.read_text(encoding="utf-8").replace(
        "self.ln(self.dropout(Y) + X)", "self.dropout(self.ln(Y + X))"
    )
    [result] = check_namespace(load_text(text, tmp_path), ("AddNorm",))
    [failed] = [case for case in result.cases if not case.passed]
    assert failed.case == "dropout 0.5 in train mode" and failed.mistake == ""
    assert failed.note == DROPOUT_NOTE.format(where="Y, the sublayer's output, before the residual sum")


def test_an_off_by_one_mask_is_named_in_every_block_and_case(tmp_path: Path) -> None:
    results = check_namespace(load(SOLUTIONS / "off_by_one.py"), ("masked_softmax", "DotProductAttention"))
    for result in results:
        failing = [case for case in result.cases if not case.passed]
        assert failing and {case.mistake for case in failing} == {"mask-off-by-one"}, result.text()
    # in the book's encoder block too, where valid_len + 1 covers every key in some cases
    text = SOLUTION.read_text(encoding="utf-8").replace("< valid_len[:, None]", "<= valid_len[:, None]")
    for result in check_namespace(
        load_text(text, tmp_path), ("MultiHeadAttention", "TransformerEncoderBlock")
    ):
        failing = [case for case in result.cases if not case.passed]
        assert {case.mistake for case in failing} == {"mask-off-by-one"}, result.text()


def test_an_unexplained_difference_shows_the_inputs_and_the_slice_that_differs(tmp_path: Path) -> None:
    # a fill of -4 is not large enough: padding keeps a little weight, which no variant gives
    text = (
        (SOLUTIONS / "off_by_one.py")
        .read_text(encoding="utf-8")
        .replace("positions > valid_lens, -1e6", "positions >= valid_lens, -4.0")
    )
    [result] = check_namespace(load_text(text, tmp_path), ("DotProductAttention",))
    cases = {case.case: case for case in result.cases}
    one_d = cases["1-D valid_lens"]
    assert one_d.mistake == "" and not one_d.passed
    assert one_d.detail.startswith("output[0:2, 0, 0:4] is [["), one_d.detail
    assert one_d.detail.endswith(
        "(inputs: queries (2, 1, 6), keys (2, 10, 6), values (2, 10, 4), valid_lens [2, 6])"
    )
    two_d = cases["2-D valid_lens"].detail
    assert "valid_lens [[1, 3, 5], [2, 4, 4]]" in two_d and " differs (" in two_d, two_d


def test_a_lesson_is_printed_once_per_file(tmp_path: Path) -> None:
    path = tmp_path / "zero_fill.py"
    path.write_text(SOLUTION.read_text(encoding="utf-8").replace("value=-1e6", "value=0"), encoding="utf-8")
    report = check_file(path, timeout_s=120)
    text = report.text()
    lesson = BY_ID["mask-with-zero"].lesson
    assert text.count(lesson) == 1, text
    named_in = {
        result.block for result in report.results if any(c.mistake == "mask-with-zero" for c in result.cases)
    }
    assert len(named_in) >= 5  # masked_softmax and the blocks that call it
    assert text.count("mistake [mask-with-zero]") > 20
    assert "applies dropout" not in text
    lessons = [mistake.lesson for mistake in MISTAKES]
    assert all(text.count(lesson) <= 1 for lesson in lessons)


def test_the_chapters_own_code_runs_on_the_d2l_stand_in() -> None:
    report = check_file(SOLUTIONS / "book_with_d2l.py", timeout_s=120)
    assert report.error == "", report.error
    assert report.notes == [
        "book_with_d2l.py imports d2l, which is not installed here: it was given attn-mt check's stand-in "
        "for the d2l names the attention chapter calls (sequence_mask, masked_softmax, the attention "
        "classes, Encoder, AttentionDecoder, EncoderDecoder, ...), written from d2l's documented behaviour"
    ]
    assert report.text().startswith("note: book_with_d2l.py imports d2l")
    found = [result.block for result in report.results if result.found]
    assert found == [
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
        "Seq2SeqAttentionDecoder",
    ]
    assert report.passed, report.text()


def test_a_file_without_d2l_gets_no_stand_in_note_and_d2l_stays_out_of_this_process() -> None:
    report = check_file(SOLUTION, ("masked_softmax",), timeout_s=120)
    assert report.notes == [] and report.passed
    assert "d2l" not in sys.modules


def test_the_stand_in_refuses_what_the_chapters_blocks_do_not_need(tmp_path: Path) -> None:
    path = tmp_path / "trains.py"
    path.write_text(
        "from d2l import torch as d2l\ntrain_iter, src_vocab, tgt_vocab = d2l.load_data_nmt(64, 10)\n",
        encoding="utf-8",
    )
    report = check_file(path, timeout_s=120)
    assert report.error.startswith(
        "line 2 of trains.py raised AttributeError: attn-mt check's stand-in for d2l has no 'load_data_nmt'"
    ), report.error
    path.write_text("from d2l import mxnet as d2l\n", encoding="utf-8")
    assert check_file(path, timeout_s=120).error == (
        "line 1 of trains.py raised ImportError: cannot import name 'mxnet' from 'd2l' (unknown location); "
        "attn-mt check stands in only for d2l.torch (from d2l import torch as d2l)"
    )


def test_the_stand_ins_blocks_equal_attn_mts() -> None:
    from attn_mt.check import book_d2l

    names = (
        "masked_softmax",
        "DotProductAttention",
        "transpose_qkv",
        "transpose_output",
        "PositionalEncoding",
        "AddNorm",
    )
    results = check_namespace({name: getattr(book_d2l, name) for name in names})
    found = [result for result in results if result.found]
    assert [result.block for result in found] == list(names)
    assert all(result.passed for result in found), "\n".join(result.text() for result in found)


# issue 71: the whole Transformer encoder and decoder, the Nadaraya-Watson kernel regression ---------------


def test_the_checks_kernel_regression_equals_attn_mts_demo() -> None:
    from attn_mt.check.blocks import NW_KERNEL_REGRESSION
    from attn_mt.demos.nadaraya_watson import NWKernelRegression

    for index, case in enumerate(NW_KERNEL_REGRESSION.cases):
        inputs = case.inputs(torch.Generator().manual_seed(SEED + index))
        reference = reference_for(NW_KERNEL_REGRESSION, case)
        demo = NWKernelRegression()
        with torch.no_grad():
            demo.w.copy_(reference.w)
            expected = {"output": demo(inputs["queries"], inputs["keys"], inputs["values"])}
            expected["attention_weights"] = demo.attention_weights
            got = NW_KERNEL_REGRESSION.run_reference(reference, inputs, case.sizes)
        assert all_close(got, expected) and got.keys() == expected.keys(), case.name


def test_a_kernel_regression_softmax_over_the_queries_is_named(tmp_path: Path) -> None:
    old = "** 2) / 2, dim=1)"
    text = SOLUTION.read_text(encoding="utf-8")
    assert text.count(old) == 1
    [result] = check_namespace(
        load_text(text.replace(old, "** 2) / 2, dim=0)"), tmp_path), ("NWKernelRegression",)
    )
    failing = [case for case in result.cases if not case.passed]
    assert len(failing) == len(result.cases) and {case.mistake for case in failing} == {"softmax-wrong-axis"}
    assert "dim=1 of Nadaraya-Watson's (queries, keys)" in result.text()


def test_encoder_blocks_in_a_plain_list_are_named(tmp_path: Path) -> None:
    block = "TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias)"
    old = f"self.blks = nn.Sequential()\n{' ' * 8}for i in range(num_blks):\n{' ' * 12}self.blks.add_module("
    old += f'\n{" " * 16}"block" + str(i),\n{" " * 16}{block},\n{" " * 12})'
    new = f"self.blks = []\n{' ' * 8}for i in range(num_blks):\n{' ' * 12}self.blks.append({block})"
    text = SOLUTION.read_text(encoding="utf-8")
    assert text.count(old) == 1
    [result] = check_namespace(load_text(text.replace(old, new), tmp_path), ("TransformerEncoder",))
    assert {case.mistake for case in result.cases} == {"parameters-not-registered"}, result.text()
    assert "self.blks (a Python list of modules) is not registered with the module" in result.cases[0].detail


def test_a_decoder_giving_step_t_position_t_passes_with_a_note(tmp_path: Path) -> None:
    # the book's predict_seq2seq feeds one token at a time, and its decoder adds P[0] to each; a learner
    # who offsets the positions by the tokens already decoded (as attn-mt's decoding does) passes too
    old = "X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))\n        self._attention"
    new = (
        "offset = 0 if state[2][0] is None else state[2][0].shape[1]\n"
        "        X = self.embedding(X) * math.sqrt(self.num_hiddens)\n"
        "        X = self.pos_encoding.dropout(X + self.pos_encoding.P[:, offset : offset + X.shape[1]])\n"
        "        self._attention"
    )
    text = SOLUTION.read_text(encoding="utf-8")
    assert text.count(old) == 1
    [result] = check_namespace(load_text(text.replace(old, new), tmp_path), ("TransformerDecoder",))
    assert result.passed, result.text()
    noted = [case.case for case in result.cases if case.note]
    assert noted == [case.case for case in result.cases if "one token at a time" in case.case] and noted
    assert "position 0" in result.cases[2].note


def test_a_decoder_that_ignores_its_cache_passes_training_and_fails_prediction(tmp_path: Path) -> None:
    block, old, new = PLANTED["cache-not-kept"]
    [result] = check_namespace(
        load_text(SOLUTION.read_text(encoding="utf-8").replace(old, new), tmp_path), (block,)
    )
    for case in result.cases:
        assert case.passed == ("one token at a time" not in case.case), result.text()
