"""Object storage for the engine: local files, memory and S3 through fsspec."""

from format.io.store import FileReader, ObjectStore, open_store

__all__ = ["FileReader", "ObjectStore", "open_store"]
