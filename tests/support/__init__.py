"""What the test files share, imported by name (`from support.helpers import ROOT`), never another test.

helpers (paths, headless Chromium, `attn-mt serve` over HTTP), synthetic (tiny corpora and runs),
search_fakes (hand-written models and the search tests' inputs), near_ties and tolerances (how far
two float32 decodings may differ), cuda_rules (CUDA's kernel rules held on the CPU), devtools
(Chrome's DevTools protocol), book_math (the book's code and shapes), graphs, notebook_kernel,
planted_mistakes.
"""
