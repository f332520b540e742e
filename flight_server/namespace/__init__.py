"""The Lance REST Namespace front door: Quiver's root as a catalog that pylance, lancedb,
lance-spark and DuckDB connect to (``quiver serve --namespace-port PORT``).

- `http`: the aiohttp application and server (routes, authentication, metrics);
- `catalog_routes`, `data_routes`, `version_routes`: what each operation does;
- `tree`: namespaces as directories of the root, tables as its datasets;
- `credentials`: table locations and the storage options clients need (credential vending);
- `ids`, `calls`, `errors`, `schema_json`, `context`: ids, requests, error bodies, schemas.
"""

from __future__ import annotations

from typing import Any

from quiver.flight_server.config import ServerConfig
from quiver.flight_server.namespace.context import Context
from quiver.flight_server.namespace.credentials import Locations
from quiver.flight_server.namespace.http import NamespaceApp, NamespaceServer, ssl_context
from quiver.flight_server.service import DatasetService

__all__ = ["NamespaceServer", "start_namespace"]


def start_namespace(
    config: ServerConfig, service: DatasetService, authenticator: Any = None
) -> NamespaceServer:
    """Serve the namespace on ``config.namespace_port`` of ``config.host`` (started)."""
    assert config.namespace_port is not None
    locations = Locations(
        service.root,
        service.handles.storage_options,
        vend=config.vend_credentials,
        vend_seconds=config.vend_seconds,
        role_arn=config.vend_role_arn,
    )
    ctx = Context(service, locations, managed=config.managed_versioning)
    app = NamespaceApp(ctx, authenticator=authenticator, max_body=config.namespace_max_body)
    tls = None
    if config.tls_cert and config.tls_key:
        tls = ssl_context(config.tls_cert, config.tls_key, config.tls_client_ca)
    return NamespaceServer(app, config.host, config.namespace_port, tls).start()
