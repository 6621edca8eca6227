"""Rollout: the schedules (schedules.py: synchronous and partial), the trajectories and their
cache (trajectory.py), what drops a group (dynamic_sampling.py, staleness_cap.py), and the
engines that generate (engines/)."""
