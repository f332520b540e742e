"""The user-facing dataset API, shaped like pylance's.

`LanceDataset` (dataset.py) is the facade over one resolved version, `DatasetCore`
(core.py); the modules below it each do one job on a core: fragments (fragment.py),
scans (scan.py), writing data files and datasets (write.py), schema evolution
(evolution.py), compaction (compaction.py), cleanup (cleanup.py), and the low-level
`write_fragments` + `commit` (operations.py).
"""

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.dataset import LanceDataset, Tags, dataset, write_dataset
from quiver.format.dataset.distributed_indexing import Index, IndexFile
from quiver.format.dataset.fragment import LanceFragment
from quiver.format.dataset.minhash import MinHashQuery
from quiver.format.dataset.operations import (
    LanceOperation,
    commit,
    fragment_from_json,
    fragment_to_json,
    write_fragments,
)
from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.scanner_builder import ScannerBuilder

__all__ = [
    "DatasetCore",
    "Index",
    "IndexFile",
    "LanceDataset",
    "LanceFragment",
    "LanceOperation",
    "MinHashQuery",
    "Scanner",
    "ScannerBuilder",
    "Tags",
    "commit",
    "dataset",
    "fragment_from_json",
    "fragment_to_json",
    "write_dataset",
    "write_fragments",
]
