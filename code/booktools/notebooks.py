"""Write one .ipynb per chapter (for Colab and Binder) from the MyST sources: ``make notebooks``.

The first cell installs ``attnbook`` from the repository configured in ``_config.yml``, pinned to the
commit the book is built from (``book_ref``), when it is not importable. Sphinx-only syntax is rewritten into plain Markdown a notebook can show:
``{literalinclude}`` of a ``:pyobject:`` becomes the function's source, ``{exercise}`` and
``{solution}`` become a heading and a collapsed ``<details>`` (a gated ``{solution-start}`` … ``{solution-end}``, which
holds code cells, a heading), other directives a quoted block,
and roles (``{cite}``, ``{glue:text}``, ``{term}``…) their plain text.

A coding exercise's reference solution (a code cell tagged ``exercise-solution``, inside a gated solution) does not
run in the notebook: with the solution's text it becomes a collapsed ``<details>`` Markdown cell showing the code, so
the reader's stub stays unfinished, the check cell
after it says "还没有实现", and the notebook runs on to the end. The book's build runs the solution, so the page
shows a passing check (the convention: chapters/exercises.md).
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import subprocess
from pathlib import Path

import jupytext
import nbformat
import yaml

from errata_count import substitutions

ROOT = Path(__file__).resolve().parents[2]

INSTALL_CELL = '''\
# Colab / Binder：若还没有安装本书的软件包 attnbook，就安装本书构建时所用的那个提交（书中的数字由它算出）。
import importlib.util, os, subprocess, sys
ATTNBOOK = "attnbook @ git+{url}.git@{ref}"
if importlib.util.find_spec("attnbook") is None:
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", ATTNBOOK], capture_output=True, text=True,
                         env={{**os.environ, "GIT_TERMINAL_PROMPT": "0"}})  # 不要停下来等用户名和密码
    if pip.returncode != 0:
        last = (pip.stderr.strip().splitlines() or ["（无输出）"])[-1]
        raise RuntimeError(
            f"无法安装本书的软件包 attnbook：{{ATTNBOOK}}\\n"
            f"pip 的最后一行输出：{{last}}\\n"
            "可以这样做：(1) 确认这台机器能访问 GitHub 和 PyPI 后重新运行本单元；"
            "(2) 在能联网的电脑上克隆本书仓库，在仓库根目录运行 `pip install .`，再在那里打开本笔记本；"
            "(3) 在 Binder 中打开本章（书页顶部的火箭按钮），那里已经装好了 attnbook。") from None'''


def book_ref(root: Path = ROOT) -> str:
    """The commit (or tag) the notebooks' install cell pins: ``ATTNBOOK_REF`` if set, else the checkout's HEAD."""
    ref = os.environ.get("ATTNBOOK_REF") or subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    if not ref:
        raise ValueError("no commit to pin the install cell to: set ATTNBOOK_REF (a commit or tag) outside a git checkout")
    return ref


FENCE = re.compile(r"^(?P<fence>:{3,}|`{3,})\{(?P<name>[\w:-]+)\}(?P<arg>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                   re.M | re.S)
ROLE = re.compile(r"\{(?P<role>[\w:-]+)\}`(?P<text>[^`]*)`")
SUBSTITUTION = re.compile(r"\{\{\s*(\w+)\s*\}\}")       # {{ errata_count }}: a MyST substitution
LOCAL_LINK = re.compile(r"\[(?P<text>[^\]]+)\]\(#[^)]*\)")  # [text](#label): a cross-reference, kept as its text
_substitutions = functools.lru_cache(substitutions)   # the counts read every chapter: once per run is enough


def chapter_sources(root: Path = ROOT) -> list[Path]:
    """MyST notebooks (files with a kernelspec) listed in _toc.yml, in book order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    paths = [root / f"{f}.md" for f in files]
    return [p for p in paths if "kernelspec:" in p.read_text(encoding="utf-8").split("\n---", 1)[0]]


def _pyobject_source(path: Path, name: str) -> str:
    """Source of a top-level function or class (``Class.method`` allowed) in a Python file."""
    source = path.read_text(encoding="utf-8")
    nodes = ast.parse(source).body
    for part in name.split("."):
        node = next((n for n in nodes if getattr(n, "name", None) == part), None)
        if node is None:
            raise ValueError(f"{name} not found in {path}")
        nodes = getattr(node, "body", [])
    lines = source.splitlines()
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(lines[start - 1:node.end_lineno])


