"""The torch floor (``make torch-floor``): one floor in both requirement lists, and its record is of that floor."""

from __future__ import annotations

import re
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import torch_floor  # noqa: E402


def test_requirements_and_pyproject_name_one_floor():
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", torch_floor.torch_floor())


def test_the_record_is_of_the_floor():
    """docs/torch-floor.md is what `make torch-floor` wrote for the floor the requirements now name."""
    record = (ROOT / "docs" / "torch-floor.md").read_text(encoding="utf-8")
    ran = re.search(r"^\| torch \| ([\d.]+)", record, flags=re.M)
    assert ran, "no torch row in docs/torch-floor.md"
    assert ran.group(1).startswith(torch_floor.torch_floor()), \
        f"docs/torch-floor.md ran torch {ran.group(1)}, the floor is {torch_floor.torch_floor()}: run make torch-floor"


def test_package_tests_leave_out_the_browser_and_chapter_tests():
    names = {p.name for p in torch_floor.package_tests()}
    assert {"test_attention.py", "test_softmax.py", "test_pretrained.py"} <= names
    assert not {n for n in names if n.startswith("test_browser")} and "test_chapter_code.py" not in names
