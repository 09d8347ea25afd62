"""Find the cluster as kubectl does: ``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``, else the
pod's service account; and check, within a bounded time, that it answers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from descheduler.kube.api import DEFAULT_USER_AGENT, KubeApi
from descheduler.kube.errors import ApiConnectionError, ClientThrottledError, KubeconfigError, KubeError
from descheduler.strictyaml import YamlInputError, load_all

MAX_KUBECONFIG_BYTES = 4 * 2**20
"""A kubeconfig is a few KB even with embedded certificates; a larger file is refused unread."""

_ENTRY_LISTS = {"clusters": "cluster", "users": "user", "contexts": "context"}
_STRING_FIELDS = {
    "cluster": (
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "tls-server-name",
        "proxy-url",
    ),
    "user": (
        "token",
        "tokenFile",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "username",
        "password",
    ),
    "context": ("cluster", "user", "namespace"),
}
_MAPPING_FIELDS = {"user": ("exec", "auth-provider")}

REACH_BUDGET_SECONDS = 15.0
"""How long start-up keeps trying an API server that does not answer before giving up with its reason."""

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def _type_name(value: object) -> str:
    return {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "a list"}.get(
        type(value),
        "null" if value is None else "a mapping" if isinstance(value, dict) else type(value).__name__,
    )


def kubeconfig_problems(doc: Any) -> list[str]:
    """What in a parsed kubeconfig has the wrong shape, each naming the field (``users[0].user``).

    The kubernetes client indexes into these without checking (``user: some-string`` was a traceback);
    only the fields it reads are checked, everything else is left to it."""
    if doc is None:
        return []
    if not isinstance(doc, dict):
        return [f"(top level): must be a mapping, got {_type_name(doc)}"]
    problems: list[str] = []
    for key in ("current-context", "apiVersion", "kind"):
        if key in doc and not isinstance(doc[key], str):
            problems.append(f"{key}: must be a string, got {_type_name(doc[key])}")
    if "preferences" in doc and not isinstance(doc["preferences"], dict | None):
        problems.append(f"preferences: must be a mapping, got {_type_name(doc['preferences'])}")
    for list_key, entry_key in _ENTRY_LISTS.items():
        entries = doc.get(list_key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            problems.append(f"{list_key}: must be a list, got {_type_name(entries)}")
            continue
        for i, entry in enumerate(entries):
            where = f"{list_key}[{i}]"
            if not isinstance(entry, dict):
                problems.append(
                    f"{where}: must be a mapping with name and {entry_key}, got {_type_name(entry)}"
                )
                continue
            if not isinstance(entry.get("name"), str):
                problems.append(f"{where}.name: must be a string, got {_type_name(entry.get('name'))}")
            body = entry.get(entry_key)
            if not isinstance(body, dict):
                problems.append(f"{where}.{entry_key}: must be a mapping, got {_type_name(body)}")
                continue
            for field in _STRING_FIELDS[entry_key]:
                if field in body and not isinstance(body[field], str):
                    problems.append(
                        f"{where}.{entry_key}.{field}: must be a string, got {_type_name(body[field])}"
                    )
            for field in _MAPPING_FIELDS.get(entry_key, ()):
                if field in body and not isinstance(body[field], dict):
                    problems.append(
                        f"{where}.{entry_key}.{field}: must be a mapping, got {_type_name(body[field])}"
                    )
            insecure = body.get("insecure-skip-tls-verify")
            if insecure is not None and not isinstance(insecure, bool):
                field = f"{where}.{entry_key}.insecure-skip-tls-verify"
                problems.append(f"{field}: must be true or false, got {_type_name(insecure)}")
    return problems


def check_kubeconfig_file(path: str) -> None:
    """Read ``path`` strictly (bounded, duplicate keys and aliases refused) and check its shape.

    Raises ``KubeconfigError`` with one line naming the file and every problem; the kubernetes client then
    reads the same, now known-good, file."""
    from descheduler.config.load import read_text_file

    try:
        text = read_text_file(path, MAX_KUBECONFIG_BYTES)
        docs = load_all(text, path, max_bytes=MAX_KUBECONFIG_BYTES)
    except YamlInputError as exc:
        where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
        raise KubeconfigError(f"kubeconfig {path}: not valid YAML{where}: {exc.problem}") from None
    except (OSError, ValueError) as exc:
        raise KubeconfigError(f"kubeconfig {path}: {exc}") from None
    if len(docs) > 1:
        raise KubeconfigError(f"kubeconfig {path}: expected one YAML document, found {len(docs)}")
    problems = kubeconfig_problems(docs[0] if docs else None)
    if problems:
        raise KubeconfigError(f"kubeconfig {path}: {'; '.join(problems)}")


def connect(
    kubeconfig: str | None,
    qps: float,
    burst: int,
    *,
    context: str | None = None,
    token_file: str = f"{SERVICE_ACCOUNT_DIR}/token",
    ca_file: str = f"{SERVICE_ACCOUNT_DIR}/ca.crt",
    user_agent: str = DEFAULT_USER_AGENT,
) -> KubeApi:
    """A client for the cluster; ``qps``/``burst`` limit every request this client sends.

    ``$KUBECONFIG`` may list several files separated by ``:``, as kubectl allows. In a pod, the service
    account token is re-read when it rotates.
    """
    import kubernetes.client
    import kubernetes.config
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    # Typed as Any: the kubernetes package's annotations differ between releases.
    client: Any = kubernetes.client
    config: Any = kubernetes.config
    in_cluster: Any = InClusterConfigLoader

    if qps <= 0 or burst < 1:
        raise ValueError(f"clientConnection: qps must be > 0 and burst >= 1 (got qps={qps}, burst={burst})")
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or ""
    home_config = os.path.expanduser(os.path.join("~", ".kube", "config"))
    if not path and os.path.isfile(home_config):
        path = home_config  # kubectl's order: flag, $KUBECONFIG, ~/.kube/config, then in-cluster
    if path:
        files = [p for p in path.split(os.pathsep) if p]
        if not any(os.path.exists(os.path.expanduser(p)) for p in files):
            raise KubeconfigError(f"kubeconfig {path}: file not found")
        for file in files:
            if os.path.exists(os.path.expanduser(file)):
                check_kubeconfig_file(os.path.expanduser(file))
        try:
            config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            raise KubeconfigError(f"kubeconfig {path}: {exc}") from exc
    else:
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise KubeconfigError(
                "no cluster to talk to: pass --kubeconfig, set KUBECONFIG, write ~/.kube/config, or run in a "
                "pod with a service account (KUBERNETES_SERVICE_HOST is not set)"
            )
        try:
            in_cluster(token_filename=token_file, cert_filename=ca_file).load_and_set(configuration)
        except (ConfigException, OSError) as exc:
            raise KubeconfigError(f"in-cluster service account: {exc}") from exc
    return KubeApi(configuration, qps=qps, burst=burst, user_agent=user_agent)


def unreachable_reason(
    api: KubeApi,
    budget: float = REACH_BUDGET_SECONDS,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """None once the API server answers ``GET /version``; else, after ``budget`` seconds of retries,
    why it does not (connection refused, DNS, TLS, timeout, rejected credentials).

    Any answer proves the server is there except 401, which no retry will fix; a TLS failure is not
    retried either. Refused connections, DNS and timeouts are (a server restarting, DNS catching up)."""
    deadline = clock() + budget
    pause = 0.5
    last = "no attempt made"
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            return last
        try:
            response = api.request_raw("GET", "/version", timeout=max(0.5, min(5.0, remaining / 2)))
        except ClientThrottledError as exc:
            last = str(exc)
        except KubeError as exc:
            last = str(exc)
            if isinstance(exc, ApiConnectionError) and exc.cause == "tls":
                return last
        else:
            if response.status == 401:
                return "GET /version: HTTP 401 Unauthorized: the server rejects these credentials"
            return None
        sleep(min(pause, max(0.0, deadline - clock())))
        pause = min(pause * 2, 4.0)
