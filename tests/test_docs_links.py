"""Every relative link in README.md and docs/*.md names a file inside the repository.

A clone has nothing outside the repository, so a link such as ../shared/spec/... is broken
for every reader even where it happens to resolve on the machine that wrote it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[1]

# [text](target) or [text](<target> "title"); the text may hold `code` and one level of [...].
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(?:<([^>\n]*)>|([^\s()]+))(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:\s*<?([^\s>]+)>?", re.MULTILINE)
FENCE = re.compile(r"^ {0,3}(```|~~~)")
CODE_SPAN = re.compile(r"`+[^`\n]*?`+")
EXTERNAL = re.compile(r"^(https?|mailto):", re.IGNORECASE)


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _without_code(text: str) -> str:
    """The text with fenced blocks and code spans blanked out (same lines, same offsets):
    markdown renders no link there. A code span inside a link's text leaves the link whole."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return CODE_SPAN.sub(lambda m: "x" * len(m.group()), "\n".join(lines))


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link and reference definition in `text`."""
    text = _without_code(text)
    found = [
        (m.start(), m.group(1) if m.group(1) is not None else m.group(2))
        for m in INLINE_LINK.finditer(text)
    ]
    found += [(m.start(1), m.group(1)) for m in REFERENCE_DEFINITION.finditer(text)]
    return [(text.count("\n", 0, start) + 1, target.strip()) for start, target in sorted(found)]


def broken_links(document: Path, root: Path = REPO) -> list[str]:
    """One line per relative link of `document` that is missing or outside `root`."""
    problems = []
    root = root.resolve()
    for line, target in links(document.read_text(encoding="utf-8")):
        if EXTERNAL.match(target) or target.startswith("#"):
            continue
        path = unquote(target.split("#", 1)[0])
        if not path:
            continue
        resolved = (document.parent / path).resolve()
        where = f"{document.relative_to(root)}:{line}: ({target})"
        if not resolved.is_relative_to(root):
            problems.append(f"{where} leads outside the repository, to {resolved}")
        elif not resolved.exists():
            problems.append(f"{where} names {resolved.relative_to(root)}, which does not exist")
    return problems


def test_every_relative_link_in_the_docs_resolves_inside_the_repository():
    docs = documents()
    assert (REPO / "README.md").is_file() and len(docs) > 1, f"no docs found under {REPO}"
    problems = [problem for document in docs for problem in broken_links(document)]
    assert not problems, f"{len(problems)} broken link(s) in the docs:\n" + "\n".join(problems)


def test_the_checker_finds_missing_and_escaping_links_and_nothing_else(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("# real\n", encoding="utf-8")
    (tmp_path / "outside.md").write_text("", encoding="utf-8")
    readme = tmp_path / "docs" / "page.md"
    readme.write_text(
        "\n".join(
            [
                "[ok](real.md) [ok, fragment](real.md#real) [anchor](#top) ![img](<real.md>)",
                "[web](https://example.org/x.md) [mail](mailto:a@b.c) [up](../docs/real.md)",
                "[`code` in text](real.md 'title') `[in a code span](gone.md)`",
                "```",
                "[in a fence](gone.md)",
                "```",
                "[missing](gone.md#x) [escapes](../../shared/spec/SPEC.md)",
                "[ref]: ./also-gone.md",
            ]
        ),
        encoding="utf-8",
    )
    problems = broken_links(readme, root=tmp_path / "docs")
    assert [p.split(" ", 1)[0] for p in problems] == [
        "page.md:7:",
        "page.md:7:",
        "page.md:8:",
    ], problems
    assert "(gone.md#x) names gone.md, which does not exist" in problems[0]
    assert "(../../shared/spec/SPEC.md) leads outside the repository" in problems[1]
    assert "(./also-gone.md) names also-gone.md" in problems[2]
    # A link to an existing file above the root is still outside it.
    (tmp_path / "docs" / "up.md").write_text("[out](../outside.md)", encoding="utf-8")
    assert "leads outside" in broken_links(tmp_path / "docs" / "up.md", tmp_path / "docs")[0]
