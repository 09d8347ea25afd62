"""The ``descheduler`` command line: one entry point with subcommands.

Errors the user can fix (bad configuration or input files) print one clear message and exit 2;
they never show a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import yaml

from descheduler import __version__
from descheduler.config.load import ConfigError, EffectiveConfig, load_config
from descheduler.config.providers import redact_document
from descheduler.planner import loop_warnings

EXIT_OK = 0
EXIT_USAGE = 2

Command = Callable[[argparse.Namespace], int]


def _print_notices(effective: EffectiveConfig) -> None:
    for notice in effective.notices:
        print(f"notice: {notice}", file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    effective = load_config(args.config_option or args.config)
    _print_notices(effective)
    for warning in loop_warnings(effective):
        print(f"warning: {warning}", file=sys.stderr)
    # Printed, so kept free of secrets: a Prometheus URL's password is replaced by ***.
    sys.stdout.write(yaml.safe_dump(redact_document(effective.to_document()), sort_keys=False))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="descheduler",
        description="Load-aware Kubernetes descheduler: finds nodes whose measured CPU or memory usage "
        "stays above a high threshold and moves the fewest, safest pods off them.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = sub.add_parser(
        "validate",
        help="check a configuration and print it with every default filled in",
        description="Check a DeschedulerConfiguration (or a ConfigMap manifest holding one) and print the "
        "effective configuration with every default filled in. Exit 0 if valid, 2 with the errors if not.",
        epilog="example: descheduler validate --config config/examples/hotspot/config.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # --config like every other command; the positional form of earlier releases still works.
    source = validate.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config", dest="config_option", metavar="FILE", help="configuration file or ConfigMap manifest"
    )
    source.add_argument("config", metavar="CONFIG", nargs="?", help="the same, given positionally")
    validate.set_defaults(func=cmd_validate)

    from descheduler.simulate.command import add_simulate_parser

    add_simulate_parser(sub)

    from descheduler.snapshot import add_snapshot_parser

    add_snapshot_parser(sub)

    from descheduler.service.app import add_service_parsers

    add_service_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Command = args.func
    try:
        return func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
