"""A training run: the recipe (run.py: setup; train; cleanup), what a run is and returns
(run_plan.py), the step (loop.py) and its records (records.py), its rewards (rewards.py) and
cost (booking.py), TRL glue (trl_adapter.py), the checks before a start (preflight.py),
several processes (launch.py, worker.py, distributed/), checkpoints and stops
(checkpoint_client.py over checkpoint/, stopping.py)."""
