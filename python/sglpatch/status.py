"""Which patches of the series a package has, read from its files' hashes."""

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from sglpatch.series import Series, sha256_file

APPLIED = "applied"
NOT_APPLIED = "not applied"
CONFLICTING = "conflicting"


@dataclass
class PatchStatus:
    name: str
    state: str  # APPLIED / NOT_APPLIED / CONFLICTING
    files: List[str]
    # Files whose content is neither a state the series produces nor the
    # pristine one: edited locally, or from another sglang build.
    foreign_files: List[str]


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
        file_states, foreign = [], []
        for change in patch.changes:
            chain = chains[change.path]
            step = seen_per_file.get(change.path, 0) + 1  # this patch's result index
            seen_per_file[change.path] = step
            current = hashes[change.path]
            positions = [i for i, h in enumerate(chain) if h == current]
            if not positions:
                foreign.append(change.path)
                file_states.append(CONFLICTING)
            elif max(positions) >= step:
                file_states.append(APPLIED)
            else:
                file_states.append(NOT_APPLIED)
        if all(s == APPLIED for s in file_states):
            state = APPLIED
        elif all(s == NOT_APPLIED for s in file_states):
            state = NOT_APPLIED
        else:
            state = CONFLICTING
        statuses.append(PatchStatus(patch.name, state, patch.files, foreign))
    return statuses
