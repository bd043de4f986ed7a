"""attn-mt: attention-based English-French translation, from the d2l.ai attention chapter to real runs."""

__version__ = "0.1.0"
