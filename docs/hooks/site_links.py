"""MkDocs hook: the README becomes a page of the site, and links written for the
repository (GitHub renders docs/*.md and README.md where they are) are made to work in
the site.

- README.md is added as the page `readme.md`, so the pages can send a reader to the
  one source of truth; its links to docs/*.md point at those pages.
- A link from a page to ../README.md points at that page.
- A link to something of the repository that is no page (a source file, bench/) or
  to something outside it (the steering repo's shared/) keeps its text and loses the
  link: the site has nothing to show there.
- A link to a file of the repository that does not exist is left as it is, so that
  `mkdocs build --strict` reports it.

Code spans and fenced code blocks are never touched.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mkdocs.structure.files import File, Files

README_PAGE = "readme.md"

# a code span (left alone) or an inline link [text](target)
_SPAN_OR_LINK = re.compile(
    r"(?P<code>`+[^`\n]*`+)"
    r"|\[(?P<text>(?:[^\[\]\n]|\[[^\]\n]*\])*)\]\((?P<target>[^)\s]+)\)"
)
_FENCE = re.compile(r"^\s*(```|~~~)")


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_files(files: Files, config) -> Files:
    readme = _root(config) / "README.md"
    files.append(File.generated(config, README_PAGE, abs_src_path=str(readme)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.abs_src_path is None:
        return markdown  # a page made in memory (reference/): its links are page to page
    root, docs = _root(config), Path(config.docs_dir).resolve()
    source = Path(page.file.abs_src_path).resolve()
    here = posixpath.dirname(page.file.src_uri)

    def target_in_site(target: str) -> str | None:
        """The link's new target, "" for no link, None to leave it as written."""
        path, hash_, anchor = target.partition("#")
        if not path or urlsplit(target).scheme or target.startswith("/"):
            return None
        real = (source.parent / unquote(path)).resolve()
        if real == root / "README.md":
            uri = README_PAGE
        elif real.is_relative_to(docs):
            if source.is_relative_to(docs):
                return None  # page to page: mkdocs checks and converts it
            uri = real.relative_to(docs).as_posix()
        elif real.is_relative_to(root) and not real.exists():
            return None  # broken: let mkdocs say so
        else:
            return ""
        return posixpath.relpath(uri, here or ".") + hash_ + anchor

    def replace(match: re.Match[str]) -> str:
        if match["code"]:
            return match[0]
        new = target_in_site(match["target"])
        if new is None:
            return match[0]
        return f"[{match['text']}]({new})" if new else match["text"]

    lines, fenced = [], False
    for line in markdown.split("\n"):
        fence = bool(_FENCE.match(line))
        fenced ^= fence
        lines.append(line if fenced or fence else _SPAN_OR_LINK.sub(replace, line))
    return "\n".join(lines)
