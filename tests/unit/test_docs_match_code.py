"""The READMEs and ``--help`` say what the code does: lists the docs repeat are checked against the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from descheduler.cli import main
from descheduler.cluster.build import KINDS
from descheduler.planner.autoscaler import AUTOSCALER_TAINTS
from descheduler.report.text import cycle_dict
from descheduler.simulate.runner import CycleResult
from tests.unit.builders import NOW, settings
from tests.unit.fakes import hot_world

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
PLANNER_README = (REPO / "descheduler" / "planner" / "README.md").read_text()


def backticked(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


def between(text: str, start: str, end: str) -> str:
    """The text from the first ``start`` to the next ``end`` (both regular expressions)."""
    found = re.search(f"{start}(.*?){end}", text, re.DOTALL)
    assert found is not None, f"no text between {start!r} and {end!r}"
    return found.group(1)


@pytest.mark.parametrize(
    ("doc", "start", "end"),
    [
        ("README.md", r"\*\*Autoscalers\.\*\*", r"\(`autoscaler-removing`\)"),
        ("descheduler/planner/README.md", r"autoscaler's removal taint", r"are skipped"),
    ],
    ids=["README", "planner README"],
)
def test_each_readme_lists_exactly_the_autoscaler_taints_the_planner_honours(
    doc: str, start: str, end: str
) -> None:
    text = README if doc == "README.md" else PLANNER_README
    assert backticked(between(text, start, end)) == set(AUTOSCALER_TAINTS)


def test_simulate_help_names_every_kind_the_cluster_reader_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    missing = [kind for kind in KINDS if not re.search(rf"\b{kind}\b", shown)]
    assert missing == []
    assert "evictionWindows" in shown, "simulate --help says that it ignores eviction windows"


def test_the_readme_sketch_of_simulate_json_has_the_keys_an_eviction_really_has() -> None:
    result = hot_world().plan(settings())
    assert result.evictions, "the sketch is checked against a real eviction"
    real = cycle_dict(CycleResult(cycle=1, now=NOW, plan=result))
    sketch = between(README, r"`--output json` prints the same as one JSON document \(`", r"`\)?;")
    eviction = between(sketch, r'"evictions":\s*\[\{', r"\}\]")
    assert set(re.findall(r'"(\w+)"', eviction)) == set(real["evictions"][0])
    assert set(real) <= set(re.findall(r'"(\w+)":', sketch)), "every key of a cycle is in the sketch"
