"""The user-facing dataset API, shaped like pylance's."""

from format.dataset.dataset import LanceDataset, Tags, dataset
from format.dataset.fragment import LanceFragment
from format.dataset.scan import Scanner
from format.dataset.write import write_dataset

__all__ = ["LanceDataset", "LanceFragment", "Scanner", "Tags", "dataset", "write_dataset"]
