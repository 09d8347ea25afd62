"""Every scenario folder, run through ``simulate``, decides what its hand-worked ``expected.json`` says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from descheduler.cli import main

REPO = Path(__file__).resolve().parents[2]
FOLDERS = sorted(p for p in (REPO / "tests" / "scenarios").iterdir() if (p / "expected.json").is_file())


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_the_scenario_plays_out_as_worked_out_by_hand(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = json.loads((folder / "expected.json").read_text())
    args = [
        "simulate", "--config", str(folder / "config.yaml"), "--cluster", str(folder / "cluster.yaml"),
        "--usage", str(folder / "usage.yaml"), "--cycles", str(len(expected["cycles"])), "--output", "json",
    ]  # fmt: skip
    if expected.get("reschedule"):
        args.append("--reschedule")
    assert main(args) == 0
    cycles = json.loads(capsys.readouterr().out)["cycles"]
    assert len(cycles) == len(expected["cycles"])
    for got, want in zip(cycles, expected["cycles"], strict=True):
        assert got["cycle"] == want["cycle"]
        fields = ("pod", "node", "reason", "destination")
        trimmed = [
            {k: e[k] for k in fields if k in w}
            for e, w in zip(got["evictions"], want["evictions"], strict=False)
        ]
        assert len(got["evictions"]) == len(want["evictions"]), f"cycle {want['cycle']}: {got['evictions']}"
        assert trimmed == want["evictions"], f"cycle {want['cycle']}"
        skips = {(s["pod"], s["code"]) for s in got["skips"]}
        for skip in want.get("skips", []):
            assert (skip["pod"], skip["code"]) in skips, f"cycle {want['cycle']}: {skips}"
        classes = {n["node"]: n["class"] for n in got["nodes"]}
        for node, node_class in want.get("classes", {}).items():
            assert classes[node] == node_class, f"cycle {want['cycle']}: {node}"


def _scenario_files(folder: Path) -> dict[str, Any]:
    return {name: (folder / name).is_file() for name in ("config.yaml", "cluster.yaml", "usage.yaml")}


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_each_scenario_folder_is_complete_and_explains_its_expectations(folder: Path) -> None:
    assert all(_scenario_files(folder).values())
    assert json.loads((folder / "expected.json").read_text()).get("why")
