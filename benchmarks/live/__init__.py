"""`make bench-live`: scale on a real local control plane (issue #36).

A measurement, not a test: `make cluster`'s control plane (e2e/controlplane/) with a
generated fleet, D ModelDeployments applied at once, then every one scaled by one;
how long until each serves, how many reconciles it took, and what each process
spent. benchmarks/README.md ("Live scale") records a run.

The modules, from the pure ones up (tests/test_bench_live.py covers the pure ones):

- `plan`: the fleet and the deployments (the examples, kwok-only images), the day-2
  wave, the nodes they need, and what converged means.
- `procstat`: CPU seconds and peak RSS of a process group, from /proc.
- `metrics`: reconciles, from the controllers' Prometheus counters.
- `report`: the results and the markdown tables (percentiles from
  benchmarks/traffic/stats.py).
- `run`: the control plane, the waves and the cleanup, within a time budget.
- `__main__`: the command line.
- `plot`: time to Ready against D, a PNG drawn from one or more `--json` files
  (`python -m benchmarks.live.plot OUT.png RUN.json ...`; tests/test_bench_live_plot.py).
"""
