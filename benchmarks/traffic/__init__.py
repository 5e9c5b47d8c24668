"""`make bench-traffic`: what the data plane adds, on a real local control plane.

A measurement, not a test: nothing here asserts a target (benchmarks/README.md
records a run). On the engines of `make cluster` (the llm-d inference simulator
with zero simulated latency, e2e/controlplane/pods/translate.Settings), every
millisecond a request takes is the data path's: so the same requests are sent
through the gateway and straight to an engine pod, and the difference is what the
gateway adds.

The modules, from the numbers up to the run (each imports only those before it):

- `stats`: the arithmetic (percentiles, the paired difference, the affinity
  rate, requests/s) and the rows it fills; tests/test_bench_traffic.py.
- `report`: the results of a run, the machine it ran on, and the markdown tables.
- `client`: the keep-alive HTTP client that dials only loopback and harness pods,
  and the targets (URLs, headers, a count of the 200s) requests go to.
- `deployments`: the namespace, the models and the example ModelDeployments,
  made to name their pods.
- `measure`: what is sent in one mode, through and direct: latency pairs,
  requests/s at a fixed concurrency, and prefix-affinity groups.
- `modes`: each mode live: apply, wait until Ready, measure, check against the
  engines' own counters, delete.
- `__main__`: the command line (`python -m benchmarks.traffic`), the control
  plane it runs on, and the report it prints.
"""
