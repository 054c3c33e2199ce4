"""The streaming banner never logs a PostgreSQL password, in either DSN form."""

from __future__ import annotations

import pytest

from tidings.streaming.server.banner import hide_password, store_text
from tidings.streaming.server.options import StreamingOptions


@pytest.mark.parametrize(("dsn", "shown"), [
    ("postgresql://u:s3cret@db:5432/stan?sslmode=disable",
     "postgresql://u:***@db:5432/stan?sslmode=disable"),
    ("postgres://u@db/stan?password=s3cret&connect_timeout=5",
     "postgres://u@db/stan?password=***&connect_timeout=5"),
    ("host=db user=u password=s3cret dbname=stan", "host=db user=u password=*** dbname=stan"),
    ("host=db password='s3 cret' dbname=stan", "host=db password=*** dbname=stan"),
    ("postgres://db/stan", "postgres://db/stan"),
])
def test_postgres_password_is_hidden(dsn: str, shown: str) -> None:
    assert hide_password(dsn) == shown
    opts = StreamingOptions(store="sql", sql_driver="postgres", sql_source=dsn)
    assert "s3" not in store_text(opts)
