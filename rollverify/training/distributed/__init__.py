"""A world of trainer processes: the world and its meeting points (world.py), FSDP sharding
(sharding.py), torch's stores on loopback (loopback_stores.py)."""
