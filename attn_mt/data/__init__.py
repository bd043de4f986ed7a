"""Data pipeline: corpus, preprocessing, vocabularies, book and split modes, batches, report."""

from attn_mt.data.batch import Batch
from attn_mt.data.corpus import read_pairs, resolve_corpus
from attn_mt.data.dataset import NMTData, load_data
from attn_mt.data.encode import EncodedSources, SourceInfo, encode_sources
from attn_mt.data.preprocess import preprocess, tokenize
from attn_mt.data.report import data_report, format_report
from attn_mt.data.splits import EvalExample
from attn_mt.data.trainset import TrainSet
from attn_mt.data.vocab import Vocab

__all__ = [
    "Batch",
    "EncodedSources",
    "EvalExample",
    "NMTData",
    "SourceInfo",
    "TrainSet",
    "Vocab",
    "data_report",
    "encode_sources",
    "format_report",
    "load_data",
    "preprocess",
    "read_pairs",
    "resolve_corpus",
    "tokenize",
]
