"""No payload can kill a worker, and no bad enqueue spoils the caller's transaction.

Worker side: NUL bytes and lone surrogates in a task's error or result, and BaseExceptions
(SystemExit, KeyboardInterrupt, ...) from task code, end as a failed attempt with a readable
error. Enqueue side: the same bad strings, deep nesting, a bad reason or run_id are refused
with a specific error before the caller's connection is touched (or, for a missing run, by a
conditional INSERT that writes nothing), and rows come back as dicts on any connection.
"""

from __future__ import annotations

import psycopg
import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_until, wait_workers_ready
from psycopg.pq import TransactionStatus

from queue_workflows import claim_worker, node_queue, register_ingest_task
from queue_workflows.errors import InvalidNameError, InvalidPayloadError, UnknownQueueError, UnknownTaskError
from queue_workflows.payloads import MAX_JSON_DEPTH, clean_text, json_object

SURROGATE = b"\xff".decode("utf-8", "surrogateescape")  # "\udcff", as os.listdir gives for a non-UTF-8 name

# kind -> text the stored error must contain (the cause, or the exception type)
POISON_KINDS = {
    "nul_error": "ValueError: bad \\x00 name",
    "surrogate_error": "OSError: file \\udcff",
    "nul_result": "NUL character",
    "surrogate_result": "lone surrogate",
    "system_exit_0": "SystemExit: 0",
    "system_exit_3": "SystemExit: 3",
    "keyboard_interrupt": "KeyboardInterrupt",
    "generator_exit": "GeneratorExit",
    "custom_base": "CustomBaseError: custom",
}


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("t", lambda reason, args: args)
    register_ingest_task("poison", qw_test_app.poison)
    register_ingest_task("record", qw_test_app.record)


def _deep(levels: int) -> dict:
    root: dict = {}
    node = root
    for _ in range(levels - 1):
        node["a"] = {}
        node = node["a"]
    return root


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _assert_readable_failure(row: dict, expected: str) -> None:
    assert row["status"] == "failed", row
    assert expected in row["error"], row["error"]
    assert _storable(row["error"])


# --- text cleaning -------------------------------------------------------------------------


def test_clean_text_escapes_nul_and_lone_surrogates_and_keeps_real_unicode():
    assert clean_text("bad \x00 name") == "bad \\x00 name"
    assert clean_text("file " + SURROGATE) == "file \\udcff"
    assert clean_text("\udc80\x00") == "\\udc80\\x00"
    assert clean_text("héllo ✓ 日本 😀") == "héllo ✓ 日本 😀"
    assert clean_text("plain") == "plain"


# --- worker side, in process ---------------------------------------------------------------


def test_every_poison_kind_fails_its_job_and_the_worker_goes_on(conn):
    ids = {kind: node_queue.enqueue_ingest_job("poison", "fetch", {"kind": kind}, max_attempts=1)["id"] for kind in POISON_KINDS}
    good = node_queue.enqueue_ingest_job("t", "fetch", {"after": "poison"})["id"]
    assert claim_worker.ClaimWorker("fetch", max_jobs=len(ids) + 1).run_forever() == 0
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM ingest_jobs")}
    for kind, expected in POISON_KINDS.items():
        _assert_readable_failure(rows[ids[kind]], expected)
    assert rows[good]["status"] == "completed" and rows[good]["result"] == {"after": "poison"}


def test_a_bad_result_is_rejected_with_a_message_that_does_not_embed_it(conn):
    job = node_queue.enqueue_ingest_job("poison", "fetch", {"kind": "surrogate_result"}, max_attempts=1)["id"]
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    error = conn.execute("SELECT error FROM ingest_jobs WHERE id = %s", (job,)).fetchone()["error"]
    assert error.startswith("InvalidPayloadError: task 'poison' result[\"x\"] contains a lone surrogate"), error
    assert "(\\udc80) at position 0" in error


def test_a_poisoned_attempt_with_attempts_left_is_retried_with_the_cleaned_error(conn):
    job = node_queue.enqueue_ingest_job("poison", "fetch", {"kind": "nul_error"}, max_attempts=2)["id"]
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    row = conn.execute("SELECT * FROM ingest_jobs WHERE id = %s", (job,)).fetchone()
    assert row["status"] == "scheduled" and row["attempts"] == 1, row
    assert "ValueError: bad \\x00 name" in row["error"]


