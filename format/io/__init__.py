"""Object storage for the engine: local files, memory and S3 through fsspec."""

from quiver.format.io.store import FileReader, ObjectStore, open_store

__all__ = ["FileReader", "ObjectStore", "open_store"]
