"""Checkpoints: the folder format (files.py), what a run's checkpoint holds and how it is put
back (run_state.py), a sharded run's parts (sharded.py), writing in the background
(background_write.py), and a checkpoint's weights as a Hugging Face model (export.py)."""
