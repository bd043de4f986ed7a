"""Shipping a trained model: checkpoint averaging, the one-file export, ONNX graphs, the Python API."""
