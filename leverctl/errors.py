"""Errors a user can cause. Each is reported as one line on stderr, exit 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: a malformed recipe, an unknown lever, a bad --set, no GPU...

    ``where`` (a file, optionally with a line) is prefixed to the message so
    the one line says both what and where.
    """

    exit_code = 2

    def __init__(self, message: str, where: str | None = None):
        self.message = message
        self.where = where
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message
