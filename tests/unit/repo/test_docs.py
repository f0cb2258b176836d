"""The README and docs pages against the code: every relative link resolves, and every flag
the README names is a flag of the ingest job (defaults live in docs/options.md only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streaming_jobs.ingest_config import build_parser

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (lower case, punctuation dropped, spaces to -)."""
    anchors = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            anchors.add(title.replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
            continue
        if anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_every_flag_the_readme_names_is_a_flag_of_the_job() -> None:
    known = {flag for action in build_parser()._actions for flag in action.option_strings}
    named = set(re.findall(r"`(--[a-z][a-z-]*)", (ROOT / "README.md").read_text()))
    assert named, "the README names no flag"
    assert named <= known, f"not flags of the ingest job: {sorted(named - known)}"


def _product_modules() -> list[Path]:
    return sorted(
        path
        for package in ("connector", "streaming_jobs")
        for path in (ROOT / package).rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
        and not {"notebooks", "mqtt_ingest"} & set(path.parts)  # examples, not modules
    )


@pytest.mark.parametrize("page", ["CONTRIBUTING.md", "docs/architecture.md"])
def test_the_layout_names_every_module(page: str) -> None:
    """Every module of the product is named (``name.py``) on the page, so a newcomer finds it."""
    text = (ROOT / page).read_text()
    modules = _product_modules()
    assert any(p.name == "receive_buffer.py" for p in modules)
    assert [p.relative_to(ROOT).as_posix() for p in modules if p.name not in text] == []
