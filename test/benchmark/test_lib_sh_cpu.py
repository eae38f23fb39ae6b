"""benchmark/lib.sh, the device scripts' shell library, on CPU: the kit
install refuses a kit of another sglang version, and a patched site is
made by the project's tool (`sglpatch apply [--through NNNN]`)."""

import os
import subprocess
import tarfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(script, tmp_path, path_prefix=None):
    env = dict(os.environ, OUT_DIR=str(tmp_path / "out"))
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return subprocess.run(["bash", "-c", f". benchmark/lib.sh; budget_start 100; {script}"],
                          cwd=REPO, env=env, capture_output=True, text=True)


def recording_python3(tmp_path, line):
    """A folder holding a stand-in python3 that appends `line` (shell words,
    e.g. "$*") to tmp_path/calls instead of running anything."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text(f'#!/bin/bash\necho "{line}" >> {tmp_path}/calls\n')
    (stub / "python3").chmod(0o755)
    return stub


def test_kit_install_refuses_a_kit_of_another_version(tmp_path):
    (tmp_path / "kit" / "w").mkdir(parents=True)
    (tmp_path / "kit" / "w" / "sglang-0.5.13-py3-none-any.whl").write_text("")
    res = sh(f"kit_install {tmp_path}/kit {tmp_path}/site 0.5.12.post1", tmp_path)
    assert res.returncode == 1
    assert "needs sglang 0.5.12.post1, but" in res.stdout and "sglang-0.5.13" in res.stdout
    assert not (tmp_path / "site").exists()


def test_patched_site_copies_the_base_and_applies_through_the_tool(tmp_path):
    stub = recording_python3(tmp_path, "$PYTHONPATH $*")  # records instead of patching
    (tmp_path / "base" / "sglang").mkdir(parents=True)
    (tmp_path / "base" / "sglang" / "x.py").write_text("x = 1\n")
    res = sh(f"patched_site {tmp_path}/base {tmp_path}/sp 0002 && "
             f"patched_site {tmp_path}/base {tmp_path}/sp 0002 && "
             f"patched_site {tmp_path}/base {tmp_path}/full", tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [  # the second call reuses the site it made
        f"python -m sglpatch apply --through 0002 --sglang-dir {tmp_path}/sp/sglang",
        f"python -m sglpatch apply --sglang-dir {tmp_path}/full/sglang",
    ]
    assert (tmp_path / "sp" / "sglang" / "x.py").read_text() == "x = 1\n"
    assert "reuse" in res.stdout


def test_addon_install_goes_over_each_installed_site_once(tmp_path):
    stub = recording_python3(tmp_path, "$*")  # records instead of installing
    (tmp_path / "kitfa3" / "w").mkdir(parents=True)
    (tmp_path / "kitfa3" / "w" / "sglang_kernel-0.4.2.post2-cp310-abi3-x.whl").write_text("")
    for site in ("sb", "sp"):
        (tmp_path / site / "sglang_kernel-0.4.2.post2.dist-info").mkdir(parents=True)
    sites = f"{tmp_path}/sb {tmp_path}/sp {tmp_path}/su"  # su: not installed, skipped
    res = sh(f"addon_install {tmp_path}/kitfa3 {sites} && addon_install {tmp_path}/kitfa3 {sites}",
             tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split("--target ")[1].split()[0] for c in calls] == [
        f"{tmp_path}/sb", f"{tmp_path}/sp"]  # once each: the second pass reuses
    assert all("--upgrade" in c and c.endswith("sglang_kernel-0.4.2.post2-cp310-abi3-x.whl")
               for c in calls)
    assert (tmp_path / "sp" / ".addon-kitfa3").exists() and not (tmp_path / "su").exists()
    assert res.stdout.count("reuse kitfa3") == 2


def test_addon_install_refuses_an_empty_addon(tmp_path):
    (tmp_path / "empty" / "w").mkdir(parents=True)
    res = sh(f"addon_install {tmp_path}/empty {tmp_path}", tmp_path)
    assert res.returncode == 1 and "no wheels in" in res.stdout


def test_probe_site_is_a_linked_copy_with_the_probes_beside_it(tmp_path):
    (tmp_path / "site" / "sglang").mkdir(parents=True)
    (tmp_path / "site" / "sglang" / "x.py").write_text("x = 1\n")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "stale.py").write_text("")  # an earlier call's copy goes first
    res = sh(f"probe_site {tmp_path}/site {tmp_path}/copy", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    copy = tmp_path / "copy"
    assert sorted(p.name for p in copy.iterdir()) == [
        ".shared-from", "host_time.py", "sglang", "sitecustomize.py", "startup_stacks.py"]
    # the site's files are shared, not copied; the site itself gets no probe
    assert (copy / "sglang" / "x.py").stat().st_ino == (tmp_path / "site" / "sglang" / "x.py").stat().st_ino
    assert not (tmp_path / "site" / "sitecustomize.py").exists()


def test_probe_site_keeps_an_earlier_copy_only_while_it_matches(tmp_path):
    (tmp_path / "site" / "sglang").mkdir(parents=True)
    (tmp_path / "site" / ".kit-installed").write_text("")
    res = sh(f"probe_site {tmp_path}/site {tmp_path}/copy", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    mark = tmp_path / "copy" / "server-was-here"  # what a kept server left in its copy
    mark.write_text("")
    # a kept server runs from the copy: the next call leaves it as it is
    res = sh(f"probe_site {tmp_path}/site {tmp_path}/copy", tmp_path)
    assert res.returncode == 0 and "reuse" in res.stdout and mark.exists()
    # another probe file: made anew
    (tmp_path / "copy" / "host_time.py").write_text("# an older probe\n")
    res = sh(f"probe_site {tmp_path}/site {tmp_path}/copy", tmp_path)
    assert res.returncode == 0 and "reuse" not in res.stdout and not mark.exists()
    assert (tmp_path / "copy" / "host_time.py").read_text() == (
        open(os.path.join(REPO, "benchmark", "probes", "host_time.py")).read())
    mark.write_text("")
    # the site made anew (another marker file): made anew
    # (the new marker is made while the old one exists: another inode)
    (tmp_path / "site" / ".kit-installed.new").write_text("")
    os.replace(tmp_path / "site" / ".kit-installed.new", tmp_path / "site" / ".kit-installed")
    res = sh(f"probe_site {tmp_path}/site {tmp_path}/copy", tmp_path)
    assert res.returncode == 0 and "reuse" not in res.stdout and not mark.exists()


def fake_base_site(root):
    """A base site as kit_install leaves it: sglang with its JIT kernel
    sources, another package and its dist-info, the kit's marker."""
    (root / "sglang" / "jit_kernel" / "include").mkdir(parents=True)
    (root / "sglang" / "jit_kernel" / "include" / "k.h").write_text("// kernel\n")
    (root / "sglang" / "x.py").write_text("x = 1\n")
    (root / "flashinfer").mkdir()
    (root / "flashinfer" / "__init__.py").write_text("")
    (root / "flashinfer_python-0.6.11.post1.dist-info").mkdir()
    (root / "sglang-0.5.12.post1.dist-info").mkdir()
    (root / "sglang-0.5.12.post1.dist-info" / "RECORD").write_text("sglang/x.py,,\n")
    (root / ".kit-installed").write_text("")
    return root


