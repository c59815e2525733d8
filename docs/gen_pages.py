"""The site's home page, generated at build time (mkdocs-gen-files): the README, its ``docs/``
links made relative to the site, so that the two cannot drift apart.

(The reference pages are written by ``python -m tuner.cli.reference`` before the build, and
committed so that the README's links to them work outside the site too.)
"""

from __future__ import annotations

import re
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parent.parent


def readme_as_index() -> str:
    """The README is the site's home page: its ``docs/`` links point inside the site."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


with mkdocs_gen_files.open("index.md", "w") as handle:
    handle.write(readme_as_index())
