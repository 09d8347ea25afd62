"""``validate``, ``run``, ``once`` and ``simulate`` check a configuration through one function
(``load_config``): fed the same bad file, each exits 2 with the very same problem lines, in-process.

The cases are the tables of ``tests/controlplane/test_service_config.py`` (which runs the processes
against the real control plane) and ``tests/unit/test_bad_input.py``, so a check added to one entry
point only, or a case added to either table, shows up here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from descheduler.cli import main
from descheduler.config.load import ConfigError, load_config
from tests.controlplane.test_service_config import CASES, _valid, write_config
from tests.unit.test_bad_input import BAD_CONFIGS

REPO = Path(__file__).resolve().parents[2]
HOTSPOT = REPO / "config" / "examples" / "hotspot"

Command = Callable[[str, Path], list[str]]
ENTRY_POINTS: dict[str, Command] = {
    "validate": lambda config, _: ["validate", config],
    # A kubeconfig that does not exist: were the configuration accepted, these would stop with exit 1.
    "run": lambda config, tmp: ["run", "--config", config, "--kubeconfig", str(tmp / "no-kubeconfig")],
    "once": lambda config, tmp: ["once", "--config", config, "--kubeconfig", str(tmp / "no-kubeconfig")],
    "simulate": lambda config, _: [
        "simulate",
        "--config",
        config,
        "--cluster",
        str(HOTSPOT / "cluster.yaml"),
        "--usage",
        str(HOTSPOT / "usage.yaml"),
    ],
}


def _service_case(mutate: Callable[[dict[str, Any]], Any]) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        doc = _valid()
        mutate(doc)
        return write_config(folder / "config.yaml", doc)

    return write


def _bad_input_case(content: str | bytes) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / "config.yaml"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return write


TABLE: list[tuple[str, Callable[[Path], Path], list[str]]] = [
    *((f"service-config: {name}", _service_case(mutate), [message]) for name, mutate, message in CASES),
    *((f"bad-input: {name}", _bad_input_case(content), expected) for name, content, expected in BAD_CONFIGS),
]


def _problem_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("error: invalid configuration", "  - "))]


@pytest.mark.parametrize(("write", "expected"), [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_every_entry_point_refuses_a_bad_configuration_with_the_same_lines(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    write: Callable[[Path], Path],
    expected: list[str],
) -> None:
    config = str(write(tmp_path))
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    lines = ["error: " + line if i == 0 else line for i, line in enumerate(str(refused.value).splitlines())]
    problems = [line for line in lines if line.startswith("  - ")]
    assert len(problems) == len(expected), lines
    for line, text in zip(problems, expected, strict=True):
        assert text in line
    for name, command in ENTRY_POINTS.items():
        code = main(command(config, tmp_path))
        captured = capsys.readouterr()
        assert code == 2, (name, captured.err)
        assert captured.out == "", name
        assert _problem_lines(captured.err) == lines, name
        assert "Traceback" not in captured.err, name
