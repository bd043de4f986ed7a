"""The bodies of the `attn-mt` commands: each module glues together the stages one command uses.

attn_mt/cli.py parses the command line and calls these; they sit above every stage they call.
"""
