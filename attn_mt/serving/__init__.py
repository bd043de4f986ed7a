"""Serving a trained run: a JSON API over HTTP, an attention explorer page, and batched decoding."""
from attn_mt.serving.server import serve

__all__ = ["serve"]
