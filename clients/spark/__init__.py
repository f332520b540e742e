"""The `quiver` PySpark data source (PySpark >= 4.1; `pip install quiver[spark]`).

```python
from clients.spark import register

register(spark)
spark.read.format("quiver").option("uri", "grpc://host:8815").option("dataset", "sales").load()
```
"""

from __future__ import annotations

from typing import Any

from clients.spark.datasource import (
    QuiverCommitMessage,
    QuiverDataSource,
    QuiverOptionError,
    QuiverPartition,
    filter_sql,
)

__all__ = [
    "QuiverCommitMessage",
    "QuiverDataSource",
    "QuiverOptionError",
    "QuiverPartition",
    "filter_sql",
    "register",
]


def register(spark: Any) -> None:
    """Register the `quiver` data source with a SparkSession (registration is per session)."""
    spark.dataSource.register(QuiverDataSource)
