"""Errors a user can act on: the CLI prints them as one line and exits with status 2.

Kept free of heavy imports so the CLI can catch them without loading numpy.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A value that breaks a rule of the specs; the message names field, value and the rule."""


class UnitError(SpecError):
    """A quantity string that cannot be read; the message says what was expected."""


USER_ERRORS: tuple[type[Exception], ...] = (SpecError,)
