"""The mode matrix (`docs/modes.md`, from `docs/modes.json`) checked against
the code: the page is rendered from the data, every mode has a cell for
every patch of the series, every cell's evidence exists (test ids resolved
with ast, nothing imported; results files hold a build with the patch), and
every gate or refusal the matrix names cites a test function.

Evidence written `TODO-...` stands for tests another change is adding; it
passes while it is in TODO_ALLOWED, never with SGLPATCH_MODES_STRICT=1."""

import copy
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import modes  # noqa: E402

STRICT = os.environ.get("SGLPATCH_MODES_STRICT") == "1"
# Evidence still to come that docs/modes.json may cite for now, such as
# "TODO-pull" (tests another change is writing); empty once none is left.
TODO_ALLOWED = ()

# The rows the drop-in requirement names.
REQUIRED_ROWS = (
    "tp-one-node", "tp-multi-node", "dp-attention", "pd-decode", "pd-prefill",
    "spec-v1", "spec-auto", "page-size", "sliding-window", "mla", "hybrid-linear",
    "fr-spec", "standalone", "mtp", "lora", "two-batch-overlap", "plan-stream",
    "mixed-chunk", "cuda-graph-off", "above-cuda-graph-max-bs", "rocm", "musa", "npu",
)

DATA = modes.load()
HERE = "test/modes/test_mode_matrix.py"


def series():
    with open(os.path.join(REPO, "python", "sglpatch", "patches", "series")) as fh:
        return [line.strip() for line in fh if line.strip() and not line.startswith("#")]


def test_page_is_current():
    with open(modes.PAGE, encoding="utf-8") as fh:
        assert fh.read() == modes.render(DATA), "regenerate: python scripts/modes.py render"


def test_the_columns_are_the_series():
    files = [p["file"] for p in DATA["patches"]]
    assert files == series()
    assert [p["id"] for p in DATA["patches"]] == [f[:4] for f in files]


def test_every_mode_has_a_cell_for_every_patch():
    for mode in DATA["modes"]:
        assert set(mode["cells"]) <= {p["id"] for p in DATA["patches"]}, mode["id"]
        for patch in DATA["patches"]:
            assert modes.cell(DATA, mode, patch)["status"] in modes.STATUSES


def test_the_required_rows_exist():
    assert set(REQUIRED_ROWS) <= {m["id"] for m in DATA["modes"]}


def test_every_cell_holds():
    """Evidence resolves, gates and refusals cite a test function and say
    why, active cells have evidence or say they have none."""
    assert modes.problems(DATA, todo_allowed=() if STRICT else TODO_ALLOWED) == []


# The checks find what they are meant to find.
def _with_cell(status, evidence, note="why", unproven=False, patch="0013"):
    data = copy.deepcopy(DATA)
    cell = {"status": status, "evidence": evidence, "note": note}
    if unproven:
        cell["unproven"] = True
    data["modes"][0]["cells"][patch] = cell
    return data


def _found(data, todo_allowed=("TODO-pull",)):
    return [line for line in modes.problems(data, todo_allowed=todo_allowed)
            if line.startswith(f"{data['modes'][0]['id']} x ")]


def test_a_resolvable_test_id_passes():
    assert _found(_with_cell("gated off", [f"{HERE}::test_page_is_current"])) == []
    unit = "test/registered/unit/managers/test_seq_lens_mirror.py"
    assert modes.test_id_problem(f"{unit}::TestDebugSwitch::test_env_var_defaults_off") is None


def test_missing_files_classes_and_functions_are_found():
    unit = "test/registered/unit/managers/test_seq_lens_mirror.py"
    for item, word in ((f"{HERE}::test_no_such_test", "no function"),
                       ("test/modes/no_such_file.py::test_x", "no such file"),
                       (f"{unit}::NoSuchClass::test_env_var_defaults_off", "no class"),
                       (f"{unit}::TestDebugSwitch::test_no_such", "no method"),
                       ("docs/modes.md", "not a test file")):
        found = _found(_with_cell("active", [item]))
        assert len(found) == 1 and word in found[0], (item, found)


def test_a_gate_or_refusal_must_cite_a_test_function():
    for status in ("gated off", "refused"):
        found = _found(_with_cell(status, [HERE]))
        assert any("cites no test function" in line for line in found), status
        assert _found(_with_cell(status, [f"{HERE}::test_page_is_current"], note="")) != []


def test_results_must_hold_a_build_with_the_patch():
    shipped = "benchmark/results/2026-11-27-h200-triton-shipped-series-nospec.json"
    assert _found(_with_cell("active", [shipped], patch="0012")) == []
    assert len(_found(_with_cell("active", [shipped], patch="0013"))) == 1
    assert len(_found(_with_cell("active", ["benchmark/results/no-such.json"]))) == 1


def test_active_without_evidence_must_say_so():
    assert len(_found(_with_cell("active", []))) == 1
    assert _found(_with_cell("active", [], unproven=True)) == []
    assert len(_found(_with_cell("gated off", [f"{HERE}::test_page_is_current"],
                                 unproven=True))) == 1


def test_todo_evidence_fails_only_when_strict():
    data = _with_cell("gated off", ["TODO-pull"])
    assert _found(data) == []
    assert any("TODO-pull" in line for line in _found(data, todo_allowed=()))
    assert len(_found(_with_cell("gated off", ["TODO-other"]))) == 2
