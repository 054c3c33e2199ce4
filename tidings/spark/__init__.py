"""PySpark data source `nats`: read NATS Streaming channels, write to channels or subjects.

    from tidings.spark import register
    register(spark)                      # once per SparkSession, and in every thread that writes
    df = spark.read.format("nats").option("channels", "orders").load()

Needs the extra `tidings[spark]` (pyspark >= 4.2, pyarrow). The executors' Python must be able
to import tidings (install it; `sys.path` tricks do not reach the workers). See docs/spark.md.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["NatsDataSource", "register"]

_registered: weakref.WeakKeyDictionary[Any, type] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _require() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"tidings.spark needs pyspark>=4.2 and pyarrow: pip install 'tidings[spark]' ({exc})"
        ) from exc


def register(spark: Any) -> None:
    """Register the `nats` data source with a SparkSession and make `spark` the active session
    of the calling thread.

    Spark looks `format("nats")` up, for `df.write` and `writeStream...start()`, in the JVM's
    active session of the calling thread (reads use their own session). A thread you start has
    none (`SparkSession.active()` does not set it), and there writes fail with
    DATA_SOURCE_NOT_FOUND even after `register` in the main thread: call `register(spark)` in
    that thread too before writing (e.g. as a thread pool's initializer). The source is
    registered once per session; later calls only set the thread's active session.
    """
    _require()
    from .source import NatsDataSource

    with _lock:
        if _registered.get(spark) is not NatsDataSource:
            spark.dataSource.register(NatsDataSource)
            _registered[spark] = NatsDataSource
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is not None:  # None under Spark Connect: no JVM in this process
        # pyspark's own way (createDataFrame does this); Python has no public call for it
        spark._get_j_spark_session_class(spark._jvm).setActiveSession(jsession)


def __getattr__(name: str) -> Any:
    if name == "NatsDataSource":
        _require()
        from .source import NatsDataSource

        return NatsDataSource
    raise AttributeError(name)
