"""The Transformer's training pass for a GPU (`train.kernels: gpu`): transformer_pass.py."""
