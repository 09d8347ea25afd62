"""Load a configuration file (or a ConfigMap manifest holding one) into validated models.

Errors are collected into one ``ConfigError`` whose lines name the full field path and the bad value,
so an operator reading ``kubectl logs`` of a crash-looping pod sees exactly what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from descheduler.config.base import FieldProblem, path_key, quoted
from descheduler.config.lownodeload import anomaly_condition_notices
from descheduler.config.models import (
    EXTENSION_POINTS,
    KNOWN_PLUGINS,
    LOW_NODE_LOAD,
    MIGRATION_CONTROLLER,
    DeschedulerConfiguration,
    LowNodeLoadArgs,
    MigrationControllerArgs,
    OtherPluginArgs,
)
from descheduler.strictyaml import YamlInputError, load_all
from descheduler.units import format_duration

MAX_CONFIG_BYTES = 2**20
"""A configuration is a few KB; anything over 1 MiB is a mistake (or ``/dev/zero``), refused unread."""

MAX_PROBLEM_CHARS = 2000
"""The longest line of a ``ConfigError``: validators quote user input cut short (``base.quoted``); this
bounds whatever else a message may echo (a known-fields list is about 1,000 characters)."""

_TAGS = {"LowNodeLoadArgs", "MigrationControllerArgs", "Other"}


def read_text_file(path: str | Path, max_bytes: int | None = None) -> str:
    """A UTF-8 text file's content. ``OSError`` or ``ValueError`` with a message meant for the user as is
    (a binary or otherwise encoded file says where the first bad byte is, never a traceback).

    With ``max_bytes``, at most ``max_bytes + 1`` bytes are read: a larger file (or a device such as
    ``/dev/zero`` that never ends) is refused at once instead of filling memory."""
    try:
        with Path(path).open("rb") as stream:
            data = stream.read() if max_bytes is None else stream.read(max_bytes + 1)
    except OSError as exc:
        raise OSError(f"cannot read file: {exc.strerror or exc}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"larger than the limit of {max_bytes} bytes; is this the right file?")
    return decode_utf8(data)


def decode_utf8(data: bytes) -> str:
    """``data`` as UTF-8, or ``ValueError`` saying where the first bad byte is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (offset {exc.start}); "
            "save the file as UTF-8"
        ) from None


def _one_line(text: str) -> str:
    """A problem is one line of at most ``MAX_PROBLEM_CHARS``: a key or value holding a line break or a
    control character is escaped, a longer line cut with its length."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > MAX_PROBLEM_CHARS:
        return f"{text[:MAX_PROBLEM_CHARS]}... ({len(text)} characters)"
    return text


class ConfigError(ValueError):
    """Invalid configuration; ``str()`` is the full, human-readable list of problems."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = [_one_line(p) for p in problems]
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


@dataclass(frozen=True)
class EffectiveConfig:
    """The validated configuration with plugin args resolved and defaults applied."""

    config: DeschedulerConfiguration
    low_node_load: LowNodeLoadArgs | None
    migration: MigrationControllerArgs
    notices: tuple[str, ...] = field(default=())

    @property
    def dry_run(self) -> bool:
        """Dry-run if any level asks for it: the safe reading of conflicting settings."""
        lnl = self.low_node_load.dry_run if self.low_node_load else False
        return self.config.dry_run or lnl or self.migration.dry_run

    def with_dry_run(self, dry_run: bool) -> EffectiveConfig:
        """The same configuration forced into (or, only if nothing else asks for it, out of) dry-run."""
        lnl = self.low_node_load.model_copy(update={"dry_run": dry_run}) if self.low_node_load else None
        return EffectiveConfig(
            config=self.config.model_copy(update={"dry_run": dry_run}),
            low_node_load=lnl,
            migration=self.migration.model_copy(update={"dry_run": dry_run}),
            notices=self.notices,
        )

    def to_document(self) -> dict[str, Any]:
        """The effective configuration as a YAML-ready document with every default filled in."""
        doc = self.config.model_dump(by_alias=True, mode="json")
        resolved: list[dict[str, Any]] = []
        if self.low_node_load is not None:
            resolved.append(
                {"name": LOW_NODE_LOAD, "args": self.low_node_load.model_dump(by_alias=True, mode="json")}
            )
        resolved.append(
            {"name": MIGRATION_CONTROLLER, "args": self.migration.model_dump(by_alias=True, mode="json")}
        )
        for item in resolved:
            item["args"] = {
                "apiVersion": "descheduler/v1alpha2",
                "kind": f"{item['name']}Args",
                **item["args"],
            }
        for profile in doc.get("profiles", []):
            profile["pluginConfig"] = [
                pc for pc in profile.get("pluginConfig", []) if pc["name"] not in KNOWN_PLUGINS
            ] + resolved
        return doc


