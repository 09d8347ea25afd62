"""Allows ``python -m descheduler``."""

from descheduler.cli import main

raise SystemExit(main())
