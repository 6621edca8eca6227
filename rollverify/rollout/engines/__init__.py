"""Rollout engines: the in-process transformers engine (`hf`) and the vLLM sidecar (`vllm`)."""
