"""Where a run's metrics go and how they come back: their names (metric_names.py), the
Tracker and MLflow behind it (tracker.py), the training runs read back from the store
(run_records.py), and training curves drawn from them (plots.py)."""
