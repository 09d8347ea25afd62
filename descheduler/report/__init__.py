"""Reports for people: the self-contained HTML page of ``simulate`` and ``once`` (``--output html``)."""

from descheduler.report.html import cycle_view, project, render_html

__all__ = ["cycle_view", "project", "render_html"]
