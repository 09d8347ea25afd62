"""Strict, bounded configuration input (issue 25): each hostile or broken input named in the issue is refused
with one line naming the field or the line, never a traceback, and both YAML loaders say the same."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler import strictyaml
from descheduler.cli import main
from descheduler.config.load import MAX_CONFIG_BYTES, ConfigError, load_config, load_config_text
from descheduler.kube.connection import check_kubeconfig_file, connect
from descheduler.kube.errors import KubeconfigError
from descheduler.strictyaml import YamlInputError, load_all, load_one
from descheduler.units import parse_duration, parse_quantity

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HEADER = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\n"


@pytest.fixture(params=["libyaml", "pure"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every strict-reader test runs with libyaml (what production uses) and with PyYAML's own loader."""
    assert strictyaml.LIBYAML, "PyYAML's wheel ships libyaml; without it only one loader would be tested"
    if request.param == "pure":
        monkeypatch.setattr(strictyaml, "_CLoader", strictyaml._PureLoader)
        monkeypatch.setattr(strictyaml, "LIBYAML", False)
    yield request.param


def _billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        name, previous = chr(ord("a") + i), chr(ord("a") + i - 1)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


REFUSED_YAML = [
    # (case, text, words in the message, line)
    (
        "duplicate dryRun",
        HEADER + "dryRun: true\ndeschedulingInterval: 60s\ndryRun: false\n",
        "duplicate key 'dryRun' at line 5 (first at line 3)",
        5,
    ),
    (
        "duplicate nested key",
        "a:\n  b: 1\n  c: 2\n  b: 3\n",
        "duplicate key 'b' at line 4 (first at line 2)",
        4,
    ),
    ("alias", "a: &x [1, 2]\nb: *x\n", "YAML aliases (*x) are not accepted", 2),
    ("alias of a scalar", "a: &x 1\nb: *x\n", "YAML aliases (*x) are not accepted", 2),
    ("recursive alias", "a: &x [*x]\n", "YAML aliases (*x) are not accepted", 1),
    ("billion laughs", _billion_laughs(), "YAML aliases (*a) are not accepted", 2),
    ("merge key", "a: {x: 1}\nb:\n  <<: {y: 2}\n", "merge keys (<<) are not accepted", 3),
    ("depth 10,000 (flow)", "[" * 10_000 + "]" * 10_000, "nesting deeper than 64 levels", 1),
    ("depth 65", "[" * 65 + "]" * 65, "nesting deeper than 64 levels", 1),
    (
        "depth 100 (block)",
        "".join(" " * i + "a:\n" for i in range(100)) + " " * 100 + "1\n",
        "nesting deeper than 64 levels",
        65,
    ),
    ("5,000-digit integer", "a: " + "9" * 5000 + "\n", "integer of more than 4300 characters", 1),
    ("infinite float", "a: .inf\n", "out of range (not finite)", 1),
    ("float overflowing to infinity", "a: 1.0e+999\n", "out of range (not finite)", 1),
    ("impossible timestamp", "a: 2001-13-14\n", "invalid timestamp '2001-13-14'", 1),
    ("timestamp offset of 99 hours", "a: 2001-12-14t21:59:43.10+99:00\n", "invalid timestamp", 1),
    ("unhashable key", "? [1]\n: 2\n", "a mapping key cannot be a list", 1),
    ("!!set", "!!set {a, b}\n", "YAML tag tag:yaml.org,2002:set is not accepted", 1),
    ("control character", "a: \x07\n", "unacceptable character #x0007", 1),
    ("lone surrogate", "a: \ud800\n", "unacceptable character #xd800", 1),
    ("unclosed flow sequence", "a: [1,\n", "expected the node content", 2),
]


@pytest.mark.parametrize(("case", "text", "words", "line"), REFUSED_YAML, ids=[c[0] for c in REFUSED_YAML])
def test_the_strict_reader_refuses_with_the_line(
    loader: str, case: str, text: str, words: str, line: int
) -> None:
    with pytest.raises(YamlInputError) as caught:
        load_all(text, "cfg.yaml")
    message = str(caught.value)
    assert words in message
    assert message.startswith(f"cfg.yaml, line {line}, column ")
    assert caught.value.line == line
    assert "\n" not in message


def test_both_loaders_word_every_refusal_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    def messages() -> list[str]:
        out = []
        for _, text, _, _ in REFUSED_YAML:
            with pytest.raises(YamlInputError) as caught:
                load_all(text, "x")
            out.append(str(caught.value))
        return out

    with_libyaml = messages()
    monkeypatch.setattr(strictyaml, "_CLoader", strictyaml._PureLoader)
    monkeypatch.setattr(strictyaml, "LIBYAML", False)
    assert messages() == with_libyaml


