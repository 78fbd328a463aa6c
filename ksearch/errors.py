"""Failures named by meaning. The CLI maps each to a one-line message that says what to do next."""

from __future__ import annotations


class KsearchError(Exception):
    """An expected failure, shown to the user without a traceback."""

    hint: str = ""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        if hint:
            self.hint = hint


class UserError(KsearchError):
    """Bad input from the user: a flag, a file, a name."""


class TaskNotFoundError(UserError):
    """No task of that name is built in or registered through the ``ksearch.tasks`` entry point."""


class RunNotFoundError(UserError):
    """No run of that id in the workspace."""

    hint = "list runs with: ksearch runs"


class RunExistsError(UserError):
    """A new run was given the id of a run the workspace already holds (ids are never reused)."""


class RunBusyError(UserError):
    """Another live process is driving the run."""


class SkillNotFoundError(UserError):
    """No skill of that id (or snapshot) in the workspace."""

    hint = "list skills with: ksearch skills list"


class MissingApiKeyError(UserError):
    """The provider needs an API key that is not in the environment."""


class ProviderError(KsearchError):
    """The LLM provider failed after all retries (network, rate limit, server error)."""


class ModelReplyError(KsearchError):
    """The model's reply could not be used even after repair retries; carries the raw replies."""

    def __init__(self, message: str, *, attempts: int = 0, last_reply: str = "") -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_reply = last_reply


class BudgetExceededError(KsearchError):
    """A token or money budget would be exceeded by the next call."""

    @property
    def stop_reason(self) -> str:
        """Why the run stops, as its done reason says it."""
        return f"budget: {self}"


class ReplayExhaustedError(BudgetExceededError):
    """A replay provider was asked for more replies than were recorded: the recording is the run's budget."""

    hint = "the replayed run made more calls than the recording holds; re-run with a real provider to go further"

    @property
    def stop_reason(self) -> str:
        """The recording was the whole of it: no budget was set or spent."""
        return f"replay ended: {self}"


class MissingExtraError(UserError):
    """An optional feature needs packages of an extra that is not installed (e.g. ``ksearch[report]``)."""


class WorkspaceError(KsearchError):
    """The workspace (its database, log or lock files) cannot be read or written: not a database, read-only, full."""


class RunInterrupted(KsearchError):
    """The run stopped because the user or the system asked it to (SIGINT, SIGTERM); it can be resumed."""

    def __init__(self, message: str, *, signal_name: str = "SIGINT", hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        import signal

        return 128 + int(getattr(signal, self.signal_name, signal.SIGINT))
