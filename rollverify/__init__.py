"""RollVerify: verified partial rollout for GRPO (ops -> verify -> switching)."""

__version__ = "0.1.0"
