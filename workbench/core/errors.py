"""The one exception type users see.

Every failure a user can cause (a bad file, a wrong shape, a missing dataset) is raised as a
`WorkbenchError` carrying what went wrong and what to do about it. The CLI prints it without a
traceback and exits non-zero; the GUI shows it in a dialog with the technical text under "Details".
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """A problem the user can fix: `message` says what is wrong, `hint` what to do."""

    def __init__(self, message: str, hint: str = "", details: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def __str__(self) -> str:
        return f"{self.message}\n{self.hint}" if self.hint else self.message

    def __reduce__(self):  # pickled whole, hint and details too (a worker process's error comes back)
        return type(self), (self.message, self.hint, self.details)


class Cancelled(Exception):
    """Raised inside a job when the user cancelled it; nothing half-done is kept."""
