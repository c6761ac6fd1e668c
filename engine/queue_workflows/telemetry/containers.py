"""Which containers are this stack's: asked of Docker over its socket, with read calls only.

A container belongs to the stack when its name starts with `container_prefix` (the seed's
rule), else when its compose project label is `compose_project`, else when it shares the
compose project of the container this process runs in. The Docker API is reached through
the `docker` SDK's low-level client; the only calls made are the list and the inspect.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PROJECT_LABEL = "com.docker.compose.project"
_ID_RE = re.compile(r"^[0-9a-f]{12,64}$")


@dataclass(frozen=True)
class ContainerRef:
    id: str  # the full id, which names its cgroup
    name: str


class StackUnknown(Exception):
    """There is no rule that says which containers are the stack's."""


class SocketDenied(Exception):
    """This process may not use the Docker socket: its group is not one of ours."""


def socket_denied(url: str | None) -> str | None:
    """Why this process cannot open the Docker unix socket `url` points at (else DOCKER_HOST, else the
    default), naming the socket's group: compose adds it as QW_DOCKER_GID, which must match the host's."""
    url = url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not url.startswith("unix://"):
        return None
    path = url.removeprefix("unix://")
    try:
        gid = os.stat(path).st_gid
    except OSError:
        return None  # absent: Docker's own error says so
    if os.access(path, os.R_OK | os.W_OK):
        return None
    groups = sorted({os.getgid(), *os.getgroups()})
    return (f"permission denied on the Docker socket {path}: it belongs to group {gid}, this process (uid {os.getuid()}) "
            f"is in groups {groups}; set QW_DOCKER_GID={gid} in this host's .env (`stat -c %g /var/run/docker.sock`) "
            "and recreate hw-metrics")


def docker_api(url: str | None, *, timeout: float = 5.0) -> Any:
    """The SDK's low-level client: `url` (e.g. unix:///var/run/docker.sock), else DOCKER_HOST or the default socket."""
    import docker

    if url:
        return docker.APIClient(base_url=url, timeout=timeout)
    return docker.from_env(timeout=timeout).api


def stack_containers(api: Any, *, prefix: str | None, project: str | None, own_id: str | None = None) -> list[ContainerRef]:
    """The running containers of the stack, by name; raises what the API raises, StackUnknown without a rule."""
    if prefix:
        listed = api.containers()
        rows = [row for row in listed if _name(row).startswith(prefix)]
    else:
        project = project or _own_project(api, own_id or socket.gethostname())
        rows = api.containers(filters={"label": f"{PROJECT_LABEL}={project}"})
    refs = [ContainerRef(str(row.get("Id", "")), _name(row)) for row in rows if isinstance(row, dict)]
    return sorted((ref for ref in refs if _ID_RE.match(ref.id)), key=lambda ref: ref.name)


def _name(row: Any) -> str:
    names = row.get("Names") if isinstance(row, dict) else None
    first = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else ""
    return first.lstrip("/")


def _own_project(api: Any, own_id: str) -> str:
    try:
        labels = (api.inspect_container(own_id).get("Config") or {}).get("Labels") or {}
    except Exception as exc:  # noqa: BLE001 - not in a container, or not one Docker knows
        raise StackUnknown(
            f"this process is not in a compose container ({type(exc).__name__}); "
            "set QW_COMPOSE_PROJECT or QW_CONTAINER_PREFIX to say which containers are the stack's"
        ) from None
    project = labels.get(PROJECT_LABEL)
    if not project:
        raise StackUnknown("this container has no compose project label; set QW_COMPOSE_PROJECT or QW_CONTAINER_PREFIX")
    return str(project)


Lister = Callable[[], list[ContainerRef]]


def docker_lister(*, url: str | None, prefix: str | None, project: str | None, timeout: float = 5.0) -> Lister:
    """A lister that connects on first use and again after any failure (the socket may come and go).

    The sidecar's own compose project, when it is the rule, is asked for once and remembered.
    """
    state: dict[str, Any] = {}

    def list_stack() -> list[ContainerRef]:
        try:
            if "api" not in state:
                state["api"] = docker_api(url, timeout=timeout)  # asks the engine its API version
            if not prefix and not project and "project" not in state:
                state["project"] = _own_project(state["api"], socket.gethostname())
            return stack_containers(state["api"], prefix=prefix, project=project or state.get("project"))
        except StackUnknown:
            raise
        except Exception as exc:
            state.pop("api", None)
            denied = socket_denied(url)
            if denied:
                raise SocketDenied(denied) from exc
            raise

    return list_stack
