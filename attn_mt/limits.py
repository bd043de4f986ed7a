"""The bounds of the decoding settings, defined once for every way in.

The config check (attn_mt/config.py: `attn-mt validate`, `train`, a run's saved config when it is
opened), the command line (`translate`, `eval`, `score`), serve's JSON schemas and its LibreTranslate
route (serving/schemas.py) and the Python API (`attn_mt.load(...).translate`) all read these, so a
setting one of them accepts, every other accepts too.

A beam wider than 16 finds nothing better on these models and multiplies the work per sentence; a
length penalty over 10 ranks outputs by length alone (GNMT used 0.6 to 1.0), and one in the
thousands overflows a float; the output length limits keep a search bounded in steps.
"""

from __future__ import annotations

MAX_BEAM = 16  # beam size, and n-best outputs (at most the beam)
MAX_LENGTH_PENALTY = 10.0  # GNMT length penalty alpha, from 0
MAX_LEN_A = 10.0  # decode.max_len_a: output tokens allowed per source token, from 0
MAX_LEN_B = 1000  # decode.max_len_b: output tokens allowed beyond that, from 0
MAX_SAMPLES = 16  # sampled outputs per sentence (--sample, serve's sample)
MAX_TEMPERATURE = 100.0  # sampling temperature, above 0 (at 100 every token is about equally likely)
MAX_TOP_K = 1 << 20  # top-k, from 0 (every token); beyond any vocabulary
MAX_SEED = (1 << 32) - 1  # sampling seed, from 0

# decode.KEY -> (lowest, highest) allowed value
DECODE_BOUNDS: dict[str, tuple[float, float]] = {
    "beam_size": (1, MAX_BEAM),
    "nbest": (1, MAX_BEAM),
    "length_penalty": (0.0, MAX_LENGTH_PENALTY),
    "max_len_a": (0.0, MAX_LEN_A),
    "max_len_b": (0, MAX_LEN_B),
}


def out_of_bounds(value: float, low: float, high: float) -> str | None:
    """Why `value` is outside low..high (NaN included), or None when it is inside."""
    if low <= value <= high:
        return None
    return f"must be from {low:g} to {high:g}, got {value:g}"


def length_penalty_problem(alpha: float) -> str | None:
    """Why a length penalty alpha is refused (outside 0..MAX_LENGTH_PENALTY, or NaN), or None."""
    return out_of_bounds(alpha, 0.0, MAX_LENGTH_PENALTY)
