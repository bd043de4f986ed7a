"""`attn-mt lab`: a local page whose panels run the attention chapter's examples on attn-mt's own code.

inputs.py            what a request may hold, and the size limits (LabError: a 422 answer)
shown.py             what a panel answers: tensors with the book's axis names, plots, code lines
scoring.py           masked softmax, additive and scaled dot-product attention, the key size d
app.py               the FastAPI application: the page, POST /api/PANEL, the source viewer
page/                the page (HTML, script, style), served by the lab itself
"""
