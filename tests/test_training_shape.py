"""The training loop stays readable: short functions in training/, a trainer.py a reader takes in at once."""

from __future__ import annotations

import ast
from pathlib import Path

TRAINING = Path(__file__).resolve().parent.parent / "attn_mt" / "training"
MAX_FUNCTION_LINES = 60
MAX_TRAINER_LINES = 400


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of every function and method in `path` (with decorators and docstring), by qualified name."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    lengths[name] = child.end_lineno - first + 1
                visit(child, f"{name}.")

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return lengths


def test_function_lengths_are_measured_from_the_syntax_tree(tmp_path):
    source = tmp_path / "example.py"
    lines = ["class A:", "    @staticmethod", "    def f():", "        def g():", "            pass"]
    source.write_text("\n".join([*lines, "        return g", ""]))
    assert function_lengths(source) == {"A.f": 5, "A.f.g": 2}


def test_no_function_in_training_is_longer_than_sixty_lines():
    too_long = {
        f"{path.name}:{name}": lines
        for path in sorted(TRAINING.glob("*.py"))
        for name, lines in function_lengths(path).items()
        if lines > MAX_FUNCTION_LINES
    }
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


def test_trainer_module_is_under_four_hundred_lines():
    lines = len((TRAINING / "trainer.py").read_text(encoding="utf-8").splitlines())
    assert lines < MAX_TRAINER_LINES, f"training/trainer.py has {lines} lines"
