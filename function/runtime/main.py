"""The `function-model-serving` command: `serve` the gRPC function, `preview` offline."""

from __future__ import annotations

import sys

import click
from crossplane.function import cli as sdkcli

from function.runtime import fn, server


@click.group()
def cli() -> None:
    """Crossplane composition functions for fleet-wide LLM serving."""


# The scheduler's request carries every InferenceCluster and ModelReplica of
# the fleet: 10.3 MB for 1000 clusters and 5000 replicas (benchmarks/, size L;
# about 10 KB per cluster and 1 KB per replica). The SDK's 4 MB default would
# refuse it; 32 MB takes three times L, and bounds what one request (of up to
# MAX_CONCURRENT_RPCS in flight) makes the server hold. A larger fleet raises it
# (--max-recv-message-size or MAX_RECV_MESSAGE_SIZE).
DEFAULT_MAX_RECV_MB = 32
# A response goes to Crossplane, whose gRPC client (internal/xfn/function_runner.go,
# grpc-go's defaults) reads at most 4 MB: about 800 replicas of one deployment.
# Sending more would only fail on its side (--max-send-message-size to change).
DEFAULT_MAX_SEND_MB = 4


@cli.command(context_settings={"default_map": {"max_recv_message_size": DEFAULT_MAX_RECV_MB,
                                               "max_send_message_size": DEFAULT_MAX_SEND_MB}})
@sdkcli.standard_options
@click.option("--enable-reflection", is_flag=True, envvar="ENABLE_REFLECTION",
              help="Serve gRPC server reflection (for grpcurl while debugging); off by default: "
                   "Crossplane does not use it.")
def serve(**kwargs) -> None:
    """Serve RunFunction over gRPC (mTLS unless --insecure)."""
    if not kwargs.get("insecure") and not kwargs.get("tls_certs_dir"):
        raise click.UsageError("serving needs mTLS certificates (--tls-certs-dir with tls.crt, "
                               "tls.key and ca.crt) or an explicit --insecure")
    server.run(fn.FunctionRunner(), **kwargs)


# The SDK's help says the send limit defaults to the receive limit; ours does not.
for _param in serve.params:
    if isinstance(_param, click.Option) and _param.name == "max_send_message_size":
        _param.help = ("Maximum size of sent gRPC messages in MB (Crossplane's client "
                       "reads at most 4).")
        _param.show_default = True


@cli.command()
@click.option("--fleet", "fleet_dir", default="examples/fleet", show_default=True,
              type=click.Path(exists=True, file_okay=False),
              help="Directory of InferenceCluster manifests.")
@click.option("--deployment", default="examples/deployments/single-gpu.yaml", show_default=True,
              type=click.Path(exists=True, dir_okay=False), help="A ModelDeployment manifest.")
@click.option("--replicas-dir", "replicas_dir", default=None, type=click.Path(file_okay=False),
              help="Directory of existing ModelReplicas (the live ledger), optional.")
@click.option("--replicas", "replicas_override", type=click.IntRange(0, 1000), default=None,
              help="Preview the deployment scaled to this many replicas (what-if).")
@click.option("--caches", "caches_dir", default=None,
              type=click.Path(exists=True, file_okay=False),
              help="Directory of ModelCaches besides the fleet's, optional.")
@click.option("--platform", "platform_dir", default="examples/platform", show_default=True,
              type=click.Path(file_okay=False),
              help="Directory of the platform's settings (the EnvironmentConfig of Prometheus "
                   "servers autoscaling may query); skipped when it does not exist.")
@click.option("-o", "--output", type=click.Choice(["table", "yaml"]), default="table",
              show_default=True, help="table: placements; yaml: every rendered object.")
@click.option("--crossplane", "crossplane_bin", envvar="CROSSPLANE_CLI", default=None,
              help="The crossplane command-line tool, which runs `crossplane composition "
                   "render` (github.com/crossplane/cli/v2's ./cmd/crossplane; default: the "
                   "pinned build in the tool cache, $CROSSPLANE_CLI).")
@click.option("--crossplane-binary", "core_bin", envvar="CROSSPLANE_CORE", default=None,
              help="Crossplane core, the controller binary the render starts to run the "
                   "composition pipeline (github.com/crossplane/crossplane/v2's ./cmd/crossplane; "
                   "passed to render's own --crossplane-binary; default: the pinned build in "
                   "the tool cache, $CROSSPLANE_CORE).")
def preview(**kwargs) -> None:
    """Render a deployment on a fleet through the real crossplane CLI."""
    from function.tools.preview import run_preview  # heavy imports only for this command

    sys.exit(run_preview(**kwargs))


@cli.command()
@click.option("--kubeconfig", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Reach the cluster through this kubeconfig (default: in-cluster config).")
@click.option("--namespace", default="modelplane-system", show_default=True,
              help="Where the report ConfigMap (modelplane-inventory) is written.")
@click.option("--interval", default=30.0, show_default=True, type=click.FloatRange(1, 3600),
              help="Seconds between reports.")
@click.option("--once", is_flag=True, help="Report once and exit (non-zero on failure).")
def inventory(kubeconfig, namespace, interval, once) -> None:
    """Report this cluster's nodes per pool to the fleet (runs on each workload cluster)."""
    import logging

    from function.agent.inventory import run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    sys.exit(run(kubeconfig, namespace, interval, once))


if __name__ == "__main__":
    cli()
