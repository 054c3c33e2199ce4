"""PySpark data source `nats`: read NATS Streaming channels, write to channels or subjects.

    from tidings.spark import register
    register(spark)                      # once per SparkSession
    df = spark.read.format("nats").option("channels", "orders").load()

Needs the extra `tidings[spark]` (pyspark >= 4.2, pyarrow). The executors' Python must be able
to import tidings (install it; `sys.path` tricks do not reach the workers). See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NatsDataSource", "register"]


def _require() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"tidings.spark needs pyspark>=4.2 and pyarrow: pip install 'tidings[spark]' ({exc})"
        ) from exc


def register(spark: Any) -> None:
    """Register the `nats` data source with a SparkSession."""
    _require()
    from .source import NatsDataSource

    spark.dataSource.register(NatsDataSource)


def __getattr__(name: str) -> Any:
    if name == "NatsDataSource":
        _require()
        from .source import NatsDataSource

        return NatsDataSource
    raise AttributeError(name)
