import sys

# Before any module that needs 3.11 is imported, in syntax any Python 3 parses: one line instead of a traceback
# (pip enforces requires-python at install; this catches an interpreter that bypassed it).
if sys.version_info < (3, 11):  # noqa: UP036
    version = ".".join(map(str, sys.version_info[:3]))
    sys.exit("transformer-serving needs Python >= 3.11; this is " + version + " (" + sys.executable + ")")

__version__ = "0.1.0"  # the package version (pyproject.toml reads it): /metrics build_info, OpenAPI
