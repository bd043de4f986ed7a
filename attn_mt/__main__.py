"""`python -m attn_mt` runs the command line (also what `torchrun -m attn_mt` starts)."""

from attn_mt.cli import main

main()