def test_patched_site_shares_every_package_but_sglang_with_the_base(tmp_path):
    """The JIT compilers key their caches by resolved source paths: a patched
    site's flashinfer and sglang/jit_kernel resolve to the base's, its
    sglang (which the series changes) is its own."""
    stub = recording_python3(tmp_path, "$*")
    base = fake_base_site(tmp_path / "base")
    res = sh(f"patched_site {base} {tmp_path}/sp", tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    sp = tmp_path / "sp"
    for name in ("flashinfer", "flashinfer_python-0.6.11.post1.dist-info"):
        assert (sp / name).is_symlink() and (sp / name).resolve() == (base / name).resolve()
    assert (sp / "sglang" / "jit_kernel").resolve() == (base / "sglang" / "jit_kernel").resolve()
    assert not (sp / "sglang").is_symlink() and (sp / "sglang" / "x.py").read_text() == "x = 1\n"
    assert (sp / "sglang" / "x.py").stat().st_ino != (base / "sglang" / "x.py").stat().st_ino
    # sglpatch keeps pip's RECORD in sglang's dist-info true to the site's files
    record = sp / "sglang-0.5.12.post1.dist-info" / "RECORD"
    assert not record.parent.is_symlink() and record.read_text() == "sglang/x.py,,\n"
    # a probe copy of either site resolves to the same files
    res = sh(f"probe_site {base} {tmp_path}/sb-probe && probe_site {sp} {tmp_path}/sp-probe",
             tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    for copy in ("sb-probe", "sp-probe"):
        for rel in ("flashinfer", "sglang/jit_kernel"):
            assert (tmp_path / copy / rel).resolve() == (base / rel).resolve(), (copy, rel)
    assert (tmp_path / "sp-probe" / "sglang" / "x.py").stat().st_ino == (sp / "sglang" / "x.py").stat().st_ino


def test_patched_site_keeps_jit_kernel_sources_the_series_changed(tmp_path):
    # a stand-in for the tool that changes a JIT kernel header of the site
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text(
        '#!/bin/bash\nfor a; do d=$a; done\necho "// patched" >> "$d/jit_kernel/include/k.h"\n')
    (stub / "python3").chmod(0o755)
    base = fake_base_site(tmp_path / "base")
    res = sh(f"patched_site {base} {tmp_path}/sp", tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    jit = tmp_path / "sp" / "sglang" / "jit_kernel"
    assert not jit.is_symlink() and (jit / "include" / "k.h").read_text() == "// kernel\n// patched\n"
    assert (base / "sglang" / "jit_kernel" / "include" / "k.h").read_text() == "// kernel\n"


def test_addon_install_skips_a_site_whose_package_has_another_version(tmp_path):
    """Each sglang pins its own sgl-kernel: the 0.5.12.post1 add-on must not
    downgrade upstream 0.5.13's site (nor a site lacking the package)."""
    stub = recording_python3(tmp_path, "$*")
    (tmp_path / "kitfa3" / "w").mkdir(parents=True)
    (tmp_path / "kitfa3" / "w" / "sglang_kernel-0.4.2.post2-cp310-abi3-x.whl").write_text("")
    (tmp_path / "sb" / "sglang_kernel-0.4.2.post2.dist-info").mkdir(parents=True)
    (tmp_path / "su" / "sglang_kernel-0.4.3.dist-info").mkdir(parents=True)
    (tmp_path / "bare").mkdir()
    res = sh(f"addon_install {tmp_path}/kitfa3 {tmp_path}/sb {tmp_path}/su {tmp_path}/bare",
             tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split("--target ")[1].split()[0] for c in calls] == [f"{tmp_path}/sb"]
    assert f"skip kitfa3 for {tmp_path}/su: sglang_kernel 0.4.3 there, 0.4.2.post2 in the add-on" in res.stdout
    assert f"skip kitfa3 for {tmp_path}/bare: sglang_kernel missing there" in res.stdout
    assert not (tmp_path / "su" / ".addon-kitfa3").exists()


def test_addon_install_links_again_what_pip_replaced_in_a_shared_site(tmp_path):
    """An add-on upgrades the base; where pip replaced a shared site's link
    by a copy of its own, the link to the base's package is made anew (the
    JIT caches key by resolved paths)."""
    base = fake_base_site(tmp_path / "base")
    res = sh(f"patched_site {base} {tmp_path}/sp", tmp_path, recording_python3(tmp_path, "$*"))
    assert res.returncode == 0, res.stdout + res.stderr
    sp = tmp_path / "sp"
    # a stand-in pip that, in the shared site, writes the package as a folder of its own
    stub = tmp_path / "pipbin"
    stub.mkdir()
    (stub / "python3").write_text(
        f'#!/bin/bash\ncase "$*" in *"--target {sp} "*)\n'
        f'  rm -f {sp}/flashinfer && mkdir {sp}/flashinfer ;;\nesac\n')
    (stub / "python3").chmod(0o755)
    (tmp_path / "addon" / "w").mkdir(parents=True)
    (tmp_path / "addon" / "w" / "flashinfer_python-0.6.11.post1-py3-none-any.whl").write_text("")
    res = sh(f"addon_install {tmp_path}/addon {base} {sp}", tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (sp / ".addon-addon").exists()
    assert (sp / "flashinfer").is_symlink()
    assert (sp / "flashinfer").resolve() == (base / "flashinfer").resolve()


def test_side_by_side_kv_pool_follows_the_card_and_servers(tmp_path):
    # 80% of the card over K, less 7000 MiB, at 72 KiB a token, capped at 400k
    res = sh("side_by_side_kv 143771 3; side_by_side_kv 81559 3", tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["400000", "209763"]


def test_side_by_side_kv_takes_a_given_pool_below_the_rule_floor(tmp_path):
    # llama-8b-shape on an H200: 4 servers of 60k (or 20k) tokens each; the
    # 50k floor guards the computed pool only (it refused KV_TOKENS=20000)
    res = sh("side_by_side_kv 143771 4 60000; side_by_side_kv 143771 4 20000", tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["60000", "20000"]


def test_side_by_side_kv_refuses_a_full_card_and_a_bad_count(tmp_path):
    res = sh("side_by_side_kv 81559 8", tmp_path)  # 44871 tokens each
    assert res.returncode == 1 and res.stdout == ""
    assert "no room for 8 servers on 81559 MiB" in res.stderr
    res = sh("side_by_side_kv 81559 2 60k", tmp_path)
    assert res.returncode == 1 and res.stdout == ""
    assert "KV_TOKENS=60k is not a token count" in res.stderr


TRIAL = """\
diff --git a/python/sglang/x.py b/python/sglang/x.py
--- a/python/sglang/x.py
+++ b/python/sglang/x.py
@@ -1 +1 @@
-x = 1
+x = 2
diff --git a/test/registered/unit/test_x.py b/test/registered/unit/test_x.py
new file mode 100644
--- /dev/null
+++ b/test/registered/unit/test_x.py
@@ -0,0 +1 @@
+assert True
"""


def test_candidate_site_is_the_series_then_the_trial_patch(tmp_path):
    stub = recording_python3(tmp_path, "$*")  # stands in for sglpatch apply
    (tmp_path / "base" / "sglang").mkdir(parents=True)
    (tmp_path / "base" / "sglang" / "x.py").write_text("x = 1\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "trial.patch").write_text(TRIAL)
    script = f"candidate_site {tmp_path}/base {tmp_path}/sc {tmp_path}/trial.patch"
    res = sh(f"{script} && {script}", tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "sc" / "sglang" / "x.py").read_text() == "x = 2\n"
    assert (tmp_path / "base" / "sglang" / "x.py").read_text() == "x = 1\n"
    assert not (tmp_path / "sc" / "test").exists()  # its tests stay out of the site
    # the series first, by the tool, once; the second call reuses the site
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"-m sglpatch apply --sglang-dir {tmp_path}/sc/sglang"]
    assert f"reuse {tmp_path}/sc" in res.stdout


def test_candidate_site_stacks_trial_patches_in_order(tmp_path):
    stub = recording_python3(tmp_path, "$*")
    (tmp_path / "base" / "sglang").mkdir(parents=True)
    (tmp_path / "base" / "sglang" / "x.py").write_text("x = 1\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "trial.patch").write_text(TRIAL)
    # the second applies only on top of the first
    (tmp_path / "next.patch").write_text(TRIAL.split("diff --git a/test")[0]
                                         .replace("-x = 1", "-x = 2").replace("+x = 2", "+x = 3"))
    res = sh(f"candidate_site {tmp_path}/base {tmp_path}/sc {tmp_path}/trial.patch "
             f"{tmp_path}/next.patch", tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "sc" / "sglang" / "x.py").read_text() == "x = 3\n"
    assert "series and trial.patch next.patch applied" in res.stdout
    # the other order does not apply, and says after which
    res = sh(f"candidate_site {tmp_path}/base {tmp_path}/sc2 {tmp_path}/next.patch "
             f"{tmp_path}/trial.patch", tmp_path, stub)
    assert res.returncode == 1
    assert "ERROR: next.patch does not apply on the series" in res.stdout
    assert not (tmp_path / "sc2" / ".candidate-applied").exists()
    res = sh(f"candidate_site {tmp_path}/base {tmp_path}/sc3 {tmp_path}/trial.patch "
             f"{tmp_path}/trial.patch", tmp_path, stub)
    assert res.returncode == 1
    assert "ERROR: trial.patch does not apply on the series and trial.patch" in res.stdout


def test_candidate_site_refuses_a_trial_patch_that_does_not_apply(tmp_path):
    stub = recording_python3(tmp_path, "$*")
    (tmp_path / "base" / "sglang").mkdir(parents=True)
    (tmp_path / "base" / "sglang" / "x.py").write_text("x = 3\n")  # not what it expects
    (tmp_path / "out").mkdir()
    (tmp_path / "trial.patch").write_text(TRIAL)
    res = sh(f"candidate_site {tmp_path}/base {tmp_path}/sc {tmp_path}/trial.patch",
             tmp_path, stub)
    assert res.returncode == 1
    assert "ERROR: trial.patch does not apply on the series" in res.stdout
    assert not (tmp_path / "sc" / ".candidate-applied").exists()


def _traces(tmp_path, names, size):
    """WORK/profiles with these trace files, each `size` random bytes (so
    gzip cannot shrink them)."""
    profiles = tmp_path / "work" / "profiles"
    profiles.mkdir(parents=True)
    for n in names:
        (profiles / n).write_bytes(os.urandom(size))
    (tmp_path / "out").mkdir()


def _packed(tgz, suffix=".gz", name=os.path.basename):
    """The names (by default the file names alone) of the archive's members
    ending in `suffix`, sorted; None where there is no archive."""
    if not tgz.exists():
        return None
    with tarfile.open(tgz) as tf:
        return sorted(name(n) for n in tf.getnames() if n.endswith(suffix))


GPU_TRACES = ["p-c1-gpu-rank0.trace.json.gz", "p-c1-gpu-rank1.trace.json.gz"]
STACK_TRACES = ["p-c1-stack-rank0.trace.json.gz", "p-c1-stack-rank1.trace.json.gz"]


def test_pack_profiles_keeps_every_trace_in_one_file_where_they_fit(tmp_path):
    _traces(tmp_path, GPU_TRACES + STACK_TRACES, 1000)
    res = sh(f"PROFILES_MAX_BYTES=100000 pack_profiles {tmp_path}/work", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _packed(tmp_path / "out" / "profiles.tgz") == sorted(GPU_TRACES + STACK_TRACES)
    assert not (tmp_path / "out" / "profiles-stack.tgz").exists()


def test_pack_profiles_sends_the_stack_traces_in_a_second_file(tmp_path):
    """All four traces exceed one file; two fit: GPU-only in profiles.tgz,
    the stack traces in profiles-stack.tgz."""
    _traces(tmp_path, GPU_TRACES + STACK_TRACES, 3000)
    res = sh(f"PROFILES_MAX_BYTES=8000 pack_profiles {tmp_path}/work", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _packed(tmp_path / "out" / "profiles.tgz") == GPU_TRACES
    assert _packed(tmp_path / "out" / "profiles-stack.tgz") == STACK_TRACES
    assert "the stack traces in profiles-stack.tgz" in res.stdout


def test_pack_profiles_falls_back_to_rank_0s_stack_trace_then_to_none(tmp_path):
    _traces(tmp_path, GPU_TRACES + STACK_TRACES, 5000)
    res = sh(f"PROFILES_MAX_BYTES=9000 pack_profiles {tmp_path}/work", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _packed(tmp_path / "out" / "profiles.tgz") == GPU_TRACES
    assert _packed(tmp_path / "out" / "profiles-stack.tgz") == ["p-c1-stack-rank0.trace.json.gz"]
    # with probe.tgz taking the last file back, no second file
    (tmp_path / "out" / "profiles-stack.tgz").unlink()
    (tmp_path / "out" / "probe.tgz").write_text("")
    res = sh(f"PROFILES_MAX_BYTES=9000 pack_profiles {tmp_path}/work", tmp_path)
    assert not (tmp_path / "out" / "profiles-stack.tgz").exists()
    assert "probe.tgz takes the last file back" in res.stdout
    # a single stack trace larger than a file: none goes back
    (tmp_path / "out" / "probe.tgz").unlink()
    res = sh(f"PROFILES_MAX_BYTES=4000 pack_profiles {tmp_path}/work", tmp_path)
    assert not (tmp_path / "out" / "profiles-stack.tgz").exists()
    assert "the stack traces do not fit one file" in res.stdout


def test_pack_profiles_takes_the_traces_of_every_pairs_copy(tmp_path):
    """PAIRS copies profile into WORK/pair<i>/profiles under the same trace
    names: both come back, each in its copy's folder, also when the stack
    traces go in the second file."""
    for copy in ("pair0", "pair1"):
        profiles = tmp_path / "work" / copy / "profiles"
        profiles.mkdir(parents=True)
        for n in GPU_TRACES + STACK_TRACES:
            (profiles / n).write_bytes(os.urandom(1000))
    (tmp_path / "out").mkdir()
    both = lambda names: sorted(f"{c}/profiles/{n}" for c in ("pair0", "pair1") for n in names)
    res = sh(f"PROFILES_MAX_BYTES=100000 pack_profiles {tmp_path}/work", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _packed(tmp_path / "out" / "profiles.tgz", name=str) == both(GPU_TRACES + STACK_TRACES)
    res = sh(f"PROFILES_MAX_BYTES=6000 pack_profiles {tmp_path}/work", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _packed(tmp_path / "out" / "profiles.tgz", name=str) == both(GPU_TRACES)
    assert _packed(tmp_path / "out" / "profiles-stack.tgz", name=str) == both(STACK_TRACES)


def _old_logs(tmp_path):
    """WORK as a warm machine keeps it: an earlier call's logs, at the top
    and in a run's copy, three hours old."""
    work = tmp_path / "work"
    (work / "old-variant").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    old = time.time() - 3 * 3600
    for log in (work / "server-base.log", work / "old-variant" / "server.log"):
        log.write_text("an earlier call\n")
        os.utime(log, (old, old))
    return work


def test_tar_logs_packs_only_the_logs_of_this_call(tmp_path):
    work = _old_logs(tmp_path)
    # logs this call writes after budget_start, at the top and one folder deep
    res = sh(f"echo ready > {work}/server-patched.log && mkdir {work}/pair0 && "
             f"echo rep > {work}/pair0/bench.log && tar_logs {work}", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _packed(tmp_path / "out" / "server-logs.tgz", ".log", str) == [
        "./pair0/bench.log", "./server-patched.log"]


def test_tar_logs_without_a_call_start_or_a_new_log(tmp_path):
    work = _old_logs(tmp_path)
    # no budget_start (no T0): every log, as before
    res = sh(f"unset T0; tar_logs {work}", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _packed(tmp_path / "out" / "server-logs.tgz", ".log", str) == [
        "./old-variant/server.log", "./server-base.log"]
    # no log of this call: no file back, and the caller goes on
    res = sh(f"tar_logs {work} && echo went-on", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no logs of this call" in res.stdout and "went-on" in res.stdout
    assert not (tmp_path / "out" / "server-logs.tgz").exists()


def _flashinfer_cache(work, version="0.6.11.post1", arch="90a", *modules):
    """WORK's kernel cache as a flashinfer server leaves it: per module, the
    build file, an object and the module NAME/NAME.so (content: its path)."""
    for name in modules:
        d = work / "jit-cache" / "flashinfer" / ".cache" / "flashinfer" / version / arch / "cached_ops" / name
        d.mkdir(parents=True, exist_ok=True)
        for f in (f"{name}.so", "build.ninja", f"{name}.cuda.o"):
            (d / f).write_text(str(d / f))


def _aot_members(parts):
    data = b"".join(p.read_bytes() for p in sorted(parts))
    import io
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        return sorted(m.name for m in t.getmembers() if m.isfile())


def test_flashinfer_aot_save_sends_each_compiled_module_once_in_parts(tmp_path):
    work = tmp_path / "work"
    _flashinfer_cache(work / "pair0", "0.6.11.post1", "90a", "norm", "batch_prefill_bf16")
    _flashinfer_cache(work / "pair1", "0.6.11.post1", "90a", "norm")  # the other copy's
    _flashinfer_cache(work, "0.6.3", "90a", "old_release")  # another flashinfer: not sent
    # a library a build dropped beside its module is not a module
    (work / "pair1" / "jit-cache" / "flashinfer" / ".cache" / "flashinfer" / "0.6.11.post1" / "90a"
     / "cached_ops" / "norm" / "libextra.so").write_text("x")
    res = sh(f"AOT_PART_BYTES=200 flashinfer_aot_save {work} 0.6.11.post1", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    parts = sorted((tmp_path / "out").glob("flashinfer-aot-0.6.11.post1-90a.tgz.*"))
    assert len(parts) >= 2 and all(p.stat().st_size <= 200 for p in parts)
    assert _aot_members(parts) == ["./batch_prefill_bf16/batch_prefill_bf16.so", "./norm/norm.so"]
    assert "2 module(s) for 90a" in res.stdout
    assert ("more than 4 parts" in res.stdout) == (len(parts) > 4)  # files back: 8 a call
    # nothing compiled: no file back, and the caller goes on
    res = sh(f"flashinfer_aot_save {tmp_path}/none 0.6.11.post1 && echo went-on", tmp_path)
    assert res.returncode == 0 and "went-on" in res.stdout and "no flashinfer" in res.stdout


def _aot_addon(tmp_path, version="0.6.11.post1", arch="90a"):
    work = tmp_path / f"w-{version}-{arch}"
    _flashinfer_cache(work, version, arch, "norm", "batch_prefill_bf16")
    res = sh(f"flashinfer_aot_save {work} {version}", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    addon = tmp_path / "kitfi"  # the parts that came back, as the add-on's folder
    addon.mkdir()
    for part in (tmp_path / "out").glob("flashinfer-aot-*"):
        part.rename(addon / part.name)
    return addon


def _flashinfer_site(site, version="0.6.11.post1", linked_to=None):
    site.mkdir(parents=True)
    (site / f"flashinfer_python-{version}.dist-info").mkdir()
    if linked_to:  # a derived site (share_site): flashinfer is the base site's
        (site / "flashinfer").symlink_to(linked_to / "flashinfer")
    else:
        (site / "flashinfer" / "jit").mkdir(parents=True)


def test_flashinfer_aot_addon_goes_where_flashinfer_loads_prebuilt_modules(tmp_path):
    addon = _aot_addon(tmp_path)
    sb, sp, su = tmp_path / "sb", tmp_path / "sp", tmp_path / "su"
    _flashinfer_site(sb)
    _flashinfer_site(sp, linked_to=sb)
    _flashinfer_site(su, "0.6.3")  # another release's flashinfer: its modules would not load
    sites = f"{sb} {sp} {su} {tmp_path}/sx"  # sx: not installed
    res = sh(f"addon_install {addon} {sites} && addon_install {addon} {sites}", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    # flashinfer's AOT folder: <package>/data/aot/NAME/NAME.so (jit/env.py, _get_aot_dir)
    aot = sb / "flashinfer" / "data" / "aot"
    assert sorted(p.relative_to(aot).as_posix() for p in aot.rglob("*.so")) == [
        "batch_prefill_bf16/batch_prefill_bf16.so", "norm/norm.so"]
    assert (aot / "norm" / "norm.so").read_text().endswith("cached_ops/norm/norm.so")
    assert res.stdout.count("installed 2 prebuilt flashinfer module(s)") == 1  # once a package
    assert res.stdout.count("reuse kitfi") == 3  # sp in the first pass, sb and sp in the second
    assert "skip kitfi for" in res.stdout and "flashinfer 0.6.3 there" in res.stdout
    assert not (su / "flashinfer" / "data").exists()


def test_flashinfer_aot_addon_skips_a_gpu_of_another_arch_and_mixed_sets(tmp_path):
    addon = _aot_addon(tmp_path)
    _flashinfer_site(tmp_path / "sb")
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "nvidia-smi").write_text("#!/bin/bash\necho 8.0\n")  # an A100
    (stub / "nvidia-smi").chmod(0o755)
    res = sh(f"addon_install {addon} {tmp_path}/sb", tmp_path, stub)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "skip kitfi: modules for 90a, the GPU is 80" in res.stdout
    assert not (tmp_path / "sb" / "flashinfer" / "data").exists()
    # parts of two module sets in one add-on: refused, nothing installed
    (addon / "flashinfer-aot-0.6.3-90a.tgz.00").write_bytes(b"")
    res = sh(f"addon_install {addon} {tmp_path}/sb", tmp_path)
    assert res.returncode == 1 and "more than one flashinfer or arch" in res.stdout
    assert not (tmp_path / "sb" / "flashinfer" / "data").exists()


def test_candidate_trials_names_each_trial_patch_in_order(tmp_path):
    (tmp_path / "out").mkdir()
    res = sh("candidate_trials flashinfer-draft-graph-kv-indices+pd-decode-grammar-sync",
             tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == [
        "benchmark/candidates/flashinfer-draft-graph-kv-indices.patch",
        "benchmark/candidates/pd-decode-grammar-sync.patch"]
    res = sh("candidate_trials pd-decode-grammar-sync+no-such-trial", tmp_path)
    assert res.returncode == 1
    assert "benchmark/candidates/no-such-trial.patch" in res.stderr
