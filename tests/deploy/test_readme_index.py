"""README is the newcomer's index: it links every page of docs/ and states every QW_ setting in its one Configuration table."""

from __future__ import annotations

import re
from pathlib import Path

from queue_workflows.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_links_every_docs_page():
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)(?:#[^)]*)?\)", README))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, f"docs pages README never links: {sorted(pages - linked)}"
    assert linked <= pages, f"README links docs pages that do not exist: {sorted(linked - pages)}"


def _configuration_table() -> set[str]:
    """The QW_ names in the first column of the table under README's `## Configuration`."""
    section = README.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `QW_")]
    return {name for row in rows for name in re.findall(r"`(QW_[A-Z0-9_]+)`", row.split(" | ", 1)[0])}


def _read_from_the_environment() -> set[str]:
    """QW_ variables the code reads itself, outside the settings model (QW_LOG_LEVEL, before any app loads)."""
    found = set()
    for path in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "services").rglob("*.py")]:
        found.update(re.findall(r"""environ(?:\.get\(|\[)\s*["'](QW_[A-Z0-9_]+)["']""", path.read_text()))
    return found


def test_every_setting_is_in_the_readme_configuration_table():
    prefix = Settings.model_config["env_prefix"]
    settings = {f"{prefix}{name}".upper() for name in Settings.model_fields}
    table = _configuration_table()
    assert settings <= table, f"settings missing from README's Configuration table: {sorted(settings - table)}"
    unknown = table - settings - _read_from_the_environment()
    assert not unknown, f"README's Configuration table names settings nothing reads: {sorted(unknown)}"
