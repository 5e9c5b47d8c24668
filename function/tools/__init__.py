"""Offline tools around `crossplane render`: the `preview` command and the
local render harness the tests and benchmarks share."""
