"""Quiver's Lance engine: reads and writes Lance datasets (every storage version pylance 14
writes) with pylance's API, over pyarrow, numpy and one small C extension.

Layers, each importing only those before it: `io` (object stores) → `expr` (SQL filters and
expressions) → `table` (manifests, transactions, commits, deletions, row ids) → `file`
(data files: legacy, 2.0, 2.1/2.2 over one container) → `dataset` (the pylance-shaped API).
Import the public API from the submodules, e.g. ``from format.dataset import dataset``.
"""