def test_node_jobs_raising_base_exceptions_fail_and_the_worker_goes_on(conn, tmp_path, monkeypatch):
    (tmp_path / "qw_poison_nodes.py").write_text(
        "def run(inputs):\n"
        "    if inputs['kind'] == 'exit':\n"
        "        raise SystemExit(3)\n"
        "    if inputs['kind'] == 'interrupt':\n"
        "        raise KeyboardInterrupt\n"
        "    return {'x': 'a\\x00b'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ids = {
        kind: node_queue.enqueue_node_job(f"n_{kind}", "cpu", node_module="qw_poison_nodes", inputs={"kind": kind}, max_attempts=1)["id"]
        for kind in ("exit", "interrupt", "nul")
    }
    assert claim_worker.ClaimWorker("cpu", max_jobs=3).run_forever() == 0
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM workflow_node_jobs")}
    _assert_readable_failure(rows[ids["exit"]], "SystemExit: 3")
    _assert_readable_failure(rows[ids["interrupt"]], "KeyboardInterrupt")
    _assert_readable_failure(rows[ids["nul"]], "node 'n_nul' result[\"x\"] contains a NUL character")


# --- worker side, real processes -----------------------------------------------------------


@pytest.mark.multiprocess
def test_poison_jobs_never_kill_real_workers(database_url: str, procs: Procs) -> None:
    env = service_env(database_url)
    procs.orchestrator(env)
    workers = [procs.worker(env, "fetch") for _ in range(3)]
    wait_workers_ready(database_url, workers)

    ids = {kind: node_queue.enqueue_ingest_job("poison", "fetch", {"kind": kind}, max_attempts=1)["id"] for kind in POISON_KINDS}

    def all_failed() -> list[dict] | None:
        dead = [w.pid for w in workers if w.poll() is not None]
        assert not dead, f"worker(s) {dead} died\n{procs.logs()}"
        rows = query(database_url, "SELECT * FROM ingest_jobs WHERE id = ANY(%s)", (list(ids.values()),))
        return rows if all(r["status"] == "failed" for r in rows) else None

    rows = {r["id"]: r for r in wait_until(all_failed, timeout=30, interval=0.1, what=f"every poison job failed\n{procs.logs()}")}
    for kind, expected in POISON_KINDS.items():
        _assert_readable_failure(rows[ids[kind]], expected)

    # Still alive, and still working: a plain job after the poison completes.
    after = node_queue.enqueue_ingest_job("record", "fetch", {"token": "after-poison"})["id"]
    status = lambda: query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (after,))[0]["status"]  # noqa: E731
    wait_until(lambda: status() == "completed", timeout=15, what=f"a plain job after the poison\n{procs.logs()}")
    assert [w.poll() for w in workers] == [None, None, None], procs.logs()


# --- enqueue side --------------------------------------------------------------------------


def _count(url: str, table: str) -> int:
    return query(url, f"SELECT count(*) AS n FROM {table}")[0]["n"]


BAD_INGEST = [
    ({"args": {"a": [0, 1, 2, "x" + SURROGATE]}}, InvalidPayloadError, r'args\["a"\]\[3\] contains a lone surrogate'),
    ({"args": {"k" + SURROGATE: 1}}, InvalidPayloadError, r'key args\["k\\udcff"\] contains a lone surrogate'),
    ({"args": {"a": {"b": "x\x00y"}}}, InvalidPayloadError, r'args\["a"\]\["b"\] contains a NUL character'),
    ({"args": {"a\x00": 1}}, InvalidPayloadError, r'key args\["a\\u0000"\] contains a NUL'),
    ({"args": {"d": _deep(100_000)}}, InvalidPayloadError, f"nested more than {MAX_JSON_DEPTH} levels deep"),
    ({"args": {"m": {1: "x"}}}, InvalidPayloadError, r'args\["m"\] has a key of type int'),
    ({"reason": "a\x00b"}, InvalidPayloadError, "reason contains a NUL"),
    ({"reason": "r" + SURROGATE}, InvalidPayloadError, "reason contains a lone surrogate"),
    ({"reason": 7}, InvalidPayloadError, "reason must be a string, not int"),
    ({"reason": "r" * 201}, InvalidPayloadError, "reason must be 1 to 200 characters, not 201"),
    ({"reason": ""}, InvalidPayloadError, "reason must be 1 to 200 characters, not 0"),
]


