"""Tools that run beside training and import none of its parts: sandbox.py runs model-written
Python in a local sandbox (namespaces, resource limits, an unprivileged user)."""
