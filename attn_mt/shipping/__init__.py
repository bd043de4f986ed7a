"""Shipping a trained model: checkpoint averaging, int8 inference, one-file and ONNX exports."""
