"""Run directories, checkpoints and device choice: what training, decoding, evaluation and report share."""
