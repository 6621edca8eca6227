"""Many runs and what is read from them: comparisons (compare.py, on a Ray cluster
compare_on_ray.py), sweeps on Ray Tune (sweep.py), what those share (child_runs.py), the
paper's tables (report.py) and simulated runs at GPU scale (simulate.py)."""
