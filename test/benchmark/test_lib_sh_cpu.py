"""benchmark/lib.sh, the device scripts' shell library, on CPU: the kit
install refuses a kit of another sglang version, and a patched site is
made by the project's tool (`sglpatch apply [--through NNNN]`)."""

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(script, tmp_path, path_prefix=None):
    env = dict(os.environ, OUT=str(tmp_path / "out"))
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
        (tmp_path / site).mkdir()
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
    assert sorted(p.name for p in copy.iterdir()) == ["host_time.py", "sglang", "sitecustomize.py", "startup_stacks.py"]
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
