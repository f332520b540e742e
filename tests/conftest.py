"""Shared pytest fixtures: the pylance-written compatibility corpus and the pylance oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from corpus import CorpusDataset, build_corpus

CORPUS_STORAGE_VERSIONS: tuple[str, ...] = ("legacy", "2.0")


def pylance_table(uri: str | Path, version: int | str | None = None, **kwargs: Any) -> pa.Table:
    """What pylance, the reference engine, returns for the dataset at ``uri`` and ``version``."""
    return lance.dataset(str(uri), version=version).to_table(**kwargs)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[CorpusDataset]:
    """The compatibility corpus, written once per session for the legacy and 2.0 versions."""
    return build_corpus(tmp_path_factory.mktemp("corpus"), CORPUS_STORAGE_VERSIONS)
