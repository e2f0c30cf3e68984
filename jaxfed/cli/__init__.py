"""The ``jaxfed`` command: list | show NAME | run NAME | reproduce | plot DIR | report DIR | verify
DIR | merge DIR... | export DIR | cache info|clear (docs/cli.md).

Each command parses its arguments (:mod:`jaxfed.cli.parser`), calls one library function of
:mod:`jaxfed.runs` or :mod:`jaxfed.results` (:mod:`jaxfed.cli.commands`) and prints what it did;
:mod:`jaxfed.cli.app` runs it (devices and processes, one-line errors). From Python, the same run
is :func:`jaxfed.run`.

Internal: not a public API but for :func:`main` and :func:`console` (the command itself; no
``__all__``: the public names are in tests/project/public_api.txt).
"""

from jaxfed.cli.app import console as console
from jaxfed.cli.app import main as main
