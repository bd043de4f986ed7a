"""`attn-mt lab`: a local page whose panels run the attention chapter's examples on attn-mt's own code.

It sits beside serving/ (neither imports the other); the HTTP plumbing both use is web/.

inputs.py            what a request may hold, and the size limits (LabError: a 422 answer)
shown.py             what a panel answers: tensors with the book's axis names, scales, plots, code lines
cues.py              queries, keys and values: non-volitional and volitional cues
scoring.py           masked softmax, additive and scaled dot-product attention, the key size d
kernel_regression.py Nadaraya-Watson pooling with three kernels, and the parametric w
positions.py         the sinusoidal table and its shifts
heads.py             multi-head attention on W_q X; a trained run's attention maps
self_attention.py    self-attention on a toy sentence, with and without positions
complexity.py        CNNs, RNNs and self-attention compared
transformer.py       a trained Transformer's diagram, masks, cache, add & norm and FFN
stepping.py          step-through decoding of the search translate runs
own_translation.py   the learner's translation scored by forced decoding
exercises.py         the exercises' experiments; their questions are exercises.yaml, and the tables
                     measured on another machine are measured.yaml
engines.py           one request's own copy of a run's model
panels.py, app.py    the panels by name; the FastAPI application: the page, POST /api/PANEL, sources
server.py            serving the lab under uvicorn
page/                the page (HTML, script, style), served by the lab itself
"""
