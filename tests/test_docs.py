"""The documentation: the site under docs/ builds offline with `mkdocs build --strict` and no warning
(a broken link between pages, a link to a missing heading, a page the nav leaves out), and the
README stays a front page: at most 300 lines, its links into docs/ resolve, every page is reachable
from it, and its test command is the one CI runs."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_README_LINES = 300
DOCS_LINK = re.compile(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)")
"""A Markdown link from the README into docs/: (page, anchor or '')."""


class Warnings(logging.Handler):
    """Every WARNING or worse that mkdocs logs while building."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def nav_pages(nav) -> list[str]:
    """The page files mkdocs.yml's nav lists, in order, however deeply nested."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    return [p for item in nav for p in nav_pages(item)]


def mkdocs_yml() -> dict:
    # mkdocs.yml may use mkdocs' own !ENV / !relative tags; none are needed to read the nav.
    return yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)


def test_the_site_builds_offline_with_no_warning(tmp_path, monkeypatch):
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    def no_network(*args, **kwargs):
        raise AssertionError(f"the docs build reached for the network: {args[1:2]}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    config = load_config(config_file=str(REPO / "mkdocs.yml"), site_dir=str(tmp_path / "site"))
    assert config.strict, "mkdocs.yml must keep strict: true"
    seen = Warnings()
    logging.getLogger("mkdocs").addHandler(seen)
    try:
        build(config)
    except Abort as e:
        pytest.fail(f"mkdocs build --strict aborted: {e}; warnings: {seen.messages}")
    finally:
        logging.getLogger("mkdocs").removeHandler(seen)
    assert seen.messages == []
    # Nothing the pages load comes from elsewhere (a theme's CDN script or font would).
    pages = {p.relative_to(tmp_path): p.read_text() for p in (tmp_path / "site").rglob("*.html")}
    remote = {str(p): re.findall(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//[^"]+"', html)
              for p, html in pages.items()}
    assert {p: r for p, r in remote.items() if r} == {}


def test_every_page_under_docs_is_in_the_nav_once():
    listed = nav_pages(mkdocs_yml()["nav"])
    on_disk = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == on_disk


def test_the_readme_is_a_front_page_whose_docs_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES
    links = DOCS_LINK.findall(text)
    broken = [page for page, _ in links if not (REPO / page).is_file()]
    assert broken == []
    missing_anchor = [f"{page}#{anchor}" for page, anchor in links if anchor
                      and anchor not in headings_slugs((REPO / page).read_text())]
    assert missing_anchor == []
    unlinked = [p for p in nav_pages(mkdocs_yml()["nav"]) if f"docs/{p}" not in {page for page, _ in links}]
    assert unlinked == [], "pages the README's table of contents does not reach"


def headings_slugs(markdown_text: str) -> set[str]:
    """The anchors mkdocs gives a page's headings (fenced code skipped)."""
    slugs, fenced = set(), False
    for line in markdown_text.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            slugs.add(slugify(m.group(1).strip(), "-"))
    return slugs


def test_the_readme_test_command_is_the_one_ci_runs():
    commands = re.findall(r"```bash\n(.+?)\n```", README.read_text())
    test_command = next(c for c in commands if "pytest" in c)
    ci_lines = [line.replace("pip install -q ", "pip install ") for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines  # CI only quietens pip
    assert test_command in (REPO / "docs" / "testing.md").read_text()


def test_every_toml_block_in_the_docs_uses_todays_keys():
    """A config snippet a user copies from the docs loads: no unknown, moved or other-backend key."""
    import tomllib

    from tandem.config import ConfigError, build_config

    stale = {}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)):
            try:
                build_config(tomllib.loads(block))
            except ConfigError as err:  # a rule about values is the snippet's business; key names are not
                if re.search(r"unknown config key|moved: it is|is read only with", str(err)):
                    stale[f"{page.name} block {i + 1}"] = str(err)
    assert stale == {}
