"""The ServerApp and ClientApps a Flower App Bundle points at (deployment engine).

A generated app folder (:func:`federated.flower.deployment.write_app`) holds one module that
re-exports the ServerApp and one ClientApp; SuperLink and SuperNodes import it in their own
processes, with ``run_config`` naming the run's ``data-dir`` and ``out-dir`` (read by the
ServerApp only) and ``fedcd-run`` (read by the ClientApp). ``client_app`` reads a partition
of a simulated run folder; ``node_client_app`` reads only the node's own CSV (a real
federation, :mod:`federated.flower.node`).
"""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from federated.flower.client import make_client_app
from federated.flower.node import make_node_client_app
from federated.flower.server import serve

__all__ = ["client_app", "node_client_app", "server_app"]

client_app = make_client_app()
node_client_app = make_node_client_app()
server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    serve(grid, context)
