"""How a RunFunction arrives and leaves: the CLI, the gRPC server, the request
as the handlers read it (wire bytes, plain structs), dispatch by composite kind,
the requeue TTL and the caches' bounded map."""
