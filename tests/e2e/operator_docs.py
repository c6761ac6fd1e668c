"""The operator's documents as tests: their shell blocks found in README.md and deploy/README.md,
run as written in a copy of the repository, with only the values marked `# per host` replaced.

A fence in these documents is ```sh (runs), ```text (output, never runs) or ```yaml (a file's
text, never runs); any other fence, an unlabelled one included, fails the test, so no block
escapes by being written differently.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from e2e_support import ROOT

RUN = "sh"
NOT_RUN = ("text", "yaml")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
# `name=value   # per host: ...`: a value each host sets, which a test may replace.
PER_HOST = re.compile(r"^(\w+)=(\S+)([ \t]+# per host:.*)$", re.M)
README_SECTION = "## Running the stack with Docker Compose"


@dataclass(frozen=True)
class Block:
    doc: str
    heading: str
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line} ({self.heading})"


def _blocks(doc: str, text: str, first_line: int = 1) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        lang = match.group(1).strip()
        line = first_line + text.count("\n", 0, match.start())
        if lang not in (RUN, *NOT_RUN):
            raise AssertionError(f"{doc}:{line}: a fence must be ```{RUN} (it runs) or one of {', '.join(NOT_RUN)} "
                                 f"(it does not), not ```{lang}")
        if lang == RUN:
            headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.M)
            found.append(Block(doc, headings[-1] if headings else "", line, match.group(2)))
    return found


def shell_blocks() -> list[Block]:
    """README.md's compose section's blocks, then deploy/README.md's, in document order."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index(README_SECTION)
    end = readme.find("\n## ", start + len(README_SECTION))
    section = readme[start: end if end != -1 else len(readme)]
    deploy = (ROOT / "deploy" / "README.md").read_text()
    return [*_blocks("README.md", section, readme.count("\n", 0, start) + 1), *_blocks("deploy/README.md", deploy)]


def section_blocks(doc: str, section: str) -> list[Block]:
    """The blocks of one `## ` section of another document (docs/poolers.md's compose section, say), in order."""
    text = (ROOT / doc).read_text()
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    return _blocks(doc, text[start: end if end != -1 else len(text)], text.count("\n", 0, start) + 1)


def block_under(heading: str) -> Block:
    matches = [b for b in shell_blocks() if b.heading == heading]
    assert len(matches) == 1, f"expected one sh block under {heading!r}, found {len(matches)}"
    return matches[0]


def with_per_host_values(block: Block, values: dict[str, str]) -> str:
    """The block with its `# per host` values replaced: exactly the names marked, every one given."""
    marked = {m.group(1) for m in PER_HOST.finditer(block.code)}
    assert marked == set(values), f"{block.where} marks {sorted(marked)} as per host; the test sets {sorted(values)}"
    return PER_HOST.sub(lambda m: f"{m.group(1)}={values[m.group(1)]}{m.group(3)}", block.code)


def copy_of_the_repository(dest: Path) -> Path:
    """The checkout's tracked files, and the wheelhouse an air-gapped site carries with it, if any."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    if (ROOT / "docker" / "wheelhouse").is_dir():
        shutil.copytree(ROOT / "docker" / "wheelhouse", dest / "docker" / "wheelhouse", dirs_exist_ok=True)
    return dest


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without any QW_ or COMPOSE_ variable, plus the settings given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
    env.update(settings)
    return env


@dataclass
class Host:
    """One machine's copy of the repository, with the shell variables it runs its blocks under."""

    name: str
    repo: Path
    env: dict[str, str]
    seconds: dict[str, float] = field(default_factory=dict)

    def run(self, code: str, what: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=self.repo, env=self.env, capture_output=True,
                             text=True, timeout=timeout)
        self.seconds[what] = time.monotonic() - started
        assert ran.returncode == 0, f"{self.name}: {what} failed ({ran.returncode}):\n{ran.stdout[-3000:]}\n{ran.stderr[-4000:]}"
        return ran

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        ran = subprocess.run(["docker", "compose", *args], cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert not check or ran.returncode == 0, f"{self.name}: docker compose {' '.join(args)} failed:\n{ran.stdout}\n{ran.stderr}"
        return ran

    def down(self) -> None:
        """Its last log lines (what a failure needs), then `down -v`; a second call finds nothing to do."""
        if self.compose("ps", "-a", "-q", check=False).stdout.strip():
            print(self.compose("logs", "--no-color", "--tail", "30", check=False).stdout[-4000:])
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10", check=False)

    def left_over(self) -> list[str]:
        return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={self.env['COMPOSE_PROJECT_NAME']}"],
                              capture_output=True, text=True, check=True).stdout.split()
