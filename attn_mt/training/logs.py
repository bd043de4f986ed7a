"""Logging to train.log and to the terminal without breaking tqdm's progress bars."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from tqdm import tqdm

FORMAT = "%(asctime)s %(levelname)s %(message)s"
FILE_ONLY = {"file_only": True}  # `extra=` of a record for train.log only (progress lines shown otherwise)


class TqdmHandler(logging.Handler):
    """Writes records through tqdm.write so they appear above an active progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        """Print one record on stderr."""
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def setup_logging(log_file: Path | None, quiet: bool = False) -> logging.Logger:
    """Configure the `attn_mt` logger: INFO to `log_file`, INFO (WARNING when quiet) to stderr.

    Records logged with `extra=FILE_ONLY` go to `log_file` alone.
    """
    logger = logging.getLogger("attn_mt")
    logger.setLevel(logging.INFO)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    console = TqdmHandler()
    console.addFilter(lambda record: not getattr(record, "file_only", False))
    console.setLevel(logging.WARNING if quiet else logging.INFO)
    console.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(console)
    if log_file is not None:
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(file_handler)
    logger.propagate = False
    return logger


def detach_log_file() -> None:
    """Close and remove the `attn_mt` logger's train.log handler, so that later records in this process
    (another run, or other work after an in-process `train`) do not go to that run's file."""
    logger = logging.getLogger("attn_mt")
    for handler in list(logger.handlers):
        if isinstance(handler, logging.FileHandler):
            logger.removeHandler(handler)
            handler.close()
