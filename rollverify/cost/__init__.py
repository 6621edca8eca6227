"""What a run's work costs: the trace of what the engines and the trainer did (trace.py), the
ledger of device-seconds by phase (ledger.py), the GPU cost model that prices the trace
(costmodel/), and the memory a run will hold (memory_estimate.py)."""
