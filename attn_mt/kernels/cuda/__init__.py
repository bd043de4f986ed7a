"""What a CUDA graph needs of the book's models: captured_bahdanau.py, the GRU model's training pass with
nothing that reads the device back or changes with the batch's lengths (`train.capture_step`)."""
