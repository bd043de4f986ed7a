"""Hand-written training passes that do the book's maths faster: cpu/, turned on together by
`train.kernels: cpu` (`auto` on the CPU); `cpu.for_training` is the trainer's way in.

Tests prove each kernel equal to the torch or book code it replaces (values, gradients and dropout
masks from the same seed). The trainer imports the subpackage only when its kernels apply
(training/speed.py), so a `train.kernels: reference` run never imports it. A GPU trains the book's
modules (the GPU path of its own was removed in issue 70: docs/gpu.md).
"""
