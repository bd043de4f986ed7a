"""Decoding: greedy and beam search over the models' step interface, and batch translation."""

from attn_mt.decoding.search import Hypothesis, beam_search, gnmt_length_penalty, greedy_search

__all__ = ["Hypothesis", "beam_search", "gnmt_length_penalty", "greedy_search"]
