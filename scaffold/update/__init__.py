"""Keep a generated package current: wrap `copier update`, then report what it did.

copier 9 exits 0 even when it leaves conflict markers (or `.rej` files) behind, deletes a
template-owned file the new release removed even when you edited it, and trusts nothing by
default. So, one module per step: `package` reads and checks the answers file (template
repository, `_commit`); `versions` finds the newest release; `new_questions` finds what it
asks that the package never answered; `conflicts` checks the git tree (clean, no markers
left from an earlier update); `trust` decides whether migrations may run; `run` calls
copier with inline conflicts, keeps (as a conflict) every removed file you had edited, and
reads the result back from git.
"""

from .conflicts import find_conflicts, require_clean_git, unresolved_conflicts
from .new_questions import NewQuestion, asked_among, asked_on_update, new_questions, template_file
from .package import ANSWERS_FILE, CONFLICT_MARKERS, Package, read_package
from .trust import is_own_template
from .versions import UpdateCheck, check_package, check_update, latest_tag, require_ref

__all__ = [
    "ANSWERS_FILE",
    "CONFLICT_MARKERS",
    "NewQuestion",
    "Package",
    "UpdateCheck",
    "UpdateResult",
    "asked_among",
    "asked_on_update",
    "check_package",
    "check_update",
    "find_conflicts",
    "is_own_template",
    "latest_tag",
    "new_questions",
    "prepare_update",
    "read_package",
    "require_clean_git",
    "require_ref",
    "run_update",
    "template_file",
    "unresolved_conflicts",
]


def __getattr__(name: str):
    # `run` imports copier: loaded on first use, so `ascend-scaffold --help` does not.
    if name in ("UpdateResult", "prepare_update", "run_update"):
        from . import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
