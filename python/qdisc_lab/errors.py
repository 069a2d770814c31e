"""The exceptions qdisc_lab raises (the Rust side raises these too)."""


class ScenarioError(ValueError):
    """A scenario the loader refuses; the message is the loader's, located
    (``FILE:LINE:COL: FIELD: message``), prefixed with the override that caused it."""


class TcError(RuntimeError):
    """tc refused a command: ``message`` is what tc writes to stderr, ``exit_code``
    its exit status."""

    def __init__(self, message, exit_code):
        super().__init__(message, exit_code)
        self.message = message
        self.exit_code = exit_code

    def __str__(self):
        return self.message.rstrip("\n")


class RunError(RuntimeError):
    """A run failed: ``message`` as ``qdisc-lab run`` says it, ``exit_code`` the
    status it would exit with (1 failed, 2 cannot run here)."""

    def __init__(self, message, exit_code):
        super().__init__(message, exit_code)
        self.message = message
        self.exit_code = exit_code

    def __str__(self):
        return self.message
