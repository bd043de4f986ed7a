"""Serving a trained run: a JSON API over HTTP, an attention explorer page, and batched decoding."""
