"""Data pipeline: corpus, preprocessing, vocabularies, book and split modes, batches, report.

    corpus.py, pairs.py      find and read the corpus (zip, Tatoeba tab file, two aligned files)
    preprocess.py, vocab.py  the book's preprocessing, tokenizer and word vocabulary
    subword.py               sentencepiece vocabularies on raw cased text
    splits.py                the grouped train / valid / test split
    prepare.py, store.py     split mode prepared once into memory-mapped arrays
    parallel.py, word_pieces.py  encoding many sentences on every core
    book.py, bucketing.py    book-mode and token-budget batches over trainset.py's store
    encode.py                sentences a user types, to ids
    dataset.py               `load_data`: everything training and evaluation read
    report.py                the data report

Nothing is imported here, so a module that needs no torch (encode.py, subword.py, ...) loads without it.
"""
