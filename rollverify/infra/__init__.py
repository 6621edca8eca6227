"""Plumbing every part may use, and which uses none of them: atomic writes (atomic_write.py),
where a config's path points (paths.py), nested dicts (nested_dicts.py), injected and
described faults (faults.py), library output silenced (quiet.py)."""
