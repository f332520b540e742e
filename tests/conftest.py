"""Shared pytest fixtures: the pylance-written compatibility corpus and the pylance oracle."""

from __future__ import annotations

import os

import pytest
from corpus import CORPUS_STORAGE_VERSIONS, CorpusDataset, build_corpus

# Every JVM the tests' Spark sessions start (driver and executors, in this process or in a
# job it runs) compiles with C1 only and collects with the serial collector: the JIT's
# second tier and parallel GC threads cost more CPU than the short jobs gain from them
# (tests/spark/test_spark.py alone: 112-123 against 72-89 CPU seconds on two cores).
_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault(
    "PYSPARK_SUBMIT_ARGS",
    f"--driver-java-options '{_JVM}' --conf 'spark.executor.extraJavaOptions={_JVM}' pyspark-shell",
)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[CorpusDataset]:
    """The compatibility corpus, written once per session for the legacy and 2.0 versions."""
    return build_corpus(tmp_path_factory.mktemp("corpus"), CORPUS_STORAGE_VERSIONS)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how many hostile inputs the campaign tests sent (`hostile_inputs` properties)."""
    total = 0
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) == "teardown":
                props = getattr(report, "user_properties", ())
                total += sum(v for k, v in props if k == "hostile_inputs")
    if total:
        terminalreporter.write_line(f"hostile inputs sent to real quiver serve processes: {total}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules marked slow or spark first: `make test` hands each worker whole modules, and the
    long ones then start while the rest is left to balance the workers' ends."""
    items.sort(
        key=lambda item: not (item.get_closest_marker("slow") or item.get_closest_marker("spark"))
    )
