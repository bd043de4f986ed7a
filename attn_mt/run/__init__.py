"""Run directories, checkpoints, devices, and loading a trained model (int8 if asked) to translate with."""
