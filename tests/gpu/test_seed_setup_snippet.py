"""The seed's setup snippet (configure, the host seams, bootstrap, then a gpu worker), run as written
in a process of its own: the worker it starts calls the registrar handed to
`queue_workflows.set_builtin_model_registrar` and runs a job with the model it registered."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from procs import query, service_env

from queue_workflows import node_queue

# The seed's snippet, verbatim (its "3." step starts the worker; QW_WORKER_MAX_JOBS=1 ends it after one job).
SEED_SNIPPET = """\
import queue_workflows
from queue_workflows import model_registry
from queue_workflows.model_registry import ModelSpec
from queue_workflows.scheduler import ScheduleEntry
# 1. configure (all keys optional — defaults keep ai_leads byte-compat)
queue_workflows.configure(
db_url_env="MY_DB_URL", # env var holding the DSN
video_model_ids=frozenset({"wan_i2v"}), # GPU models on the tight render budget
node_module_package="myapp.nodes", # node-module resolver prefix
container_prefix="myapp-", # cgroup attribution
)
# 2. wire the host seams
queue_workflows.set_workflow_provider(load_workflow_fn, pipeline_schema_fn)
queue_workflows.set_builtin_model_registrar(register_my_models)
queue_workflows.register_ingest_task("run_fetch_all", run_fetch_all)
queue_workflows.set_ingest_schedule([ScheduleEntry("fetch", 37, "run_fetch_all", "fetch")])
# 3. apply the engine's migration chain (idempotent), then launch
queue_workflows.db.bootstrap() # queue tables → queue_schema_version
queue_workflows.claim_worker.main(["--queue", "gpu"])
"""

# What the snippet takes from its host: the functions it names.
HOST = textwrap.dedent("""\
    def load_workflow_fn(name):
        return None


    def pipeline_schema_fn():
        return {}


    def run_fetch_all(reason):
        return {"reason": reason}


    def register_my_models():
        from queue_workflows import model_registry
        model_registry.register(model_registry.ModelSpec("seed_model", lambda: {"model": "seed_model"}, est_vram_gb=1))
    """)


@pytest.mark.multiprocess
def test_the_seeds_setup_snippet_runs_and_its_registrar_feeds_the_gpu_worker(database_url: str, tmp_path: Path) -> None:
    job = node_queue.enqueue_node_job("n", "gpu", node_module="qw_gpu_nodes", required_model="seed_model")["id"]
    script = tmp_path / "host.py"
    script.write_text(HOST + "\n\n" + SEED_SNIPPET)
    env = service_env(database_url, MY_DB_URL=database_url, QW_WORKER_MAX_JOBS="1")
    env.pop("QW_APP")
    env.pop("QW_DATABASE_URL")  # the snippet names its own variable
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = query(database_url, "SELECT status, context_delta, model_hit FROM workflow_node_jobs WHERE id = %s", (job,))
    assert (row["status"], row["context_delta"], row["model_hit"]) == ("completed", {"model": {"model": "seed_model"}}, False), done.stderr[-3000:]
