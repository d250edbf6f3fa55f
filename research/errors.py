"""Typed errors of the research loop (the healer classifies on ``kind``)."""

from harness.errors import MemsysError


class ResearchError(MemsysError):
    kind = "research"


class EditApplyError(ResearchError):
    """A SEARCH/REPLACE block did not apply (search text not found, file missing)."""

    kind = "edit_apply"


class ForbiddenEditError(ResearchError):
    """An edit outside the mutable surface: rejected before evaluation."""

    kind = "forbidden_edit"


class ProposalFormatError(ResearchError):
    kind = "format"


class WorkspaceError(ResearchError):
    kind = "workspace"


class RunStateError(ResearchError):
    kind = "run_state"


class EvaluationError(ResearchError):
    kind = "evaluation"


class WeakSandboxError(ResearchError):
    """The chosen sandbox does not isolate the filesystem and the network: the run refuses to start."""

    kind = "weak_sandbox"


class PresetError(ForbiddenEditError):
    """A memory preset changed by an edit reaches outside ``memory`` or breaks its shape."""

    kind = "preset"


class ExecutorError(ResearchError):
    """The executor could not run an evaluation's untrusted half (a Ray node or worker died, the
    cluster is unreachable): infrastructure, never the candidate's fault."""

    kind = "executor"
