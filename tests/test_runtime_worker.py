"""Every request's handler runs on the one worker thread (runtime/fn.py): cel-expr-python
evaluates extension functions only on the first thread that used them, so a second worker
judged every device "No PyCelArena found" for a selector calling quantity()."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import asyncio
    from function.contract.devicecel import compile_selector, device_activation
    from function.runtime import fn

    EXPR = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'
    DEV = {"attributes": {}, "capacity": {"memory": {"value": "24Gi"}}, "count": 1,
           "driver": "gpu.nvidia.com", "name": "gpu"}

    def judge(_arg, _log, _until):
        try:
            return compile_selector(EXPR).matches(device_activation(DEV))
        except Exception as exc:
            return repr(exc)

    async def main():
        runner = fn.FunctionRunner()
        return await asyncio.gather(*(runner._offload(judge, None, None, lambda: None)
                                      for _ in range(16)))

    print(asyncio.run(main()))
""")


def test_concurrent_requests_all_evaluate_an_extension_function():
    # A fresh interpreter: nothing has used CEL on any thread before.
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == str([True] * 16), out
