"""The one "no data for this figure" exception of every figure module (analysis.figures and the
serving and decode-step figure modules, which analysis.figures lists as they are)."""


class Skip(Exception):
    """A figure whose data is not in the file."""
