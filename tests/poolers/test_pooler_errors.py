"""How a tool reports the two errors of this page: one line each, with an exit code of its own."""

from __future__ import annotations

import psycopg

from queue_workflows import app_loader
from queue_workflows.errors import DatabaseFullError, TransactionPoolerError
from queue_workflows.worker import exits


def test_a_transaction_pooler_is_exit_80_and_a_full_disk_exit_1():
    refused = TransactionPoolerError("QW_DATABASE_URL points at a transaction-mode pooler (...)")
    assert app_loader.failure(refused) == (exits.EXIT_TRANSACTION_POOLER, str(refused))
    assert exits.EXIT_TRANSACTION_POOLER == 80
    assert exits.EXIT_TRANSACTION_POOLER not in {exits.EXIT_OK, exits.EXIT_BUDGET, exits.EXIT_STALLED, exits.EXIT_JOB_TAKEN,
                                                 exits.EXIT_DEVICE_ERROR, exits.EXIT_HARD_STOP, app_loader.EXIT_USAGE, app_loader.EXIT_FAILED}
    full = DatabaseFullError("Postgres is out of disk space (...): nothing was written")
    assert isinstance(full, psycopg.OperationalError)  # code that retries on those goes on retrying
    assert app_loader.failure(full) == (app_loader.EXIT_FAILED, str(full))
