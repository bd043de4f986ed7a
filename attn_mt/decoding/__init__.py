"""Decoding: greedy and beam search over the models' step interface, and batch translation.

    outputs.py            what every engine returns and the rules they share (no torch)
    engine.py             the Engine protocol both engines implement, and their shared steps (no torch)
    search.py             greedy and beam search (torch)
    translator.py         sentences in, translations out, with a torch model
    ctranslate2_engine.py the same with an exported CTranslate2 folder (no torch)
    engines.py            which of the two translates an opened model
    attention.py          attention maps of one translated sentence, and how they show in Jupyter
    display.py            the HTML pieces and PNG heatmaps Jupyter's views are built from
    heatmaps.py           attention heatmaps with the tokens on the axes (matplotlib)

Nothing is imported here, so the CTranslate2 engine's modules load without torch.
"""
