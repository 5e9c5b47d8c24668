"""How a RunFunction arrives and leaves: the CLI (main.py), the gRPC server
(server.py) and dispatch by composite kind to the handlers (fn.py)."""
