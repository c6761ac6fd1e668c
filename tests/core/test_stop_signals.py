"""SIGTERM/SIGINT stop a service however its main thread is waiting (app_loader.on_stop_signals).

A Python signal handler runs in the main thread between two bytecodes, possibly while
`Event.wait()` holds that event's lock; a handler that set the same event deadlocked there
(a scheduler and an orchestrator outlived a killed `qw dev` that way). Each test runs in a
process of its own, since it installs signal handlers.
"""

from __future__ import annotations

import subprocess
import sys

HOLDING_THE_EVENTS_LOCK = """
import os, signal, threading
from queue_workflows import app_loader
stop = threading.Event()
received = app_loader.on_stop_signals(stop.set)
with stop._cond:  # where Event.wait() is between its checks: the event's own lock held
    os.kill(os.getpid(), signal.{sig})
    for _ in range(10_000):  # the handler runs at one of these bytecode boundaries
        pass
print("handler returned", flush=True)
print("stopped" if stop.wait(10) and received.wait(10) else "not stopped", flush=True)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)


def test_a_stop_signal_arriving_inside_event_wait_still_stops():
    for sig in ("SIGTERM", "SIGINT"):
        try:
            done = _run(HOLDING_THE_EVENTS_LOCK.format(sig=sig))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{sig}: the handler deadlocked on the event the main thread holds") from None
        assert done.stdout.split("\n")[:2] == ["handler returned", "stopped"], done.stdout + done.stderr


def test_a_burst_of_signals_runs_the_callback_and_nothing_blocks():
    done = _run("""
import os, signal, threading, time
from queue_workflows import app_loader
calls = []
received = app_loader.on_stop_signals(lambda: calls.append(1))
for _ in range(500):
    os.kill(os.getpid(), signal.SIGTERM)
assert received.wait(10)
time.sleep(0.2)
print("calls", len(calls) >= 1, flush=True)
""")
    assert done.returncode == 0 and "calls True" in done.stdout, done.stdout + done.stderr


def test_a_failing_callback_does_not_stop_the_next_signal_being_relayed():
    done = _run("""
import os, signal, threading
from queue_workflows import app_loader
seen = threading.Event()
def callback():
    if not getattr(callback, "failed", False):
        callback.failed = True
        raise RuntimeError("boom")
    seen.set()
app_loader.on_stop_signals(callback)
os.kill(os.getpid(), signal.SIGTERM)
import time; time.sleep(0.3)
os.kill(os.getpid(), signal.SIGTERM)
print("relayed" if seen.wait(10) else "lost", flush=True)
""")
    assert "relayed" in done.stdout, done.stdout + done.stderr
    assert "stop callback failed" in done.stderr and "boom" in done.stderr
