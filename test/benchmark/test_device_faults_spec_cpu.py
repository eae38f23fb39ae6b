"""benchmark/device_faults.sh and benchmark/device_spec.sh on CPU, with a
stand-in python3 and nvidia-smi: which shape or backend runs on which GPUs,
in which order, with which options."""

import pytest
from device_stub import opt, run_script


def device(tmp_path, script, gpus, args=(), **env):
    res, runs = run_script(tmp_path, script, gpus, args, **env)
    return res, [(g, a) for g, a in runs if a[0] == "benchmark/e2e.py"]


def shape_of(args):
    return "disagg" if "--disaggregation-decode" in args else f"tp{opt(args, '--tp')}" \
        if "--tp" in args else "tp1"


def test_faults_on_two_gpus_run_the_one_gpu_shapes_first(tmp_path):
    res, runs = device(tmp_path, "device_faults.sh", 2, ["--speculative", "EAGLE3"])
    assert res.returncode == 0, res.stdout + res.stderr
    got = sorted((shape_of(a), g) for g, a in runs)
    assert got == [("disagg", "1"), ("tp1", "0"), ("tp2", "0,1")]
    tp2 = next(a for g, a in runs if g == "0,1")
    firsts = [a for g, a in runs if g != "0,1"]
    # the first wave leaves the second at least as much time as it takes
    assert all(int(opt(a, "--deadline-s")) <= 240 for a in firsts)
    assert int(opt(tp2, "--deadline-s")) > 240
    assert runs[-1][0] == "0,1"  # after the first wave
    for _, a in runs:
        assert "--faults" in a and opt(a, "--max-total-tokens") == "6000"
        assert opt(a, "--speculative") == "EAGLE3"


def test_faults_on_four_gpus_run_every_shape_at_once(tmp_path):
    res, runs = device(tmp_path, "device_faults.sh", 4)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted((shape_of(a), g) for g, a in runs) == [
        ("disagg", "1"), ("tp1", "0"), ("tp2", "2,3")]


@pytest.mark.parametrize("gpus, shape, devices", [(2, "tp2", "0,1"), (1, "disagg", "0")])
def test_faults_give_one_shape_asked_for_the_whole_call(tmp_path, gpus, shape, devices):
    res, runs = device(tmp_path, "device_faults.sh", gpus, SHAPES=shape)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(shape_of(a), g) for g, a in runs] == [(shape, devices)]
    assert int(opt(runs[0][1], "--deadline-s")) > 400


def test_faults_refuse_an_unknown_shape(tmp_path):
    res, runs = device(tmp_path, "device_faults.sh", 2, SHAPES="tp1,tp3")
    assert res.returncode == 2 and runs == []


def test_spec_compares_the_explicit_tree_then_checks_the_auto_launch(tmp_path):
    res, runs = device(tmp_path, "device_spec.sh", 2, ["--concurrency", "1,8"])
    assert res.returncode == 0, res.stdout + res.stderr
    by_gpu = {}
    for g, a in runs:
        by_gpu.setdefault(g, []).append(a)
    assert sorted(by_gpu) == ["0", "1"]
    for g, be, cmp in (("0", "triton", "triton"), ("1", "default", "fa3")):
        compare, auto = by_gpu[g]
        assert (opt(compare, "--attention-backend"), opt(auto, "--attention-backend")) == (cmp, be)
        assert [x.split("=")[0] for x in compare if x.startswith(("base=", "patched="))] \
            == ["base", "patched"]
        assert (opt(compare, "--spec-steps"), opt(compare, "--spec-topk"),
                opt(compare, "--spec-draft-tokens")) == ("5", "4", "8")
        assert "--side-by-side" in compare and opt(compare, "--concurrency") == "1,8"
        # the auto launch: the patched build, the same model pair, no tree given
        assert [x.split("=")[0] for x in auto if x.startswith(("base=", "patched="))] \
            == ["patched"]
        assert "--spec-auto" in auto and opt(auto, "--spec-steps") == "5"
        assert "--spec-topk" not in auto and "--no-bench" in auto
        assert int(opt(compare, "--deadline-s")) < int(opt(auto, "--deadline-s"))