@pytest.mark.parametrize(("extra", "error", "message"), BAD_INGEST)
def test_bad_ingest_input_leaves_the_callers_transaction_untouched(database_url, extra, error, message):
    kwargs = {"task_name": "t", "queue": "fetch", **extra}
    with psycopg.connect(database_url) as caller:
        with pytest.raises(error, match=message) as raised:
            node_queue.enqueue_ingest_job(**kwargs, conn=caller)
        assert _storable(str(raised.value))
        assert caller.info.transaction_status == TransactionStatus.IDLE  # nothing was sent
        with caller.transaction():
            caller.execute("INSERT INTO workflow_runs (workflow_name) VALUES ('mine')")
            with pytest.raises(error, match=message):
                node_queue.enqueue_ingest_job(**kwargs, conn=caller)
            with pytest.raises(error, match=message):
                node_queue.enqueue_ingest_jobs([{"task_name": "t", "queue": "fetch"}, kwargs], conn=caller)
            assert caller.execute("SELECT count(*) FROM workflow_runs").fetchone() == (1,)
    assert _count(database_url, "workflow_runs") == 1
    assert _count(database_url, "ingest_jobs") == 0


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"a": [SURROGATE]}, r'inputs\["a"\]\[0\] contains a lone surrogate'),
        ({"a": "\x00"}, r'inputs\["a"\] contains a NUL'),
        (_deep(MAX_JSON_DEPTH + 1), f"inputs is nested more than {MAX_JSON_DEPTH} levels deep"),
    ],
)
def test_bad_node_inputs_are_refused_before_the_connection_is_touched(database_url, inputs, message):
    with psycopg.connect(database_url) as caller:
        with pytest.raises(InvalidPayloadError, match=message):
            node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", inputs=inputs, conn=caller)
        assert caller.info.transaction_status == TransactionStatus.IDLE
    assert _count(database_url, "workflow_node_jobs") == 0


def test_nesting_up_to_the_limit_is_accepted_and_round_trips(conn):
    payload = _deep(MAX_JSON_DEPTH)
    row = node_queue.enqueue_ingest_job("t", "fetch", payload)
    assert conn.execute("SELECT args FROM ingest_jobs WHERE id = %s", (row["id"],)).fetchone()["args"] == payload
    with pytest.raises(InvalidPayloadError, match="nested more than 100 levels"):
        json_object(_deep(MAX_JSON_DEPTH + 1), what="args", max_bytes=1 << 20)


