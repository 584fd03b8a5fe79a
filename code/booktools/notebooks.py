"""Write one .ipynb per chapter (for Colab and Binder) from the MyST sources: ``make notebooks``.

The first cell installs ``attnbook`` from the repository configured in ``_config.yml`` when it is
not importable. Sphinx-only syntax is rewritten into plain Markdown a notebook can show:
``{literalinclude}`` of a ``:pyobject:`` becomes the function's source, ``{exercise}`` and
``{solution}`` become a heading and a collapsed ``<details>``, other directives a quoted block,
and roles (``{cite}``, ``{glue:text}``, ``{term}``…) their plain text.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]

INSTALL_CELL = '''\
# Colab / Binder: install the book's package when it is not importable yet.
import importlib.util, subprocess, sys
if importlib.util.find_spec("attnbook") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "attnbook @ git+{url}.git@{branch}"])'''

FENCE = re.compile(r"^(?P<fence>:{3,}|`{3,})\{(?P<name>[\w:-]+)\}(?P<arg>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                   re.M | re.S)
ROLE = re.compile(r"\{(?P<role>[\w:-]+)\}`(?P<text>[^`]*)`")


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

    return ROLE.sub(role, FENCE.sub(directive, text))


def to_notebook(chapter: Path, repo_url: str, branch: str) -> nbformat.NotebookNode:
    nb = jupytext.read(chapter)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = to_plain_markdown(cell.source, chapter)
    nb.cells.insert(0, nbformat.v4.new_code_cell(INSTALL_CELL.format(url=repo_url, branch=branch)))
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
    repo = config["repository"]
    for chapter in chapter_sources():
        target = args.out / chapter.relative_to(ROOT).with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(to_notebook(chapter, repo["url"].rstrip("/"), repo.get("branch", "main")), target)
        print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")


if __name__ == "__main__":
    main()
