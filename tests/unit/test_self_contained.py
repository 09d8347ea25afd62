"""A clone of the repository is whole on its own: no file reaches outside it for test data or docs."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Spelled in pieces so that this file does not match itself.
OUTSIDE = ("../" + "shared", '"' + 'shared" /', "/ " + '"shared"', "/work/" + "shared")


def tracked_text_files() -> list[Path]:
    """The files git tracks (a user's clone has exactly these), or every file when git is unavailable."""
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=30
        ).stdout.split()
        files = [REPO / name for name in listed]
    except (OSError, subprocess.SubprocessError):
        skip = {".venv", ".git", "__pycache__"}
        files = [p for p in REPO.rglob("*") if p.is_file() and not skip & set(p.parts)]
    kinds = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt", ".tpl", ""}
    return [p for p in files if p.is_file() and p.suffix in kinds]


def test_no_tracked_file_reads_or_links_to_a_folder_beside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {needle}"
        for path in tracked_text_files()
        for needle in OUTSIDE
        if needle in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert offenders == []


def test_the_reference_walkthrough_and_koordinators_guide_configmap_are_in_the_repository() -> None:
    seed = REPO / "tests" / "scenarios" / "seed-stress-demo"
    for name in ("config.yaml", "cluster.yaml", "usage.yaml", "expected.json"):
        assert (seed / name).is_file(), name
    assert (REPO / "tests" / "fixtures" / "koordinator-guide-configmap.yaml").is_file()
