"""Run directories, checkpoints, devices, and opening a trained model to translate with.

open.py              the one way in: which kind a path holds, handed to that kind's opener
opened.py            what an opener returns (LoadedRun: kind, device) and the --device names
open_run_dir.py      a run directory's checkpoint (torch)
open_export.py       an export file (torch)
open_ctranslate2.py  a CTranslate2 folder (no torch)
"""
