"""Reports of cycles: text tables and JSON (``text.py``) and the self-contained HTML page (``html.py``),
shared by ``simulate``, ``once`` and the service's audit."""

from descheduler.report.html import cycle_view, project, render_html

__all__ = ["cycle_view", "project", "render_html"]
