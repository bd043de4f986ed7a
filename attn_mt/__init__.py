"""attn-mt: attention-based English-French translation, from the d2l.ai attention chapter to real runs."""

__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202 - the lazy `attn_mt.load`, so `import attn_mt` stays light
    """`attn_mt.load(path)`: a run directory, export file or CTranslate2 folder, ready to translate."""
    if name == "load":
        from attn_mt.shipping.api import load

        return load
    if name == "Sampling":  # attn_mt.load(...).translate_full(..., sampling=attn_mt.Sampling(samples=3))
        from attn_mt.decoding.outputs import Sampling

        return Sampling
    raise AttributeError(f"module 'attn_mt' has no attribute {name!r}")
