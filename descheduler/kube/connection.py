"""Find the cluster as kubectl does: ``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``, else the
pod's service account; and check, within a bounded time, that it answers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from descheduler.kube.api import DEFAULT_USER_AGENT, KubeApi
from descheduler.kube.errors import ApiConnectionError, ClientThrottledError, ConfigError, KubeError

REACH_BUDGET_SECONDS = 15.0
"""How long start-up keeps trying an API server that does not answer before giving up with its reason."""

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


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
        raise ConfigError(f"clientConnection: qps must be > 0 and burst >= 1 (got qps={qps}, burst={burst})")
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or ""
    home_config = os.path.expanduser(os.path.join("~", ".kube", "config"))
    if not path and os.path.isfile(home_config):
        path = home_config  # kubectl's order: flag, $KUBECONFIG, ~/.kube/config, then in-cluster
    if path:
        files = [p for p in path.split(os.pathsep) if p]
        if not any(os.path.exists(os.path.expanduser(p)) for p in files):
            raise ConfigError(f"kubeconfig {path}: file not found")
        try:
            config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"kubeconfig {path}: {exc}") from exc
    else:
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise ConfigError(
                "no cluster to talk to: pass --kubeconfig, set KUBECONFIG, write ~/.kube/config, or run in a "
                "pod with a service account (KUBERNETES_SERVICE_HOST is not set)"
            )
        try:
            in_cluster(token_filename=token_file, cert_filename=ca_file).load_and_set(configuration)
        except (ConfigException, OSError) as exc:
            raise ConfigError(f"in-cluster service account: {exc}") from exc
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
