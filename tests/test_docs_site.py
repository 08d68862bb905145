"""The user guide builds as a site and its links hold: `mkdocs build --strict` (mkdocs.yml at the root) fails
on a link to a missing page or anchor and on a page left out of the navigation; the README, which sits
outside the site, has its own links checked against the files and the built pages' anchors. The settings
reference is the settings model's own table (scripts/settings_reference.py)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NO_MKDOCS = importlib.util.find_spec("mkdocs") is None
needs_mkdocs = pytest.mark.skipif(NO_MKDOCS, reason="mkdocs is not installed (pip install 'gpulab[dev]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml")]
    done = subprocess.run([*build, "--site-dir", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr  # strict: each warning (a broken link) fails
    return out


def _html(site: Path, page: Path) -> Path:
    """Where mkdocs writes a page of docs/: guide/train.md -> guide/train/index.html, guide/index.md ->
    guide/index.html."""
    page = page.relative_to(ROOT / "docs").with_suffix("")
    return site / (page.parent if page.name == "index" else page) / "index.html"


def test_every_guide_page_is_in_the_sites_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in sorted((ROOT / "docs" / "guide").glob("*.md")):
        assert f": guide/{page.name}\n" in nav, f"{page.name} is not in mkdocs.yml's nav"


@needs_mkdocs
def test_the_site_builds_strict_with_every_guide_page(site):
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert len(pages) > 15
    for page in pages:
        assert _html(site, page).is_file(), page


def _anchors(html: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', html.read_text()))


@needs_mkdocs
def test_the_readmes_links_reach_a_file_and_its_anchor(site):
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README sends the reader to the guide"
    for link in local:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).is_file(), link
        if anchor:
            assert anchor in _anchors(_html(site, ROOT / path)), link


def test_the_settings_reference_is_the_settings_models_table():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import settings_reference
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    page = settings_reference.PAGE.read_text()
    assert settings_reference.page_block(page) == settings_reference.block(), (
        "docs/guide/configuration.md is out of date: python scripts/settings_reference.py --write"
    )


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
SAY = ("jax", "coreml", "hpu", "<")  # the recipes' examples of something new ("say JAX"), not the tree's


def _named_in_architecture() -> tuple[list[str], list[str]]:
    """(paths, identifiers) ARCHITECTURE.md names in backticks."""
    tokens = set(re.findall(r"`([^`\s]+)`", ARCHITECTURE.read_text()))
    paths = sorted(t for t in tokens if ("/" in t or t.endswith(".py")) and not any(s in t for s in SAY))
    names = sorted(t for t in tokens if re.fullmatch(r"[A-Za-z_]\w*", t) and t not in SAY)
    return paths, names


def test_architecture_is_short_and_names_only_what_the_tree_has():
    assert len(ARCHITECTURE.read_bytes()) <= 15_000, "ARCHITECTURE.md is the map: detail goes in docstrings"
    src = ROOT / "src" / "gpulab"
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if ".git" not in p.parts]
    paths, names = _named_in_architecture()
    for path in paths:
        where = [path, f"src/gpulab/{path}"]
        found = any((ROOT / w).exists() for w in where) or any(
            f.endswith("/" + path.rstrip("/")) for f in files
        )
        assert found, f"docs/ARCHITECTURE.md names {path}, which the tree does not have"
    code = " ".join(p.read_text() for tree in (src, ROOT / "tests") for p in tree.rglob("*.py"))
    missing = [name for name in names if not re.search(rf"\b{name}\b", code)]
    assert not missing, (
        f"docs/ARCHITECTURE.md names what src/gpulab and tests/ neither define nor use: {missing}"
    )
