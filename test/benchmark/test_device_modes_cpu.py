"""benchmark/device_modes.sh on CPU, with a stand-in python3 and nvidia-smi:
which phase runs on which GPUs with which options, by the machine's size,
and the DP phase's refusal without the FA3 add-on."""

from device_stub import opt, run_script


def modes(tmp_path, gpus, addon=False, **env):
    return run_script(tmp_path, "device_modes.sh", gpus, addon=addon, **env)


def builds(args):
    return [a.split("=")[0] for a in args if a.startswith(("base=", "patched="))]


def test_four_gpus_run_both_phases_at_once_on_pairs_of_their_own(tmp_path):
    res, runs = modes(tmp_path, 4, addon=True)
    assert res.returncode == 0, res.stdout + res.stderr
    by_script = {args[0]: (gpus, args) for gpus, args in runs}
    assert set(by_script) == {"benchmark/e2e.py", "benchmark/kill_rank.py"}
    gpus, dp = by_script["benchmark/e2e.py"]
    assert gpus == "0,1"
    assert (opt(dp, "--preset"), opt(dp, "--tp"), opt(dp, "--dp")) == ("qwen3-small", "2", "2")
    assert "--enable-dp-attention" in dp and "--mixed-load" in dp
    assert "--side-by-side" not in dp  # one build after the other
    assert (opt(dp, "--speculative"), opt(dp, "--piecewise")) == ("EAGLE3", "disabled")
    assert opt(dp, "--attention-backend") == "default"
    assert opt(dp, "--concurrency") == "1,8" and opt(dp, "--repeats") == "1"
    assert [a for a in dp if a.startswith(("base=", "patched="))] == [
        f"base={tmp_path}/sb", f"patched={tmp_path}/sp"]
    gpus, kill = by_script["benchmark/kill_rank.py"]
    assert gpus == "2,3" and builds(kill) == ["base", "patched"]
    assert opt(kill, "--scenarios") == "idle,busy" and opt(kill, "--tp") == "2"
    assert opt(kill, "--cap-s") == "120"
    assert opt(kill, "--port-base") != opt(dp, "--port-base")
    assert "== summary" in res.stdout


def test_more_pairs_split_the_phases_by_build_and_scenario(tmp_path):
    res, runs = modes(tmp_path, 8, addon=True, KILL_CAP_S="60")
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = sorted((g, a[0].split("/")[1], tuple(builds(a)),
                   opt(a, "--scenarios") if "--scenarios" in a else None) for g, a in runs)
    assert jobs == [("0,1", "e2e.py", ("base",), None),
                    ("2,3", "e2e.py", ("patched",), None),
                    ("4,5", "kill_rank.py", ("base", "patched"), "idle"),
                    ("6,7", "kill_rank.py", ("base", "patched"), "busy")]
    assert len({opt(a, "--port-base") for _, a in runs}) == 4


def test_eight_gpus_kill_each_build_and_scenario_apart(tmp_path):
    res, runs = modes(tmp_path, 8, PHASES="kill")
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = sorted((g, tuple(builds(a)), opt(a, "--scenarios")) for g, a in runs)
    assert jobs == [("0,1", ("base",), "idle"), ("2,3", ("base",), "busy"),
                    ("4,5", ("patched",), "idle"), ("6,7", ("patched",), "busy")]


def test_six_gpus(tmp_path):
    res, runs = modes(tmp_path, 6, ATTN="triton")
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = sorted((g, a[0].split("/")[1], tuple(builds(a))) for g, a in runs)
    assert jobs == [("0,1", "e2e.py", ("base",)), ("2,3", "e2e.py", ("patched",)),
                    ("4,5", "kill_rank.py", ("base", "patched"))]
    assert all(opt(a, "--attention-backend") == "triton" for _, a in runs if "e2e" in a[0])


def test_the_dp_phase_side_by_side(tmp_path):
    res, runs = modes(tmp_path, 2, addon=True, PHASES="dp", DP_SIDE_BY_SIDE="1",
                      DP_KV_TOKENS="80000")
    assert res.returncode == 0, res.stdout + res.stderr
    ((gpus, dp),) = runs
    assert "--side-by-side" in dp and opt(dp, "--max-total-tokens") == "80000"
    assert "side by side" in res.stdout


def test_two_gpus_run_the_phases_in_turn(tmp_path):
    res, runs = modes(tmp_path, 2, addon=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(g, a[0]) for g, a in runs] == [("0,1", "benchmark/e2e.py"),
                                           ("0,1", "benchmark/kill_rank.py")]


def test_one_phase_alone(tmp_path):
    res, runs = modes(tmp_path, 2, PHASES="kill", KILL_SCENARIOS="busy")
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(g, a[0], opt(a, "--scenarios")) for g, a in runs] == [
        ("0,1", "benchmark/kill_rank.py", "busy")]


def test_the_dp_phase_refuses_the_default_backend_without_fa3(tmp_path):
    res, runs = modes(tmp_path, 4)  # no add-on in the base site
    assert res.returncode == 1
    assert "needs the FA3 add-on" in res.stdout
    assert [a[0] for _, a in runs] == ["benchmark/kill_rank.py"]  # the other phase ran


def test_bad_phases_and_small_machines_are_refused(tmp_path):
    res, runs = modes(tmp_path, 4, PHASES="dp,storm")
    assert res.returncode == 2 and "unknown phase storm" in res.stdout and not runs
    (tmp_path / "again").mkdir()
    res, runs = modes(tmp_path / "again", 1)
    assert res.returncode == 5 and "every phase needs 2" in res.stdout and not runs



def test_one_build_a_call(tmp_path):
    res, runs = modes(tmp_path, 4, addon=True, BUILDS="patched")
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = sorted((g, a[0].split("/")[1], tuple(builds(a)),
                   opt(a, "--scenarios") if "--scenarios" in a else None) for g, a in runs)
    assert jobs == [("0,1", "e2e.py", ("patched",), None),
                    ("2,3", "kill_rank.py", ("patched",), "idle,busy")]
    (tmp_path / "again").mkdir()
    res, runs = modes(tmp_path / "again", 4, BUILDS="base,upstream")
    assert res.returncode == 2 and "unknown build upstream" in res.stdout and not runs