def _nested(depth: int) -> list[Any]:
    inner: list[Any] = []
    for _ in range(depth - 1):
        inner = [inner]
    return inner


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb: [x, 2.5, true, null]\n", [{"a": 1, "b": ["x", 2.5, True, None]}]),
        ("a: 1\n---\n---\nb: 2\n", [{"a": 1}, {"b": 2}]),
        ("a: &unused 1\n", [{"a": 1}]),  # an anchor nobody refers to expands nothing
        ("[" * 64 + "]" * 64, [_nested(64)]),
        ("a: " + "9" * 4300 + "\n", [{"a": int("9" * 4300)}]),
        ("'*': '*.example.com'\n", [{"*": "*.example.com"}]),
        ("", []),
    ],
)
def test_well_formed_yaml_reads_as_safe_load_reads_it(loader: str, text: str, expected: list[Any]) -> None:
    assert load_all(text, "x") == expected
    assert load_all(text, "x") == [d for d in yaml.safe_load_all(text) if d is not None]


def test_text_over_the_limit_is_refused_before_parsing(loader: str) -> None:
    with pytest.raises(YamlInputError, match="larger than the limit of 100 bytes"):
        load_all("a: " + "x" * 200, "big.yaml", max_bytes=100)
    with pytest.raises(YamlInputError, match="larger than the limit of 100 bytes"):
        load_all("a: " + "é" * 60, "big.yaml", max_bytes=100)  # 123 bytes in UTF-8, 63 characters
    assert load_all("a: " + "x" * 90, "ok.yaml", max_bytes=100) == [{"a": "x" * 90}]


def test_load_one_refuses_several_documents(loader: str) -> None:
    assert load_one("a: 1\n", "x") == {"a": 1}
    assert load_one("", "x") is None
    with pytest.raises(YamlInputError, match="expected one YAML document, found 2"):
        load_one("a: 1\n---\nb: 2\n", "x")


CONFIG = (FIXTURES / "koordinator-guide-configmap.yaml").read_text()
LNL = "profiles[0].pluginConfig[0].args"


def _config(**top: str) -> str:
    return HEADER + "".join(f"{key}: {value}\n" for key, value in top.items())


def _lnl_args(extra: str) -> str:
    """The Koordinator guide's LowNodeLoad args plus ``extra`` (already indented for the args mapping)."""
    marker = "            anomalyCondition:\n"
    return CONFIG.replace(marker, extra + marker)


def _migration(extra: str) -> str:
    return (
        HEADER
        + "profiles:\n- name: p\n  pluginConfig:\n  - name: MigrationController\n    args:\n"
        + extra
        + "  plugins:\n    balance:\n      enabled: [{name: LowNodeLoad}]\n"
    )


