"""The evaluation sandbox's child process: evaluates selectors, one at a time.

`python -m function.contract.devicecel.worker --memory BYTES` caps its own
address space (RLIMIT_AS) before it imports CEL, says ``ready``, then reads
one request a line from standard input and answers one line on standard
output, both JSON:

    {"e": "<expression>", "d": "<device shape: device.py's JSON key>"}
    -> {"v": true} | {"v": false} | {"err": "<message>"} | {"over": "<message>"}

Each answer also carries ``cpu``, the seconds this process has computed so
far: the parent's baseline for the next evaluation's budget, read without
asking /proc each time.

``over`` says an evaluation ran out of memory (CEL-C++ reports
``std::bad_alloc`` as an evaluation error; Python raises MemoryError); the
worker ends after saying it, since its heap is no longer to be trusted.

A selector that runs away makes this process fail (CEL-C++ cannot allocate
past the cap, and the process ends) or the parent kills it at the wall-clock
budget (sandbox.py): either way it costs this process, never the server.
It evaluates with the same code the server once ran in process
(`CompiledSelector.evaluate_here`), so a verdict is the same wherever it
is computed (tests/test_cel_sandbox.py).
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys


_BAD_ALLOC = "std::bad_alloc"


def _cap(memory: int) -> None:
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # A core dump of a killed evaluation is gigabytes of nothing useful.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def serve(stdin, stdout) -> None:  # noqa: ANN001 - binary streams
    from function.contract.devicecel.device import activation_of_shape
    from function.contract.devicecel.selector import CelError, compile_here

    usage = resource.getrusage(resource.RUSAGE_SELF)
    stdout.write(json.dumps({"ready": True, "cpu": usage.ru_utime + usage.ru_stime}).encode()
                 + b"\n")
    stdout.flush()
    for line in stdin:
        try:
            ask = json.loads(line)
            expression, shape = ask["e"], ask["d"]
            answer: dict = {"v": compile_here(expression).evaluate_here(activation_of_shape(shape))}
        except MemoryError:
            answer = {"over": "MemoryError"}
        except CelError as exc:
            answer = {"over": str(exc)} if _BAD_ALLOC in str(exc) else {"err": str(exc)}
        except (ValueError, KeyError, TypeError) as exc:
            answer = {"err": f"the sandbox could not read the request: {exc}"}
        usage = resource.getrusage(resource.RUSAGE_SELF)
        answer["cpu"] = usage.ru_utime + usage.ru_stime
        stdout.write(json.dumps(answer).encode() + b"\n")
        stdout.flush()
        if "over" in answer:
            return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", type=int, default=0, help="address-space cap in bytes")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when it ends
    _cap(args.memory)
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