def _format_loc(loc: Sequence[int | str], prefix: str) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in _TAGS or item.startswith("function-"):
            continue
        else:
            parts.append(("." if parts else "") + path_key(item))
    path = "".join(parts)
    if prefix:
        return f"{prefix}.{path}" if path else prefix
    return path or "(top level)"


def _short(text: str, limit: int = 200) -> str:
    """One line of at most ``limit`` characters: a 4,000-digit value must not become a 4,000-column error."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short_repr(value: object) -> str:
    return _short(quoted(value), 200)


def _format_validation_error(exc: ValidationError, prefix: str) -> list[str]:
    problems = []
    for err in exc.errors():
        message = str(err.get("msg", "invalid"))
        message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        path = _format_loc(err.get("loc", ()), prefix)
        value = err.get("input")
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, FieldProblem):
            where = f"{path}.{cause.path}" if path != "(top level)" else cause.path
            problems.append(f"{where}: {_short(cause.message, MAX_PROBLEM_CHARS)}")
            continue
        if err.get("type") in ("missing",):
            problems.append(f"{path}: field required")
        elif isinstance(value, dict | list) or "got" in message or _short_repr(value) in message:
            problems.append(f"{path}: {_short(message)}")
        else:
            problems.append(f"{path}: {_short(message)} (got {_short_repr(value)})")
    return problems


def _yaml_problem(exc: YamlInputError) -> str:
    """``not valid YAML (line 7, column 1): duplicate key 'dryRun' at line 7 (first at line 3)``."""
    where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
    return f"not valid YAML{where}: {exc.problem}"


def _unwrap_configmap(doc: Mapping[str, Any], source: str) -> tuple[Any, str]:
    data = doc.get("data")
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(source, ["data: a ConfigMap holding the configuration needs one data key"])
    if len(data) != 1:
        keys = sorted(map(str, data))
        shown = ", ".join(quoted(k) for k in keys[:5]) + (", ..." if len(keys) > 5 else "")
        raise ConfigError(
            source, [f"data: expected exactly one key holding the configuration, found {len(keys)}: {shown}"]
        )
    key, text = next(iter(data.items()))
    where = f"data.{path_key(key)}"
    if not isinstance(text, str):
        raise ConfigError(source, [f"{where}: must be a string holding YAML"])
    try:
        docs = load_all(text, where, max_bytes=MAX_CONFIG_BYTES)
    except YamlInputError as exc:
        raise ConfigError(source, [f"{where}: {_yaml_problem(exc)}"]) from None
    if len(docs) != 1:
        raise ConfigError(source, [f"{where}: expected exactly one YAML document, found {len(docs)}"])
    return docs[0], where


def _plugin_notices(config: DeschedulerConfiguration) -> list[str]:
    """Plugins and plugin args this product does not implement: accepted, said once. (A near miss of a
    known plugin's name is an error of the model, ``EnabledPlugin``.)"""
    notices: list[str] = []
    for i, profile in enumerate(config.profiles):
        for point in EXTENSION_POINTS:
            plugin_set = getattr(profile.plugins, point)
            for j, plugin in enumerate(plugin_set.enabled):
                if plugin.name not in KNOWN_PLUGINS:
                    path = f"profiles[{i}].plugins.{point}.enabled[{j}].name"
                    notices.append(f"{path}: plugin {plugin.name!r} is not implemented here and is ignored")
        for j, pc in enumerate(profile.plugin_config):
            if isinstance(pc.args, OtherPluginArgs):
                notices.append(
                    f"profiles[{i}].pluginConfig[{j}]: args of plugin {pc.name!r} "
                    "are not used here and are ignored"
                )
    return notices


def _ignored_notices(
    config: DeschedulerConfiguration, lnl: LowNodeLoadArgs | None, mc: MigrationControllerArgs
) -> list[str]:
    notices = []
    for name in ("enable_profiling", "enable_contention_profiling"):
        if name in config.model_fields_set:
            alias = DeschedulerConfiguration.model_fields[name].alias
            notices.append(
                f"{alias}: accepted for Koordinator compatibility, ignored (no profiling endpoints)"
            )
    if "client_connection" in config.model_fields_set:
        for name in ("kubeconfig", "accept_content_types", "content_type"):
            if name in config.client_connection.model_fields_set:
                alias = type(config.client_connection).model_fields[name].alias or name
                notices.append(f"clientConnection.{alias}: ignored (use --kubeconfig; JSON is always used)")
    for alias in MigrationControllerArgs.reservation_fields:
        name = next(n for n, f in MigrationControllerArgs.model_fields.items() if f.alias == alias)
        if name in mc.model_fields_set:
            notices.append(
                f"MigrationControllerArgs.{alias}: accepted for compatibility, not used "
                "(this product evicts directly and checks destinations itself)"
            )
    if lnl is not None:
        notices += anomaly_condition_notices(lnl)
        notices += _moot_normalities_notices(lnl, config.descheduling_interval)
    return notices


def _moot_normalities_notices(lnl: LowNodeLoadArgs, interval: float) -> list[str]:
    """A set ``consecutiveNormalities`` that a ``timeout`` no longer than the interval makes moot (the
    confirmed state ends before the next cycle): say so rather than let it look honoured."""
    conditions = [("LowNodeLoadArgs.anomalyCondition", lnl.anomaly_condition)]
    conditions += [
        (f"LowNodeLoadArgs.nodePools[{i}].anomalyCondition", pool.anomaly_condition)
        for i, pool in enumerate(lnl.node_pools)
        if pool.anomaly_condition is not None
    ]
    notices = []
    for where, cond in conditions:
        if "consecutive_normalities" not in cond.model_fields_set:
            continue
        timeout = cond.timeout if cond.timeout > 0 else 60.0
        if timeout <= interval and cond.consecutive_abnormalities != 1:
            notices.append(
                f"{where}.consecutiveNormalities has no effect: timeout ({format_duration(timeout)}) is not "
                f"longer than deschedulingInterval ({format_duration(interval)}), so a confirmed hotspot "
                "stays confirmed for its own cycle only; raise the timeout to keep it through normal cycles"
            )
    return notices


def _wrong_kind(doc: Mapping[str, Any], prefix: str) -> str | None:
    """A Kubernetes object of another kind (say a Deployment) is named as such, not as an unknown field."""
    kind = doc.get("kind")
    if kind is None or kind == "DeschedulerConfiguration":
        return None
    where = f"{prefix}.kind" if prefix else "kind"
    api = doc.get("apiVersion")
    named = quoted(kind) + (f" ({path_key(api)})" if api else "")
    return (
        f"{where}: this is a {named}, not a DeschedulerConfiguration; give the configuration itself or "
        "the ConfigMap holding it"
    )


def load_config_document(doc: Any, source: str = "<config>") -> EffectiveConfig:
    """Validate an already-parsed YAML document (a configuration or a ConfigMap holding one)."""
    prefix = ""
    if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
        doc, prefix = _unwrap_configmap(doc, source)
    if not isinstance(doc, Mapping):
        raise ConfigError(source, [f"{prefix or '(top level)'}: expected a DeschedulerConfiguration mapping"])
    wrong_kind = _wrong_kind(doc, prefix)
    if wrong_kind is not None:
        raise ConfigError(source, [wrong_kind])
    try:
        config = DeschedulerConfiguration.model_validate(dict(doc))
    except ValidationError as exc:
        raise ConfigError(source, _format_validation_error(exc, prefix)) from None
    notices = _plugin_notices(config)
    lnl: LowNodeLoadArgs | None = None
    mc: MigrationControllerArgs | None = None
    for profile in config.profiles:
        balance = profile.plugins.balance.names()
        for pc in profile.plugin_config:
            if isinstance(pc.args, LowNodeLoadArgs) and LOW_NODE_LOAD in balance:
                lnl = pc.args
            elif isinstance(pc.args, MigrationControllerArgs) and mc is None:
                mc = pc.args
        if LOW_NODE_LOAD in balance and lnl is None:
            lnl = LowNodeLoadArgs()
    mc = mc or MigrationControllerArgs()
    notices += _ignored_notices(config, lnl, mc)
    return EffectiveConfig(config=config, low_node_load=lnl, migration=mc, notices=tuple(notices))


def load_config_text(text: str, source: str = "<config>") -> EffectiveConfig:
    """Parse strictly (``descheduler.strictyaml``: duplicate keys, aliases, depth, size) and validate."""
    try:
        docs = load_all(text, source, max_bytes=MAX_CONFIG_BYTES)
    except YamlInputError as exc:
        raise ConfigError(source, [_yaml_problem(exc)]) from None
    if len(docs) != 1:
        raise ConfigError(source, [f"expected exactly one YAML document, found {len(docs)}"])
    return load_config_document(docs[0], source)


def load_config(path: str | Path) -> EffectiveConfig:
    """Read and validate a configuration file: the one check ``validate``, ``run``, ``once`` and
    ``simulate`` make before acting, so what one refuses, all refuse (exit 2), with the same lines.

    Every rule about the configuration alone is a validator of its model (``models.py``,
    ``lownodeload.py``, ``migration.py``, ``selectors.py``, ``types.py``). Left for later, because
    they need the cluster: the kubeconfig (``kube/connection.py``, when connecting), a
    ``priorityThreshold.name`` (resolved against PriorityClasses each cycle) and whether the metrics
    source answers (``run`` and ``once`` report it per cycle)."""
    try:
        text = read_text_file(path, MAX_CONFIG_BYTES)
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), [str(exc)]) from None
    return load_config_text(text, str(path))
