"""The user-facing dataset API, shaped like pylance's."""

from format.dataset.dataset import LanceDataset, Tags, dataset
from format.dataset.fragment import LanceFragment
from format.dataset.operations import (
    LanceOperation,
    commit,
    fragment_from_json,
    fragment_to_json,
    write_fragments,
)
from format.dataset.scan import Scanner
from format.dataset.write import write_dataset

__all__ = [
    "LanceDataset",
    "LanceFragment",
    "LanceOperation",
    "Scanner",
    "Tags",
    "commit",
    "dataset",
    "fragment_from_json",
    "fragment_to_json",
    "write_dataset",
    "write_fragments",
]