def test_backslash_u0000_text_is_not_a_nul_and_round_trips_through_a_worker(conn):
    text = "\\u0000"  # six characters: backslash, u, 0, 0, 0, 0
    args = {"s": text, text: [text, "ok"]}
    job = node_queue.enqueue_ingest_job("t", "fetch", args)
    assert conn.execute("SELECT args FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()["args"] == args
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    row = conn.execute("SELECT status, result FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert row == {"status": "completed", "result": args}
    with pytest.raises(InvalidPayloadError, match="NUL"):
        node_queue.enqueue_ingest_job("t", "fetch", {"s": "\x00"})


def test_a_bulk_error_names_the_item_and_its_task_for_every_kind_of_bad_item(database_url):
    good = {"task_name": "t", "queue": "fetch"}
    cases = [
        ("not a mapping", InvalidPayloadError, r"job #1 must be a mapping .*not str"),
        (None, InvalidPayloadError, r"job #1 must be a mapping .*not NoneType"),
        ([("task_name", "t")], InvalidPayloadError, r"job #1 must be a mapping .*not list"),
        ({"task_name": "t"}, InvalidPayloadError, r"job #1: missing queue; .*\[task 't'\]"),
        ({"queue": "fetch"}, InvalidPayloadError, r"job #1: missing task_name"),
        ({**good, 3: "x"}, InvalidPayloadError, r"job #1: unknown argument\(s\) 3; .*\[task 't'\]"),
        ({**good, "colour": "red"}, InvalidPayloadError, r"job #1: unknown argument\(s\) 'colour'"),
        ({**good, "args": {"a": SURROGATE}}, InvalidPayloadError, r'job #1: args\["a"\] contains a lone surrogate.*\[task .t.\]'),
        ({**good, "args": _deep(100_000)}, InvalidPayloadError, r"job #1: args is nested more than 100 .*\[task 't'\]"),
        ({**good, "reason": "\x00"}, InvalidPayloadError, r"job #1: reason contains a NUL .*\[task 't'\]"),
        ({**good, "priority": "high"}, InvalidPayloadError, r"job #1: priority must be .*\[task 't'\]"),
        ({**good, "max_attempts": 0}, InvalidPayloadError, r"job #1: max_attempts .*\[task 't'\]"),
        ({"task_name": "missing", "queue": "fetch"}, UnknownTaskError, r"job #1: ingest task 'missing' is not registered"),
        ({"task_name": "bad name!", "queue": "fetch"}, InvalidNameError, r"job #1: task name 'bad name!' is invalid"),
    ]
    with psycopg.connect(database_url) as caller:
        for bad, error, message in cases:
            with pytest.raises(error, match=message) as raised:
                node_queue.enqueue_ingest_jobs([good, bad, good], conn=caller)
            assert _storable(str(raised.value)), bad
            assert caller.info.transaction_status == TransactionStatus.IDLE, bad
        with pytest.raises(InvalidPayloadError, match="iterable of mappings, not int"):
            node_queue.enqueue_ingest_jobs(5, conn=caller)  # type: ignore[arg-type]
    assert _count(database_url, "ingest_jobs") == 0


@pytest.mark.parametrize("run_id", [0, -1, 2**63, 10**30, True, "7", 1.0])
def test_an_out_of_range_run_id_is_refused_before_the_connection_is_touched(database_url, run_id):
    with psycopg.connect(database_url) as caller:
        with pytest.raises(InvalidPayloadError, match="run_id must be a positive 64-bit integer"):
            node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", run_id=run_id, conn=caller)
        assert caller.info.transaction_status == TransactionStatus.IDLE
    assert _count(database_url, "workflow_node_jobs") == 0


def test_a_missing_run_writes_nothing_and_keeps_the_callers_transaction(database_url):
    with psycopg.connect(database_url) as caller:
        with caller.transaction():
            run_id = caller.execute("INSERT INTO workflow_runs (workflow_name) VALUES ('mine') RETURNING id").fetchone()[0]
            for missing in (run_id + 1000, 2**63 - 1):
                with pytest.raises(InvalidPayloadError, match=f"run_id {missing} does not exist"):
                    node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", run_id=missing, conn=caller)
                assert caller.info.transaction_status == TransactionStatus.INTRANS  # not INERROR
            # The run made earlier in this same, still uncommitted, transaction is seen.
            row = node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", run_id=run_id, conn=caller)
            assert row["run_id"] == run_id
        assert query(database_url, "SELECT run_id FROM workflow_node_jobs") == [{"run_id": run_id}]


def test_enqueue_returns_dict_rows_on_a_plain_tuple_row_connection(database_url):
    with psycopg.connect(database_url) as caller, caller.transaction():
        one = node_queue.enqueue_ingest_job("t", "fetch", {"i": 1}, conn=caller)
        many = node_queue.enqueue_ingest_jobs([{"task_name": "t", "queue": "load", "args": {"i": i}} for i in range(3)], conn=caller)
        run_id = caller.execute("INSERT INTO workflow_runs (workflow_name) VALUES ('w') RETURNING id").fetchone()[0]
        node = node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", run_id=run_id, inputs={"x": 1}, conn=caller)
        assert caller.execute("SELECT 1").fetchone() == (1,)  # the caller's own row factory is unchanged
    assert isinstance(one, dict) and one["args"] == {"i": 1}
    assert [type(r) for r in many] == [dict] * 3 and [r["args"] for r in many] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert isinstance(node, dict) and node["inputs"] == {"x": 1} and node["run_id"] == run_id


@pytest.mark.parametrize("bad", ["q\x00", "q" + SURROGATE, "q" * 1_000_000], ids=["nul", "surrogate", "huge"])
def test_a_bad_name_is_echoed_short_and_storable(database_url, bad):
    for call in (
        lambda: node_queue.enqueue_ingest_job("t", bad),
        lambda: node_queue.enqueue_node_job(bad, "cpu"),
        lambda: node_queue.enqueue_node_job("n", bad),
        lambda: node_queue.enqueue_ingest_job("t", "fetch", priority=bad),
    ):
        with pytest.raises((InvalidNameError, InvalidPayloadError, UnknownQueueError)) as raised:
            call()
        message = str(raised.value)
        assert _storable(message) and len(message) < 300, message[:300]
    assert _count(database_url, "ingest_jobs") + _count(database_url, "workflow_node_jobs") == 0


def test_an_outcome_the_server_refuses_is_stored_as_the_failure_and_the_worker_goes_on(database_url, conn):
    conn.execute("ALTER TABLE ingest_jobs ADD CONSTRAINT test_no_forbidden CHECK (result IS NULL OR NOT result ? 'forbidden')")
    try:
        register_ingest_task("refused", lambda reason: {"forbidden": True})
        register_ingest_task("fine", lambda reason: {"ok": True})
        refused = node_queue.enqueue_ingest_job("refused", "fetch", max_attempts=1)
        fine = node_queue.enqueue_ingest_job("fine", "fetch")
        worker = claim_worker.ClaimWorker("fetch", max_jobs=2)
        assert worker.run_forever() == 0
        rows = {r["id"]: r for r in conn.execute("SELECT id, status, error FROM ingest_jobs")}
        assert rows[refused["id"]]["status"] == "failed"
        assert "could not be stored: CheckViolation" in rows[refused["id"]]["error"]
        assert rows[fine["id"]]["status"] == "completed", "the worker carried on"
    finally:
        conn.execute("ALTER TABLE ingest_jobs DROP CONSTRAINT test_no_forbidden")
