"""One validation path for ``validate``, ``run`` and ``once``: what one rejects, all reject (exit 2).

``load_config`` checks the document's shape; this adds what the planner, the evictor and the usage
source would otherwise only find when the service builds them, after it has connected to the cluster.
"""

from __future__ import annotations

from descheduler.config.load import ConfigError, EffectiveConfig


def check_runnable(effective: EffectiveConfig, source: str = "<config>") -> None:
    """Raise ``ConfigError`` listing every problem a live run would hit at start-up."""
    from descheduler.kube.evict import validate_delete_options
    from descheduler.planner import validate as validate_planner_settings

    validate_planner_settings(effective)
    problems: list[str] = []
    try:
        validate_delete_options(effective.migration.default_delete_options)
    except ValueError as exc:
        problems.append(f"MigrationControllerArgs.defaultDeleteOptions: {exc}")
    providers = effective.config.metrics_providers
    if len(providers) > 1:
        problems.append(f"metricsProviders: only one metrics provider can be used, got {len(providers)}")
    if problems:
        raise ConfigError(source, problems)