def _options(body: str) -> tuple[dict, str]:
    """Split a directive body into its ``:key: value`` options and the content."""
    opts, rest = {}, body.splitlines()
    while rest and (m := re.match(r"^:([\w-]+):\s*(.*)$", rest[0])):
        opts[m[1]] = m[2]
        rest = rest[1:]
    return opts, "\n".join(rest).strip("\n")


def to_plain_markdown(text: str, chapter: Path) -> str:
    def directive(m: re.Match) -> str:
        name, arg = m["name"], m["arg"].strip()
        opts, content = _options(m["body"])
        content = to_plain_markdown(content, chapter)
        if name == "literalinclude":
            path = (chapter.parent / arg).resolve()
            code = _pyobject_source(path, opts["pyobject"]) if "pyobject" in opts else path.read_text()
            return f"```python\n{code}\n```"
        if name == "exercise":
            return f"**练习** {arg}\n\n{content}"
        if name == "solution":
            return f"<details><summary>解答</summary>\n\n{content}\n\n</details>"
        if name == "solution-start":     # a gated solution: its code cells follow, up to {solution-end}
            return "**解答**"
        if name == "solution-end":
            return ""
        if name in ("code-cell", "glue:figure", "bibliography", "tableofcontents"):
            return ""
        title = arg or name
        quoted = "\n".join(f"> {line}" if line else ">" for line in content.splitlines())
        return f"> **{title}**\n>\n{quoted}"

    def role(m: re.Match) -> str:
        r, t = m["role"], m["text"]
        if r.startswith("glue"):
            return f"`{t.split(':')[0]}`（见上方代码的计算结果）"
        if r in ("cite", "cite:p", "cite:t"):
            return f"[{t}]"
        if r in ("math",):
            return f"${t}$"
        return re.sub(r"\s*<[^>]*>$", "", t)  # {term}`注意力 <attention>` -> 注意力

    subs = _substitutions(chapter.parent)
    text = SUBSTITUTION.sub(lambda m: subs.get(m[1], m[0]), FENCE.sub(directive, text))
    return LOCAL_LINK.sub(r"\g<text>", ROLE.sub(role, text))


SOLUTION_TAG = "exercise-solution"
SOLUTION_HEADING = "**解答**"   # what a {solution-start} becomes


def solution_as_markdown(cell: nbformat.NotebookNode, intro: str = "") -> nbformat.NotebookNode:
    """A reference solution the reader can read but that does not run: its text and code, collapsed."""
    text = f"{intro.strip()}\n\n" if intro.strip() else ""
    return nbformat.v4.new_markdown_cell(
        f"<details><summary>解答（点击展开；先自己写，再对照）</summary>\n\n{text}"
        f"```python\n{cell.source.strip()}\n```\n\n</details>")


def to_notebook(chapter: Path, repo_url: str, ref: str) -> nbformat.NotebookNode:
    nb = jupytext.read(chapter)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = to_plain_markdown(cell.source, chapter)
        elif SOLUTION_TAG in cell.metadata.get("tags", []):
            intro = ""           # the gated solution's text goes into the collapsed block with the code
            if cells and cells[-1].cell_type == "markdown" and SOLUTION_HEADING in cells[-1].source:
                before, intro = cells[-1].source.split(SOLUTION_HEADING, 1)
                cells[-1].source = before.rstrip()
            cell = solution_as_markdown(cell, intro)
        cells.append(cell)
    nb.cells = [c for c in cells if c.cell_type != "markdown" or c.source.strip()]  # e.g. a {solution-end}
    nb.cells.insert(0, nbformat.v4.new_code_cell(INSTALL_CELL.format(url=repo_url, ref=ref)))
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"  # stable ids: regenerating gives the same file
    return nb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "notebooks")
    args = parser.parse_args()
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo, ref = config["repository"], book_ref()
    for chapter in chapter_sources():
        target = args.out / chapter.relative_to(ROOT).with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(to_notebook(chapter, repo["url"].rstrip("/"), ref), target)
        print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")


if __name__ == "__main__":
    main()
