"""The command-line options of the commands that print cycle reports (``simulate``, ``once``): one
spelling of ``--output`` and ``--explain`` and one reading of ``--explain``."""

from __future__ import annotations

import argparse

from descheduler.planner import DETAILED, SUMMARISED, SkipForm

FORMATS = ("json", "text", "html")
"""What ``--output`` offers; ``text`` is the default."""


def add_report_options(parser: argparse.ArgumentParser, what: str, explain_help: str) -> None:
    """``--output`` (``what`` names what is printed) and ``--explain`` (its help says what a summary is
    in this command's report)."""
    parser.add_argument(
        "--output",
        choices=FORMATS,
        default="text",
        help=f"{what} format (default text); html is one self-contained page: redirect it to a file",
    )
    parser.add_argument("--explain", choices=("summary", "all"), default="summary", help=explain_help)


def skip_form(explain: str) -> SkipForm:
    """How the filtered pods of a hotspot are reported for ``--explain``: one per pod only for ``all``."""
    return DETAILED if explain == "all" else SUMMARISED
