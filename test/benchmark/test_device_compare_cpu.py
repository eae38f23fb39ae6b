"""benchmark/device_compare.sh on CPU, with a stand-in python3 and nvidia-smi:
an upstream release (upstream-X.Y.Z) installs from a kit of its own version
into a site of its own, refuses a kit of another version, and runs beside
base and patched, whose sites an earlier call installed."""

from device_stub import opt, run_script


def kit(tmp_path, name, *wheels):
    (tmp_path / name / "w").mkdir(parents=True)
    for w in wheels:
        (tmp_path / name / "w" / w).write_text("")
    return tmp_path / name


def compare(tmp_path, kit_dir, variants, *args, **env):
    """One call: (completed process, harness runs, pip installs' --target sites)."""
    (tmp_path / "calls").unlink(missing_ok=True)
    res, runs = run_script(tmp_path, "device_compare.sh", 1, (variants, *args), kit=kit_dir,
                           **env)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    pips = [c.split()[c.split().index("--target") + 1] for c in calls if "|-m pip install " in c]
    return res, [a for _, a in runs if a[0] == "benchmark/e2e.py"], pips


def variants(args):
    return [args[i + 1] for i, a in enumerate(args) if a == "--variant"]


def test_an_upstream_release_installs_into_a_site_of_its_own_once(tmp_path):
    k17 = kit(tmp_path, "kit17", "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl",
              "xgrammar-0.2.1-cp312-cp312-x.whl")
    res, runs, pips = compare(tmp_path, k17, "upstream-0.5.17", "--concurrency", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert pips == [f"{tmp_path}/su-0.5.17"]
    assert (tmp_path / "su-0.5.17" / ".kit-installed").exists()
    assert not (tmp_path / "su").exists()  # 0.5.13's site is left alone
    ((run),) = runs
    assert variants(run) == [f"upstream-0.5.17={tmp_path}/su-0.5.17"]
    assert "--no-apply" not in run  # upstream is measured as released
    # a warm machine: the next call reuses the site
    res, runs, pips = compare(tmp_path, k17, "upstream-0.5.17", "--concurrency", "1")
    assert res.returncode == 0 and pips == [] and "reuse" in res.stdout
    assert variants(runs[0]) == [f"upstream-0.5.17={tmp_path}/su-0.5.17"]


def test_an_upstream_release_refuses_a_kit_of_another_version(tmp_path):
    k13 = kit(tmp_path, "kit13", "sglang-0.5.13-cp312-cp312-manylinux_2_34_x86_64.whl")
    res, runs, pips = compare(tmp_path, k13, "upstream-0.5.17")
    assert res.returncode == 3
    assert "needs sglang 0.5.17, but" in res.stdout and "sglang-0.5.13" in res.stdout
    assert not runs and not pips and not (tmp_path / "su-0.5.17").exists()
    # nor does 0.5.17's kit fill 0.5.17.post1's site, whose name begins alike
    res, runs, pips = compare(tmp_path, kit(tmp_path, "kit17", "sglang-0.5.17-x.whl"),
                              "upstream-0.5.17.post1")
    assert res.returncode == 3 and not runs and not pips


def test_upstream_0_5_13_keeps_its_site(tmp_path):
    k13 = kit(tmp_path, "kit13", "sglang-0.5.13-cp312-cp312-manylinux_2_34_x86_64.whl")
    res, runs, pips = compare(tmp_path, k13, "upstream-0.5.13")
    assert res.returncode == 0, res.stdout + res.stderr
    assert pips == [f"{tmp_path}/su"]
    assert variants(runs[0]) == [f"upstream-0.5.13={tmp_path}/su"]


def test_a_malformed_upstream_name_is_refused(tmp_path):
    k17 = kit(tmp_path, "kit17", "sglang-0.5.17-x.whl")
    for name in ("upstream-latest", "upstream-0.5", "upstream-0.5.17rc1"):
        res, runs, pips = compare(tmp_path, k17, name)
        assert res.returncode == 2 and "unknown variant" in res.stderr, name
        assert not runs and not pips


def test_upstream_beside_base_and_patched_with_its_own_fa3_addon(tmp_path):
    """The last of the calls before a side-by-side of base, patched and
    upstream 0.5.17 with the default backend: base and patched came with
    .kit and .kitfa3 in earlier calls, this call carries .kit17 and then
    .kitfa3-17, which goes only into the site whose sglang-kernel it is."""
    k17 = kit(tmp_path, "kit17", "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl")
    res, runs, pips = compare(tmp_path, k17, "base,patched,upstream-0.5.17", INSTALL_ONLY="1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert pips == [f"{tmp_path}/su-0.5.17"] and not runs  # base and patched are reused
    for site, version in (("sb", "0.4.2.post2"), ("su-0.5.17", "0.4.5")):
        (tmp_path / site / f"sglang_kernel-{version}.dist-info").mkdir()
    fa3 = kit(tmp_path, ".kitfa3-17", "sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl")
    res, runs, pips = compare(tmp_path, k17, "base,patched,upstream-0.5.17", "--attention-backend",
                              "default", "--concurrency", "1,8,32", ADDON=str(fa3),
                              SIDE_BY_SIDE="3", KV_TOKENS="80000")
    assert res.returncode == 0, res.stdout + res.stderr
    assert pips == [f"{tmp_path}/su-0.5.17"]  # the add-on, over upstream's site alone
    assert (tmp_path / "su-0.5.17" / ".addon-.kitfa3-17").exists()
    assert "skip .kitfa3-17 for" in res.stdout and not (tmp_path / "sb" / ".addon-.kitfa3-17").exists()
    ((run),) = runs
    assert variants(run) == [f"base={tmp_path}/sb", f"patched={tmp_path}/sp",
                             f"upstream-0.5.17={tmp_path}/su-0.5.17"]
    assert opt(run, "--attention-backend") == "default" and "--side-by-side" in run
    assert opt(run, "--concurrency") == "1,8,32" and opt(run, "--max-total-tokens") == "80000"


def test_flashinfer_modules_one_call_compiled_spare_the_next_machine_its_compiles(tmp_path):
    """SAVE_FLASHINFER_AOT=1: the modules this machine's servers compiled (in
    each PAIRS copy's kernel cache) come back as the parts of an add-on; on
    the next machine ADDON=that add-on puts them where flashinfer loads a
    prebuilt module instead of compiling it."""
    k = kit(tmp_path, ".kit", "sglang-0.5.12.post1-cp312-cp312-manylinux_2_34_x86_64.whl")
    (tmp_path / "sb" / "flashinfer").mkdir(parents=True)
    (tmp_path / "sb" / "flashinfer_python-0.6.11.post1.dist-info").mkdir()
    for pair, name in (("pair0", "norm"), ("pair1", "norm"), ("pair1", "batch_prefill")):
        ops = (tmp_path / "work" / pair / "jit-cache" / "flashinfer" / ".cache" / "flashinfer"
               / "0.6.11.post1" / "90a" / "cached_ops" / name)
        ops.mkdir(parents=True, exist_ok=True)
        (ops / f"{name}.so").write_text(name)
    res, _, _ = compare(tmp_path, k, "base,patched", "--attention-backend", "default",
                           SAVE_FLASHINFER_AOT="1", SIDE_BY_SIDE="2", PAIRS="2",
                           KV_TOKENS="80000")
    assert res.returncode == 0, res.stdout + res.stderr
    parts = sorted((tmp_path / "out").glob("flashinfer-aot-0.6.11.post1-90a.tgz.*"))
    assert parts and "2 module(s) for 90a" in res.stdout
    # the next machine: a fresh base site, the parts as the add-on
    addon = tmp_path / ".kitfi"
    addon.mkdir()
    for p in parts:
        p.rename(addon / p.name)
    (tmp_path / "sb" / "flashinfer" / "data").mkdir()  # what the wheel brings
    res, runs, pips = compare(tmp_path, addon, "base,patched", ADDON=str(addon), INSTALL_ONLY="1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not pips and not runs  # no wheel installed, nothing run
    aot = tmp_path / "sb" / "flashinfer" / "data" / "aot"
    assert (aot / "norm" / "norm.so").read_text() == "norm"
    assert (aot / "batch_prefill" / "batch_prefill.so").read_text() == "batch_prefill"


def test_vary_runs_several_comparisons_at_once_through_pairs(tmp_path):
    """VARY="OPTS;OPTS": the PAIRS copies are shared out among that many
    comparisons (pairs.py --vary), each with the call's options and its own."""
    k = kit(tmp_path, ".kit", "sglang-0.5.12.post1-cp312-cp312-manylinux_2_34_x86_64.whl")
    vary = "--attention-backend triton;--attention-backend default"
    res, runs = run_script(tmp_path, "device_compare.sh", 4, ("base,patched", "--tp", "2"),
                           kit=k, VARY=vary, PAIRS="2", SIDE_BY_SIDE="2", KV_TOKENS="80000")
    assert res.returncode == 0, res.stdout + res.stderr
    ((_, run),) = [r for r in runs if r[1][0] == "benchmark/pairs.py"]
    cut = run.index("--")
    assert " ".join(run[:cut]) == ("benchmark/pairs.py --pairs 2 --vary=--attention-backend "
                                   "triton --vary=--attention-backend default")
    assert opt(run, "--tp") == "2" and "--side-by-side" in run[cut:]
    # without PAIRS there are no copies to share out: refused before any run
    (tmp_path / "calls").unlink()
    res, runs = run_script(tmp_path, "device_compare.sh", 4, ("base,patched",), kit=k,
                           VARY=vary, SIDE_BY_SIDE="2", KV_TOKENS="80000")
    assert res.returncode == 2 and "VARY needs PAIRS" in res.stdout
    assert not [r for r in runs if r[1][0] in ("benchmark/pairs.py", "benchmark/e2e.py")]


def test_a_trial_patch_stack_runs_from_its_site_and_a_missing_one_is_refused(tmp_path):
    name = "flashinfer-draft-graph-kv-indices+pd-decode-grammar-sync"
    (tmp_path / f"sc-{name}").mkdir()
    (tmp_path / f"sc-{name}" / ".candidate-applied").write_text("")  # an earlier call's
    res, runs, _ = compare(tmp_path, tmp_path / ".kit", f"candidate-{name}",
                           "--concurrency", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert variants(runs[0]) == [f"candidate-{name}={tmp_path}/sc-{name}"]
    res, runs, _ = compare(tmp_path, tmp_path / ".kit", "candidate-pd-decode-grammar-sync+nope",
                           "--concurrency", "1")
    assert res.returncode == 2 and runs == []
    assert "benchmark/candidates/nope.patch" in res.stderr


def test_base_again_is_a_second_server_of_base_site(tmp_path):
    """base-again: an A/A control, a second unpatched server from base's own
    site under its own name, in the place the call gives it."""
    k = kit(tmp_path, ".kit", "sglang-0.5.12.post1-cp312-cp312-manylinux_2_34_x86_64.whl")
    res, runs, pips = compare(tmp_path, k, "base,patched,base-again", "--concurrency", "1",
                              SIDE_BY_SIDE="3", KV_TOKENS="60000")
    assert res.returncode == 0, res.stdout + res.stderr
    assert pips == []  # no site of its own: base's, already there, serves both
    ((run),) = runs
    assert variants(run) == [f"base={tmp_path}/sb", f"patched={tmp_path}/sp",
                             f"base-again={tmp_path}/sb"]


def test_patched_again_is_a_second_server_of_the_patched_site(tmp_path):
    """patched-again: the series' A/A control, a second server from the
    patched site under its own name."""
    k = kit(tmp_path, ".kit", "sglang-0.5.12.post1-cp312-cp312-manylinux_2_34_x86_64.whl")
    res, runs, _ = compare(tmp_path, k, "base,patched,patched-again", "--concurrency", "1",
                           SIDE_BY_SIDE="3", KV_TOKENS="60000")
    assert res.returncode == 0, res.stdout + res.stderr
    ((run),) = runs
    assert variants(run) == [f"base={tmp_path}/sb", f"patched={tmp_path}/sp",
                             f"patched-again={tmp_path}/sp"]
