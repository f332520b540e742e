"""The README's Python quickstarts run as written: against a real `quiver serve` (with the
demo datasets `make serve` creates) at the address they name, rewritten to the test's port,
and on the engine's copy of the demo dataset. A newcomer's first commands must work."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.flight.server_process import quiver_serve

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ADDRESS = "grpc://127.0.0.1:8815"


def python_blocks() -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _block(marker: str) -> str:
    found = [b for b in python_blocks() if marker in b]
    assert len(found) == 1, f"one README quickstart uses {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("readme") / "data"
    root.mkdir()
    demo = [sys.executable, "-m", "quiver.flight_server", "demo", "--root", str(root)]
    subprocess.run(demo, check=True, cwd=ROOT, capture_output=True)
    with quiver_serve(root) as (uri, _pid):
        yield uri, root


def _run(code: str, uri: str, root: Path) -> dict[str, Any]:
    assert ADDRESS in code or "data/demo.lance" in code
    code = code.replace(ADDRESS, uri).replace('"data/demo.lance"', repr(str(root / "demo.lance")))
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    return namespace


def test_every_python_block_is_a_quickstart_tested_here() -> None:
    markers = ["pyarrow.flight", "quiver.connect", "register_spark(spark)", "quiver.dataset"]
    assert len(python_blocks()) == len(markers)
    for marker in markers:
        _block(marker)


def test_flight_quickstart(served: tuple[str, Path]) -> None:
    ns = _run(_block("pyarrow.flight"), *served)
    table = ns["table"]
    assert table.num_rows > 0 and table.column_names == ["id", "name", "price"]
    assert min(table.column("price").to_pylist()) > 50


def test_python_client_quickstart(served: tuple[str, Path]) -> None:
    ns = _run(_block("quiver.connect"), *served)
    assert ns["orders"].num_rows > 0
    from quiver.clients import Client

    with Client(served[0]) as qc:
        scores = qc.read("scores").sort_by("id").to_pylist()
    assert scores == [
        {"id": 1, "score": 0.5},
        {"id": 2, "score": 1.4},
        {"id": 3, "score": 0.2},
    ]


def test_engine_quickstart(served: tuple[str, Path]) -> None:
    _run(_block("quiver.dataset"), *served)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_quickstart(served: tuple[str, Path]) -> None:
    pytest.importorskip("pyspark")
    code = _block("register_spark(spark)").replace(
        "SparkSession.builder.getOrCreate()",
        'SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()',
    )
    ns = _run(code, *served)
    try:
        from quiver.clients import Client

        with Client(served[0]) as qc:
            counts = qc.read("by_category")
        assert counts.num_rows == 5 and sum(counts.column("count").to_pylist()) == 5000
    finally:
        ns["spark"].stop()
