"""The run repository's refusals, one type per reason, under one base a caller can catch."""


class RunError(Exception):
    """Base of every refusal by the run repository."""


class RunNotFound(RunError):
    """No run with that id (or none that the caller may act on)."""


class LeaseNotHeld(RunError):
    """The caller is not the current owner of an unexpired lease on a running run."""


class RunContextInvalid(RunError):
    """A tool's runtime context does not match a run that may use memory tools."""