REFUSED_CONFIGS = [
    # (case, text, the problem line expected)
    (
        "duplicate dryRun line",
        HEADER + "dryRun: true\ndryRun: false\n",
        "not valid YAML (line 4, column 1): duplicate key 'dryRun' at line 4 (first at line 3)",
    ),
    (
        "a second ConfigMap data key of the same name",
        CONFIG.replace("data:\n", "data:\n  koord-descheduler-config: 'dryRun: true'\n"),
        "not valid YAML (line 11, column 3): duplicate key 'koord-descheduler-config' at line 11 "
        "(first at line 10)",
    ),
    (
        "a duplicate key inside the ConfigMap's configuration",
        CONFIG.replace("    deschedulingInterval: 60s\n", "    dryRun: true\n    dryRun: false\n"),
        "data.koord-descheduler-config: not valid YAML (line 4, column 1): duplicate key 'dryRun'",
    ),
    ("an alias", HEADER + "leaderElection: &x {}\nwatchCache: *x\n", "YAML aliases (*x) are not accepted"),
    (
        "a negative objectLimiters duration",
        _migration("      objectLimiters:\n        workload:\n          duration: -5m\n"),
        "profiles[0].pluginConfig[0].args.objectLimiters.workload.duration: must be a positive duration or 0",
    ),
    (
        "a negative detectorCacheTimeout",
        _lnl_args("            detectorCacheTimeout: -1s\n"),
        f"{LNL}.detectorCacheTimeout: must be a positive duration or 0, got -1s",
    ),
    (
        "a zero detectorCacheTimeout",
        _lnl_args("            detectorCacheTimeout: 0s\n"),
        f"{LNL}.detectorCacheTimeout: must be a positive duration such as 5m",
    ),
    (
        "999999999999999h",
        _config(deschedulingInterval="999999999999999h"),
        "deschedulingInterval: duration '999999999999999h' is out of range",
    ),
    (
        "a duration over a year",
        _config(watchCache="{maxStaleness: 9000h}"),
        "watchCache.maxStaleness: must be at most 8784h (a year)",
    ),
    (
        "a watch timeout over an hour",
        _config(watchCache="{watchTimeout: 2h}"),
        "watchCache: watchTimeout (7200s) must be between 1s and 3600s",
    ),
    (
        "an unknown wire encoding",
        _config(watchCache="{encoding: cbor}"),
        "watchCache.encoding: Input should be 'json' or 'protobuf' (got 'cbor')",
    ),
    (
        "an unknown watchList mode",
        _config(watchCache="{watchList: sometimes}"),
        "watchCache.watchList: Input should be 'auto', 'on' or 'off' (got 'sometimes')",
    ),
    (
        "a staleness bound under a second",
        _config(watchCache="{maxStaleness: 500ms}"),
        "watchCache: maxStaleness (0.5s) must be at least 1s",
    ),
    (
        "a negative leader election duration",
        _config(leaderElection="{retryPeriod: -2s}"),
        "leaderElection.retryPeriod: must be a positive duration or 0",
    ),
    (
        "a huge integer",
        _lnl_args("            numberOfNodes: " + "9" * 400 + "\n"),
        f"{LNL}.numberOfNodes: Input should be less than or equal to 2147483647 "
        "(got an integer of 400 digits)",
    ),
    ("an integer beyond int32", _config(clientConnection="{burst: 2147483648}"), "clientConnection.burst"),
    ("an infinite rate", _config(clientConnection="{qps: .inf}"), "out of range (not finite)"),
    ("a rate written as a string", _config(clientConnection="{qps: '1e999'}"), "clientConnection.qps"),
    (
        "a huge evictQPS",
        _migration("      evictQPS: '1e999'\n"),
        "profiles[0].pluginConfig[0].args.evictQPS: must be at most 1e+06",
    ),
    (
        "a huge gracePeriodSeconds",
        _migration("      defaultDeleteOptions: {gracePeriodSeconds: " + "9" * 100 + "}\n"),
        "gracePeriodSeconds must be between 0 and",
    ),
    (
        "a percentage beyond int32",
        _migration("      maxMigratingPerWorkload: '99999999999%'\n"),
        "must be at most 2147483647",
    ),
    (
        "an invalid lease name",
        _config(leaderElection="{resourceName: My_Lease}"),
        "leaderElection.resourceName: the Lease name 'My_Lease' is not a valid object name",
    ),
    (
        "a lease name leaving no room for the journal's suffix",
        _config(leaderElection="{resourceName: " + "a" * 250 + "}"),
        "leaderElection.resourceName: the Lease name",
    ),
    (
        "an invalid lease namespace",
        _config(leaderElection="{resourceNamespace: kube.system}"),
        "leaderElection.resourceNamespace: 'kube.system' is not a valid namespace name",
    ),
]


@pytest.mark.parametrize(("case", "text", "problem"), REFUSED_CONFIGS, ids=[c[0] for c in REFUSED_CONFIGS])
def test_a_bad_configuration_names_the_field(case: str, text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, "cfg.yaml")
    assert any(problem in line for line in caught.value.problems), caught.value.problems
    assert all("\n" not in line and len(line) < 400 for line in caught.value.problems)


def test_valid_durations_and_names_at_the_bounds_still_validate() -> None:
    effective = load_config_text(
        _config(
            deschedulingInterval="8784h",
            leaderElection="{resourceName: a.b-c, resourceNamespace: " + "n" * 63 + "}",
            clientConnection="{burst: 2147483647, qps: 1000000}",
        )
    )
    assert effective.config.descheduling_interval == 8784 * 3600
    assert effective.config.leader_election.resource_namespace == "n" * 63


@pytest.mark.parametrize("text", ["1e400", "1e999999999", "9" * 5000, "8Ei", "1e-999999999"])
def test_absurd_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"out of range|too long"):
        parse_quantity(text)


def test_999999999999999h_is_not_a_duration() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_duration("999999999999999h")


def test_a_config_file_over_1_mib_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(HEADER + "#" * MAX_CONFIG_BYTES)
    with pytest.raises(ConfigError, match="larger than the limit of 1048576 bytes"):
        load_config(big)
    with pytest.raises(ConfigError, match="larger than the limit"):
        load_config("/dev/zero")


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: USER
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""

