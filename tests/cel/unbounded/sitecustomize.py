"""Lifts the function's CEL cost bounds in every Python process started with
this folder on PYTHONPATH: the server and its evaluation workers. Only
tests/test_cel_sandbox_server.py does, to show what the sandbox alone stops:
selectors that the estimates would have refused run as if they had been
missed."""

from function.contract.devicecel import cost, runtimecost

cost.MAX_COST = runtimecost.MAX_COST = 2**64
runtimecost.MAX_STRING = runtimecost.MAX_LIST = 2**64
