"""What every namespace handler uses: the Flight server's service, the namespace tree, where
clients find each table's files, and the rights of the caller."""

from __future__ import annotations

import fnmatch
from typing import Any

from quiver.flight_server.auth import Identity
from quiver.flight_server.namespace.credentials import Locations
from quiver.flight_server.namespace.tree import NamespaceTree
from quiver.flight_server.service import DatasetService
from quiver.wire.requests import READ, WRITE


class Context:
    """One namespace front door over one `DatasetService`."""

    def __init__(
        self, service: DatasetService, locations: Locations, *, managed: bool = False
    ) -> None:
        self.service = service
        self.managed = managed  # whether clients commit through CreateTableVersion
        self.handles = service.handles
        self.tree = NamespaceTree(service.root, service.handles.storage_options)
        self.locations = locations

    def authorize(self, identity: Any, dataset: str, right: str) -> None:
        """PermissionDenied unless the caller holds `right` on dataset `dataset`."""
        self.service.authorize(identity, dataset, right)

    def may(self, identity: Any, dataset: str, right: str = READ) -> bool:
        """Whether the caller holds `right` on dataset `dataset` (always without auth)."""
        return not isinstance(identity, Identity) or identity.may(right, dataset)

    def authorize_namespace(self, identity: Any, path: str) -> None:
        """Creating or dropping namespace `path` needs the write right on everything in
        it (a pattern matching ``path/*``, such as ``team/*`` or ``*``)."""
        if path:
            self.authorize(identity, f"{path}/*", WRITE)

    def sees_namespace(self, identity: Any, path: str) -> bool:
        """Whether the caller may know namespace `path`: some right of theirs reaches
        inside it."""
        if not isinstance(identity, Identity) or not path:
            return True
        inside = f"{path}/*"
        return any(
            fnmatch.fnmatchcase(inside, p) or p.startswith(f"{path}/")
            for p in (*identity.read, *identity.write)
        )
