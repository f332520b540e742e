"""Shared pytest fixtures: the pylance-written compatibility corpus and the pylance oracle."""

from __future__ import annotations

import pytest
from corpus import CORPUS_STORAGE_VERSIONS, CorpusDataset, build_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[CorpusDataset]:
    """The compatibility corpus, written once per session for the legacy and 2.0 versions."""
    return build_corpus(tmp_path_factory.mktemp("corpus"), CORPUS_STORAGE_VERSIONS)
