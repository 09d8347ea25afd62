"""Configuration files the suites write: one LowNodeLoad profile around the arguments a test cares about."""

from __future__ import annotations

LOW_NODE_LOAD_HEAD = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
profiles:
- name: p
  plugins: {balance: {enabled: [{name: LowNodeLoad}]}}
  pluginConfig:
  - name: LowNodeLoad
"""


def low_node_load_yaml(
    args: str = "{lowThresholds: {cpu: 20}, highThresholds: {cpu: 50}}", rest: str = ""
) -> str:
    """A DeschedulerConfiguration as text: LowNodeLoad with ``args`` (flow YAML, or a block indented to
    follow ``args:``), then ``rest`` (further ``pluginConfig`` entries, already indented)."""
    return f"{LOW_NODE_LOAD_HEAD}    args: {args}\n{rest}"
