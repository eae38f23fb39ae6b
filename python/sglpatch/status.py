"""Which patches of the series a package has, read from its files' hashes."""

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from sglpatch.series import Series, sha256_file

APPLIED = "applied"
NOT_APPLIED = "not applied"
# Some of the patch's files have it and some do not (no file edited).
PARTLY_APPLIED = "partly applied"
# A file the patch touches is neither pristine nor a state the series
# produces: edited locally, or from another sglang build or series.
LOCALLY_EDITED = "locally edited"


@dataclass
class PatchStatus:
    name: str
    status: str  # APPLIED / NOT_APPLIED / PARTLY_APPLIED / LOCALLY_EDITED
    files: List[str]
    locally_edited: List[str]
    # In the patch, but outside python/sglang/: not part of a package.
    not_installed: List[str]


def current_hashes(root: Path, series: Series) -> Dict[str, Optional[str]]:
    return {rel: sha256_file(root / rel) for rel in series.touched_files()}


def patch_statuses(series: Series, hashes: Dict[str, Optional[str]]) -> List[PatchStatus]:
    """A patch is applied when each file it touches is at or past its result.

    Each touched file has a chain of contents: pristine, then the result of
    every patch that touches it, in series order. Where the file's current
    content sits in its chain says which of those patches it has.
    """
    chains: Dict[str, List[Optional[str]]] = {}
    for patch in series.patches:
        for change in patch.changes:
            chains.setdefault(change.path, [change.before]).append(change.after)

    seen_per_file: Dict[str, int] = {}
    statuses = []
    for patch in series.patches:
        file_states, edited = [], []
        for change in patch.changes:
            chain = chains[change.path]
            step = seen_per_file.get(change.path, 0) + 1  # this patch's result index
            seen_per_file[change.path] = step
            current = hashes[change.path]
            positions = [i for i, h in enumerate(chain) if h == current]
            if not positions:
                edited.append(change.path)
                file_states.append(LOCALLY_EDITED)
            elif max(positions) >= step:
                file_states.append(APPLIED)
            else:
                file_states.append(NOT_APPLIED)
        if edited:
            status = LOCALLY_EDITED
        elif all(s == APPLIED for s in file_states):
            status = APPLIED
        elif all(s == NOT_APPLIED for s in file_states):
            status = NOT_APPLIED
        else:
            status = PARTLY_APPLIED
        statuses.append(
            PatchStatus(patch.name, status, patch.files, edited, patch.not_installed)
        )
    _settle_packageless(statuses)
    return statuses


def _settle_packageless(statuses: List[PatchStatus]) -> None:
    """A patch that changes nothing in the package (only upstream's tests) is
    as applied as the patch before it (the first: as the one after it), so
    it never breaks the applied prefix."""
    known = [s.status for s in statuses if s.files]
    previous = known[0] if known else NOT_APPLIED
    for st in statuses:
        if st.files:
            previous = st.status
        else:
            st.status = APPLIED if previous == APPLIED else NOT_APPLIED
