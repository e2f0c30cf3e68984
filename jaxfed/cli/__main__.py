"""``python -m jaxfed.cli``: the ``jaxfed`` command."""

from jaxfed.cli.app import console

if __name__ == "__main__":
    console()
