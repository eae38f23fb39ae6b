"""The options of `e2e.py run`, typed and with their defaults.

e2e.py's parser gives `run` no defaults of its own (argparse.SUPPRESS): an
option not on the command line is absent from the namespace and takes its
default here, so each default is written once. RunOptions.from_namespace
builds the object the run loop (run.py) reads; tests build it directly,
`RunOptions(tp=2, spec_auto=True)`, every other field at its default.
"""

from __future__ import annotations

import dataclasses
import os

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass(frozen=True)
class RunOptions:
    # builds and the model pair
    variant: tuple[str, ...] = ("base",)  # NAME or NAME=SITE, one per --variant
    no_apply: bool = False
    preset: str = "small"
    models_dir: str | None = None  # None: <work_dir>/models-<preset>
    accept_steps: int = 3
    draft_accuracy: float = 0.8
    model_device: str = "cuda"
    # the settings each build is served at
    attention_backend: tuple[str, ...] = ("triton",)
    overlap: tuple[bool, ...] = (True,)
    piecewise: tuple[bool, ...] = (True, False)
    speculative: tuple[str, ...] = ("none", "EAGLE3")
    nospec_piecewise: str = "first"  # "first" | "all"
    token_map: bool = False  # FR-Spec: the EAGLE servers get the draft's token map
    # bench_serving points
    concurrency: tuple[int, ...] = (1, 8, 32)
    repeats: int = 3
    min_seconds: float = 10.0
    input_len: int = 256
    output_len: int = 256
    seed: int = 1
    request_body: str | None = None  # a JSON object: bench_serving --extra-request-body
    bench_runner: str = "worker"  # "worker" | "process"
    one_client: bool = False  # every server timed by the first build's bench_serving
    no_bench: bool = False
    # the greedy check
    greedy_prompts: int = 64
    greedy_new_tokens: int = 64
    greedy_logprobs: int = 0
    # EAGLE3's parameters
    spec_steps: int = 3
    spec_topk: int = 1
    spec_draft_tokens: int | None = None  # None: spec_steps + 1
    spec_auto: bool = False
    # the deployment shape
    tp: int = 1
    dp: int = 1
    enable_dp_attention: bool = False
    disaggregation_decode: bool = False
    # the servers
    mem_fraction_static: float | None = None
    max_total_tokens: int | None = None
    side_by_side: bool = False
    start_together: bool = False
    keep_servers: bool = False
    pin_cpus: bool = False
    rotate_cpus: bool = False
    port_base: int = 30000
    server_arg: tuple[str, ...] = ()  # extra launch_server arguments
    # --faults
    faults: bool = False
    fault_clients: int = 64
    fault_grammar_clients: int = 0
    fault_idle_s: float = 20.0
    fault_new_tokens: int = 1024
    fault_deadline_s: float = 180.0
    fault_storms: int = 1
    # --mixed-load
    mixed_load: bool = False
    mix_decodes: int = 4
    mix_decode_tokens: int = 2048
    mix_prompts: int = 16
    mix_prompt_len: int = 1536
    mix_new_tokens: int = 16
    mix_deadline_s: float = 90.0
    # profiles
    profile_steps: int = 0
    profile_stack_steps: int = 0
    profile_concurrency: tuple[int, ...] = (1,)
    profile_arrivals: bool = False
    # where things go, and when to stop
    out_dir: str = os.path.join(HERE, "results")
    work_dir: str = "/tmp/sglpatch-bench"
    card: str | None = None  # None: the GPU name nvidia-smi gives
    deadline_s: float | None = None

    @classmethod
    def from_namespace(cls, ns):
        """The options of a parsed `run` command line (the namespace holds
        only the options given, and `cmd`); a list (a comma list, a
        repeated option) becomes a tuple."""
        given = {k: tuple(v) if isinstance(v, list) else v
                 for k, v in vars(ns).items() if k != "cmd"}
        return cls(**given)  # an option without a field here raises TypeError