def test_spec_with_one_gpu_runs_the_backends_in_turn(tmp_path):
    res, runs = device(tmp_path, "device_spec.sh", 1)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(g, opt(a, "--attention-backend"), "--spec-auto" in a) for g, a in runs] == [
        ("0", "triton", False), ("0", "triton", True),
        ("0", "fa3", False), ("0", "default", True)]
    # the first backend leaves the second about half the call
    assert int(opt(runs[1][1], "--deadline-s")) < 300


def test_spec_without_the_auto_check_gives_the_comparison_the_time(tmp_path):
    res, runs = device(tmp_path, "device_spec.sh", 1, BACKENDS="default", AUTO="0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert [("--spec-auto" in a, opt(a, "--attention-backend")) for _, a in runs] == [
        (False, "fa3")]
    assert int(opt(runs[0][1], "--deadline-s")) > 440


def test_spec_auto_check_keeps_its_server_logs_apart(tmp_path):
    res, runs = device(tmp_path, "device_spec.sh", 2)
    assert res.returncode == 0, res.stdout + res.stderr
    compare, auto = [a for g, a in runs if g == "0"]
    assert opt(auto, "--work-dir") != opt(compare, "--work-dir")


def test_two_scripts_at_once_take_ports_apart(tmp_path):
    ports = {}
    for script, gpus, env in (("device_modes.sh", 8, {"ADDON": ""}),
                              ("device_faults.sh", 4, {}), ("device_spec.sh", 2, {})):
        d = tmp_path / script
        d.mkdir()
        res, runs = run_script(d, script, gpus, addon=True, **env)
        assert res.returncode == 0, res.stdout + res.stderr
        ports[script] = {int(opt(a, "--port-base")) for _, a in runs}
    # each server takes its port and a few above it (DP attention: + 238)
    spans = sorted((min(p), max(p) + 1000) for p in ports.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_faults_put_each_trial_patch_beside_base_and_patched(tmp_path):
    site = tmp_path / "sc-pd-decode-grammar-sync"
    site.mkdir()
    (site / ".candidate-applied").write_text("")  # made by an earlier call
    res, runs = device(tmp_path, "device_faults.sh", 2,
                       CANDIDATES="pd-decode-grammar-sync", SHAPES="disagg")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(runs) == 1
    _, args = runs[0]
    variants = [args[i + 1] for i, a in enumerate(args) if a == "--variant"]
    assert variants == [f"base={tmp_path}/sb", f"patched={tmp_path}/sp",
                        f"candidate-pd-decode-grammar-sync={site}"]
    assert args.count("--no-apply") == 2 and "--disaggregation-decode" in args


def test_faults_refuse_a_missing_trial_patch_before_installing(tmp_path):
    res, runs = device(tmp_path, "device_faults.sh", 2, CANDIDATES="no-such-trial")
    assert res.returncode == 2 and runs == []
    assert "no-such-trial.patch" in res.stdout + res.stderr


def test_faults_on_one_gpu_run_the_one_gpu_shapes_in_turn(tmp_path):
    res, runs = device(tmp_path, "device_faults.sh", 1, ["--speculative", "EAGLE3"])
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(shape_of(a), g) for g, a in runs] == [("tp1", "0"), ("disagg", "0")]
    tp1, disagg = (a for _, a in runs)
    # the first leaves the second at least as much time as it takes
    assert int(opt(tp1, "--deadline-s")) <= 240 < int(opt(disagg, "--deadline-s"))
    assert opt(tp1, "--port-base") != opt(disagg, "--port-base")


def test_faults_on_one_gpu_refuse_tp2_before_installing(tmp_path):
    res, runs = device(tmp_path, "device_faults.sh", 1, SHAPES="tp1,tp2")
    assert res.returncode == 5 and runs == []
    assert not (tmp_path / "calls").exists()  # no pip install either
