"""Entry point for ``python -m ate``: the same as the ``ate`` console script."""

from ate.cli.main import app

if __name__ == "__main__":
    app(prog_name="ate")
