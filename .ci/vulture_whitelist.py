"""Names vulture reports as unused although something outside our code calls or reads them.

CI runs ``vulture descheduler .ci/vulture_whitelist.py --min-confidence 80``, which reports none of these
today; they are listed so a lower ``--min-confidence`` run (worth doing by hand now and then, over
``descheduler tests benchmarks``) shows only candidates worth reading. Pydantic fields and validators
are not listed: at 60% vulture reports every one of them, use ``--ignore-decorators`` for those.
Add a name here only with the caller that makes it live.
"""

# Bare attribute references are how vulture is told a name is used.
# ruff: noqa: B018

_ = object()

_.readable  # io.RawIOBase protocol: io.BufferedReader calls it (cluster/dump.py)
_.readinto  # io.RawIOBase protocol: io.BufferedReader calls it (cluster/dump.py)
_.maxstring  # reprlib.Repr setting, read by reprlib (cluster/parse.py)
_.maxother  # reprlib.Repr setting, read by reprlib (cluster/parse.py)
_.maxlevel  # reprlib.Repr setting, read by reprlib (cluster/parse.py)
_.construct_sequence  # yaml constructor override, called by PyYAML (strictyaml.py)
_.construct_mapping  # yaml constructor override, called by PyYAML (strictyaml.py)
