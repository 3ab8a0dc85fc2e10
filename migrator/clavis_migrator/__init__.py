"""clavis-migrator: the per-host agent that carries out clavisd's migration steps."""

__version__ = "0.1.0"
