"""Exception types. Every bad-input error is raised before anything is written."""

from __future__ import annotations

import psycopg


class QueueWorkflowsError(Exception):
    """Base class for every error the engine raises on purpose."""


class ConfigError(QueueWorkflowsError, ValueError):
    """A setting is missing or invalid; the message names the variable."""


class InvalidNameError(QueueWorkflowsError, ValueError):
    """A queue or task name is not a plain identifier."""


class UnknownQueueError(QueueWorkflowsError, ValueError):
    """The queue is not one this host serves."""


class ReservedQueueError(QueueWorkflowsError, ValueError):
    """`cpu` and `gpu` belong to DAG node jobs and cannot be ingest queues."""


class UnknownTaskError(QueueWorkflowsError, LookupError):
    """No ingest task is registered under that name."""


class InvalidPayloadError(QueueWorkflowsError, ValueError):
    """Args or a result are not a JSON object, or are too large."""


class SchemaNotReadyError(QueueWorkflowsError, TimeoutError):
    """The database schema did not reach the required version in time."""


class MigrationError(QueueWorkflowsError, RuntimeError):
    """The migration chain on disk or in the ledger is inconsistent."""


class DatabaseUnreachableError(QueueWorkflowsError, ConnectionError):
    """Postgres did not answer (not up yet, wrong host, out of slots); waiting may cure it."""


class TransactionPoolerError(ConfigError):
    """The DSN reaches Postgres through a transaction-mode pooler, and this process needs session state (locks, LISTEN)."""


class DatabaseFullError(QueueWorkflowsError, psycopg.OperationalError):
    """Postgres could not write for want of disk space: nothing was written, and a retry may pass once space returns.

    Still a psycopg.OperationalError, so code that retries on those goes on retrying.
    """


class NodeTimeout(QueueWorkflowsError, TimeoutError):
    """A node's attempt ran past its own `timeout`: the watchdog ended it, and its retry policy may name this class."""
