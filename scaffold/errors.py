"""The one error type users see: a one-line message and an exit code."""


class UserError(Exception):
    """Bad input from the user: printed as one line, exit code 2 by default."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
