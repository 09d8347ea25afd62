"""Load-aware Kubernetes descheduler: moves pods off nodes whose measured usage runs hot."""

__version__ = "0.1.0"
