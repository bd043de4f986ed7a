"""Hand-written training passes that do the book's maths faster, one subpackage per device.

- cpu/: every CPU speed measure, turned on together by `train.kernels: cpu` (`auto` on the CPU);
  `cpu.for_training` is the trainer's way in.
- gpu/: the Transformer's training pass for a GPU (`train.kernels: gpu`, `auto` on a verified
  CUDA card); training/speed.py's GpuPath is its way in.
Tests prove each kernel equal to the torch or book code it replaces (values, gradients and dropout
masks from the same seed). The trainer imports a subpackage only when its kernels apply
(training/speed.py), so a `train.kernels: reference` run never imports either.
"""
