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


def test_kit_install_refuses_a_kit_of_another_version(tmp_path):
    (tmp_path / "kit" / "w").mkdir(parents=True)
    (tmp_path / "kit" / "w" / "sglang-0.5.13-py3-none-any.whl").write_text("")
    res = sh(f"kit_install {tmp_path}/kit {tmp_path}/site 0.5.12.post1", tmp_path)
    assert res.returncode == 1
    assert "needs sglang 0.5.12.post1, but" in res.stdout and "sglang-0.5.13" in res.stdout
    assert not (tmp_path / "site").exists()


def test_patched_site_copies_the_base_and_applies_through_the_tool(tmp_path):
    # a stand-in python3 that records its arguments instead of patching
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text(f'#!/bin/bash\necho "$PYTHONPATH $*" >> {tmp_path}/calls\n')
    (stub / "python3").chmod(0o755)
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