BAD_KUBECONFIGS = [
    (
        "user is a string",
        KUBECONFIG.replace("USER", "just-a-string"),
        "users[0].user: must be a mapping, got a string",
    ),
    (
        "user token is a number",
        KUBECONFIG.replace("USER", "{token: 12}"),
        "users[0].user.token: must be a string",
    ),
    (
        "cluster is a list",
        KUBECONFIG.replace('{server: "https://127.0.0.1:6443"}', "[1]"),
        "clusters[0].cluster",
    ),
    ("contexts is a mapping", KUBECONFIG.replace("- name: x\n  context", "  x"), "contexts: must be a list"),
    (
        "an entry is a string",
        KUBECONFIG.replace("- name: u\n  user: USER", "- u"),
        "users[0]: must be a mapping",
    ),
    (
        "current-context is a list",
        KUBECONFIG.replace("current-context: x", "current-context: [x]"),
        "current-context",
    ),
    ("duplicate user key", KUBECONFIG.replace("USER", "{token: a, token: b}"), "duplicate key 'token'"),
    ("the whole file is a list", "[1, 2]\n", "(top level): must be a mapping"),
]


@pytest.mark.parametrize(("case", "text", "problem"), BAD_KUBECONFIGS, ids=[c[0] for c in BAD_KUBECONFIGS])
def test_a_kubeconfig_of_the_wrong_shape_is_one_line_naming_the_field(
    tmp_path: Path, case: str, text: str, problem: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(KubeconfigError) as caught:
        connect(str(path), 10, 10)
    assert problem in str(caught.value)
    assert str(caught.value).startswith(f"kubeconfig {path}: ")
    assert "\n" not in str(caught.value)


def test_a_well_formed_kubeconfig_passes_the_shape_check(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("USER", "{token: abc}"))
    check_kubeconfig_file(str(path))
    assert connect(str(path), 10, 10).host == "https://127.0.0.1:6443"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_validate_redacts_the_password_and_warns_of_clear_text_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(
        tmp_path,
        HEADER + "metricsProviders:\n- source: Prometheus\n  prometheus:\n"
        "    url: http://admin:s3cr3t-pw@prometheus.monitoring.svc:9090\n",
    )
    assert main(["validate", config]) == 0
    out, err = capsys.readouterr()
    assert "s3cr3t-pw" not in out + err
    assert "url: http://admin:***@prometheus.monitoring.svc:9090" in out
    assert (
        "warning: metricsProviders[0].prometheus: the user and password in the URL will be sent in clear"
        in err
    )


@pytest.mark.parametrize(
    ("url", "auth", "warned"),
    [
        ("http://prometheus:9090", "    basicAuth: {username: u, passwordFile: /p}\n", True),
        ("http://prometheus:9090", "    authToken: {bearerTokenFile: /t}\n", True),
        ("https://u:p@prometheus:9090", "", False),
        ("http://u:p@127.0.0.1:9090", "", False),
        ("http://u:p@localhost:9090", "", False),
        ("http://prometheus:9090", "", False),
    ],
)
def test_credentials_over_plain_http_off_loopback_are_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, auth: str, warned: bool
) -> None:
    config = _write(
        tmp_path, HEADER + f"metricsProviders:\n- source: Prometheus\n  prometheus:\n    url: {url}\n{auth}"
    )
    assert main(["validate", config]) == 0
    assert ("clear text over plain http://" in capsys.readouterr().err) is warned


COMMANDS: list[Callable[[str], list[str]]] = [
    lambda config: ["validate", config],
    lambda config: ["run", "--config", config],
    lambda config: ["once", "--config", config],
    lambda config: [
        "simulate",
        "--config",
        config,
        "--cluster",
        "config/examples/hotspot/cluster.yaml",
        "--usage",
        "config/examples/hotspot/usage.yaml",
    ],
]


@pytest.mark.parametrize("command", COMMANDS, ids=["validate", "run", "once", "simulate"])
@pytest.mark.parametrize(
    "text",
    [
        _config(deschedulingInterval="999999999999999h"),
        HEADER + "dryRun: true\ndryRun: false\n",
        _migration("      objectLimiters:\n        workload:\n          duration: -5m\n"),
    ],
    ids=["huge-duration", "duplicate-key", "negative-duration"],
)
def test_every_command_refuses_a_bad_configuration_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: Callable[[str], list[str]], text: str
) -> None:
    config = _write(tmp_path, text)
    assert main(command(config)) == 2
    err = capsys.readouterr().err
    assert "error:" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("config", ["/dev/zero", "BAD"], ids=["dev-zero", "duplicate-key"])
def test_the_cli_process_exits_2_without_a_traceback(tmp_path: Path, config: str) -> None:
    if config == "BAD":
        config = _write(tmp_path, HEADER + "dryRun: true\ndryRun: false\n")
    result = subprocess.run(
        [sys.executable, "-m", "descheduler", "validate", "--", config],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: invalid configuration in ")
