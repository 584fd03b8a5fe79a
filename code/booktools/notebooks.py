"""Write one .ipynb per chapter (for Colab and Binder) from the MyST sources: ``make notebooks``.

The first cell installs ``attnbook`` from the repository configured in ``_config.yml``, pinned to the
commit the book is built from (``book_ref``), when it is not importable. Sphinx-only syntax is rewritten into plain Markdown a notebook can show:
``{literalinclude}`` of a ``:pyobject:`` becomes the function's source, ``{exercise}`` and
``{solution}`` become a heading and a collapsed ``<details>`` (a gated ``{solution-start}`` … ``{solution-end}``, which
holds code cells, a heading), other directives a quoted block,
and roles their Markdown: a ``{glue:*}`` role the value this build computed (read from ``<chapter>.glue.json`` beside the executed notebook in
``_build/jupyter_execute``), formatted as on the page and marked ``<b>…</b>`` as the book's result; ``{ref}``,
``{doc}``, ``{numref}`` and ``[text](#label)`` a link to the published page and anchor (``html.baseurl``), with the
text the page shows (read from ``_build/html``); ``{term}`` its words; ``(label)=`` lines go. A notebook therefore
needs the built book: ``make book`` first.

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
import html as html_lib
import json
import os
import posixpath
import re
import shutil
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
LOCAL_LINK = re.compile(r"\[(?P<text>[^\]]+)\]\(#(?P<label>[^)]*)\)")  # [text](#label): a cross-reference
LABEL_LINE = re.compile(r"^\([\w:.-]+\)=[ \t]*\n?", re.M)                 # (label)= above a heading
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)   # {ref}`text <label>`
RESULT_NOTE = ("> **这本笔记本由本书的构建生成**（提交 `{ref}`）。正文里<b>加粗</b>的数是构建时这些代码算出的结果，"
               "与网页版相同；你重新运行时，如果随机种子、torch 版本或硬件不同，算出的数可能略有出入。"
               "文中的链接指向网页版：{url}")
_substitutions = functools.lru_cache(substitutions)   # the counts read every chapter: once per run is enough


class Build:
    """What the built book computed and where its pages live: glued values, link targets, the published address."""

    def __init__(self, html: Path, baseurl: str):
        self.html, self.baseurl = html, baseurl.rstrip("/") + "/"
        self.executed = html.parent / "jupyter_execute"
        if not (html / "objects.inv").exists():
            raise FileNotFoundError(f"{html}/objects.inv is missing: the notebooks carry the built book, run `make book`")

    @functools.cached_property
    def _inventory(self) -> dict:
        from sphinx.util.inventory import InventoryFile

        with open(self.html / "objects.inv", "rb") as f:
            return InventoryFile.load(f, "", lambda _, uri: uri)

    @functools.lru_cache(maxsize=None)
    def glued(self, docname: str) -> dict[str, dict]:
        """Every value a chapter glued: key -> its mime bundle (myst-nb writes them to ``<docname>.glue.json``
        beside the executed notebook, whose hidden glue cells keep no outputs)."""
        path = self.executed / f"{docname}.ipynb"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: the notebooks carry the built book, run `make book`")
        glue = path.with_name(f"{path.stem}.glue.json")
        if not glue.exists():
            return {}
        return {key: out.get("data", {}) for key, out in json.loads(glue.read_text(encoding="utf-8")).items()}

    @functools.lru_cache(maxsize=None)
    def _page(self, uri: str) -> str:
        return (self.html / uri).read_text(encoding="utf-8")

    def _caption(self, uri: str) -> str | None:
        """'练习 2.1' / '图 3.2': the number the page prints at an anchor (a numbered exercise, figure or table)."""
        page, _, anchor = uri.partition("#")
        m = re.search(rf'id="{re.escape(anchor)}"[^>]*>(?:(?!id=").)*?<span class="caption-number">([^<]*)</span>',
                      self._page(page), re.S)
        return html_lib.unescape(m[1]).strip() if m else None

    def link(self, role: str, target: str, docname: str) -> tuple[str, str]:
        """(text, url) of a cross-reference as the page renders it."""
        if role == "doc":
            doc = posixpath.normpath(posixpath.join(posixpath.dirname(docname), target)).lstrip("/")
            _, _, uri, text = self._inventory["std:doc"][doc]
            return text, self.baseurl + uri
        _, _, uri, text = self._inventory["std:label"].get(target) or self._anchor_only(target)
        number = self._caption(uri) if "#" in uri else None
        if role == "numref" or (number and number.startswith("练习")):
            text = number or text
        return text, self.baseurl + uri

    def _anchor_only(self, label: str) -> tuple:
        """A label with no title in the inventory (e.g. an exercise): the page that carries its id."""
        _, _, uri, _ = self._inventory.get("std:numlabel", {}).get(label) or (None, None, None, None)
        if uri is None:
            for page in sorted(self.html.rglob("*.html")):
                rel = page.relative_to(self.html).as_posix()
                if f'id="{label}"' in self._page(rel):
                    uri = f"{rel}#{label}"
                    break
            else:
                raise KeyError(f"cross-reference target {label!r} is not in the built book")
        return None, None, uri, label


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


def _quote(title: str, content: str) -> str:
    quoted = "\n".join(f"> {line}" if line else ">" for line in content.splitlines())
    return f"> **{title}**\n>\n{quoted}"


def _folded(summary: str, content: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{content}\n\n</details>"


def glued_text(data: dict, role: str, spec: str) -> str:
    """A glued value as the page prints it: ``{glue:text}`` formats text/plain with the spec, ``{glue:md}`` pastes
    text/markdown (myst-nb's rules, ``myst_nb.core.variables.format_plain_text``)."""
    from myst_nb.core.variables import format_plain_text

    if role != "glue:text" and "text/markdown" in data:
        return data["text/markdown"]
    return html_lib.escape(format_plain_text(data["text/plain"], spec if role == "glue:text" else ""), quote=False)


def to_plain_markdown(text: str, chapter: Path, build: Build | None = None) -> str:
    """MyST Markdown of ``chapter`` as Markdown a notebook shows; ``build`` supplies glued values and link targets."""
    docname = chapter.relative_to(ROOT).with_suffix("").as_posix() if chapter.is_relative_to(ROOT) else chapter.stem

    def needs_build(what: str) -> Build:
        if build is None:
            raise ValueError(f"{chapter.name}: {what} needs the built book (Build)")
        return build

    def link(role: str, target: str, title: str = "") -> str:
        text, url = needs_build(f"{{{role}}}`{target}`").link(role, target, docname)
        return f"[{title or text}]({url})"

    def directive(m: re.Match) -> str:
        name, arg = m["name"], m["arg"].strip()
        opts, content = _options(m["body"])
        content = to_plain_markdown(content, chapter, build)
        if name == "literalinclude":
            path = (chapter.parent / arg).resolve()
            code = _pyobject_source(path, opts["pyobject"]) if "pyobject" in opts else path.read_text()
            return f"```python\n{code}\n```"
        if name == "exercise":
            number = build.link("ref", opts["label"], docname)[0] if build and "label" in opts else "练习"
            return _quote(f"{number}{'：' + arg if arg else ''}", content)
        if name == "solution":
            return _folded("解答（点击展开）", content)
        if name == "solution-start":     # a gated solution: its code cells follow, up to {solution-end}
            return SOLUTION_HEADING
        if name == "solution-end":
            return ""
        if name in ("code-cell", "glue:figure", "bibliography", "tableofcontents"):
            return ""
        if "dropdown" in opts.get("class", ""):
            return _folded(arg or name, content)
        return _quote(arg or name, content)

    def role(m: re.Match) -> str:
        r, t = m["role"], m["text"]
        titled = TITLED.match(t)
        title, target = (titled["title"], titled["target"]) if titled else ("", t)
        if r.startswith("glue"):
            key, _, spec = t.rpartition(":") if ":" in t else (t, "", "")
            value = needs_build(f"{{{r}}}`{t}`").glued(docname).get(key)
            if value is None:
                raise KeyError(f"{chapter.name}: {{{r}}}`{t}` has no glued value in the build")
            return f"<b>{glued_text(value, r, spec)}</b>"
        if r in ("ref", "doc", "numref"):
            return link(r, target, title)
        if r in ("cite", "cite:p", "cite:t"):
            return f"[{t}]"
        if r in ("math",):
            return f"${t}$"
        return title or target  # {term}`注意力 <attention>` -> 注意力

    subs = _substitutions(chapter.parent)
    text = SUBSTITUTION.sub(lambda m: subs.get(m[1], m[0]), FENCE.sub(directive, LABEL_LINE.sub("", text)))
    text = ROLE.sub(role, text)
    return LOCAL_LINK.sub(lambda m: link("ref", m["label"], m["text"]) if build else m["text"], text)


SOLUTION_TAG = "exercise-solution"
SOLUTION_HEADING = "**解答**"   # what a {solution-start} becomes


def solution_as_markdown(cell: nbformat.NotebookNode, intro: str = "") -> nbformat.NotebookNode:
    """A reference solution the reader can read but that does not run: its text and code, collapsed."""
    text = f"{intro.strip()}\n\n" if intro.strip() else ""
    return nbformat.v4.new_markdown_cell(
        f"<details><summary>解答（点击展开；先自己写，再对照）</summary>\n\n{text}"
        f"```python\n{cell.source.strip()}\n```\n\n</details>")


def to_notebook(chapter: Path, repo_url: str, ref: str, build: Build) -> nbformat.NotebookNode:
    nb = jupytext.read(chapter)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = to_plain_markdown(cell.source, chapter, build)
        elif SOLUTION_TAG in cell.metadata.get("tags", []):
            intro = ""           # the gated solution's text goes into the collapsed block with the code
            if cells and cells[-1].cell_type == "markdown" and SOLUTION_HEADING in cells[-1].source:
                before, intro = cells[-1].source.split(SOLUTION_HEADING, 1)
                cells[-1].source = before.rstrip()
            cell = solution_as_markdown(cell, intro)
        cells.append(cell)
    nb.cells = [c for c in cells if c.cell_type != "markdown" or c.source.strip()]  # e.g. a {solution-end}
    nb.cells[:0] = [nbformat.v4.new_code_cell(INSTALL_CELL.format(url=repo_url, ref=ref)),
                    nbformat.v4.new_markdown_cell(RESULT_NOTE.format(ref=ref[:12], url=build.baseurl))]
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"  # stable ids: regenerating gives the same file
    return nb


def book_build(root: Path = ROOT) -> Build:
    """The built book in ``root/_build/html``, at the address ``_config.yml`` gives (``html.baseurl``)."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    return Build(root / "_build" / "html", config["html"]["baseurl"])


def binder_requirements(repo_url: str, ref: str, root: Path = ROOT) -> str:
    """binder/requirements.txt of the published notebooks: the book's, plus attnbook at the commit they came from."""
    return ((root / "binder" / "requirements.txt").read_text(encoding="utf-8").rstrip("\n")
            + f"\n{ATTNBOOK_REQUIREMENT.format(url=repo_url, ref=ref)}\n")


ATTNBOOK_REQUIREMENT = "attnbook @ git+{url}.git@{ref}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "notebooks")
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html", help="the built book")
    args = parser.parse_args()
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo, ref = config["repository"], book_ref()
    url = repo["url"].rstrip("/")
    build = Build(args.html, config["html"]["baseurl"])      # --html defaults to _build/html
    for chapter in chapter_sources():
        target = args.out / chapter.relative_to(ROOT).with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(to_notebook(chapter, url, ref, build), target)
        print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    # Binder builds the `notebooks` branch (where CI publishes this folder): same environment, attnbook pinned.
    (args.out / "binder").mkdir(parents=True, exist_ok=True)
    (args.out / "binder" / "requirements.txt").write_text(binder_requirements(url, ref), encoding="utf-8")
    shutil.copy(ROOT / "binder" / "runtime.txt", args.out / "binder" / "runtime.txt")


if __name__ == "__main__":
    main()
