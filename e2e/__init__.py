"""End-to-end harnesses: real processes on loopback, no Docker.

`e2e.controlplane` starts a local Crossplane control plane with its workload
clusters (`make cluster`); tests drive it through its Python API.
"""
