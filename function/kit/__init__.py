"""The request kit, below every handler: a RunFunctionRequest as the handlers read
it (request.py over wire bytes, wire.py, lazy.py and structs.py for Struct values),
the requeue TTL a handler asks for (requeue.py) and the caches' bounded map (lru.py).
It imports nothing of the function but the contract, so no arrow runs back up."""
