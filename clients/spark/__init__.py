"""The `quiver` PySpark data source (PySpark >= 4.1; `pip install "quiver-lance[spark]"`).

```python
from quiver.clients.spark import register

register(spark)
spark.read.format("quiver").option("uri", "grpc://host:8815").option("dataset", "sales").load()
```
"""

from __future__ import annotations

from typing import Any

from quiver.clients.spark.batch import QuiverCommitMessage, QuiverPartition
from quiver.clients.spark.convert import QuiverWriteError, spark_schema
from quiver.clients.spark.datasource import QuiverDataSource
from quiver.clients.spark.options import QuiverOptionError
from quiver.clients.spark.pushdown import filter_sql

__all__ = [
    "QuiverCommitMessage",
    "QuiverDataSource",
    "QuiverOptionError",
    "QuiverPartition",
    "QuiverWriteError",
    "filter_sql",
    "register",
    "spark_schema",
]


def register(spark: Any) -> None:
    """Register the `quiver` data source with a SparkSession (registration is per session)."""
    spark.dataSource.register(QuiverDataSource)
