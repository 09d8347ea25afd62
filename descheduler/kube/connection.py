"""Find the cluster: an explicit kubeconfig, else ``$KUBECONFIG``, else the pod's service account."""

from __future__ import annotations

import os
from typing import Any

from descheduler.kube.api import DEFAULT_USER_AGENT, KubeApi
from descheduler.kube.errors import ConfigError

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
                "no cluster to talk to: pass --kubeconfig, set KUBECONFIG, or run in a pod with a service "
                "account (KUBERNETES_SERVICE_HOST is not set)"
            )
        try:
            in_cluster(token_filename=token_file, cert_filename=ca_file).load_and_set(configuration)
        except (ConfigException, OSError) as exc:
            raise ConfigError(f"in-cluster service account: {exc}") from exc
    return KubeApi(configuration, qps=qps, burst=burst, user_agent=user_agent)
