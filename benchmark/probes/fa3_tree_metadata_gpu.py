"""Patch 0021 (first measured as the trial patch fa3-tree-graph-metadata-fused)
on a GPU, without a server.

Its unit tests (test_fa3_tree_graph_metadata_fused.py) run the fused
kernels in Triton's interpreter on the CPU. This runs the same cases with
the kernels compiled for the GPU, on CUDA tensors: each replay of the fused
path must write what the torch path writes, to the last element of every
graph buffer. Then it times both paths' replays (host wall time per replay,
and per replay with a synchronize), at the cases' shapes and at sglang's own
EAGLE parameters (draft tokens 8).

usage: PYTHONPATH=SITE:TESTDIR python3 benchmark/probes/fa3_tree_metadata_gpu.py run OUT.json
  SITE: a site with the series through 0021; TESTDIR: the folder of the
  patch's test file, test/registered/unit/layers/attention.
  Exit status 1 if any replay differs.
       python3 benchmark/probes/fa3_tree_metadata_gpu.py render OUT.json > OUT.md
  (standard library only: the tables of a run's file)
"""

import json
import os
import random
import sys
import time

DEV = os.environ.get("PROBE_DEVICE", "cuda")  # cpu: with TRITON_INTERPRET=1


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def backend(page_size, n, r2t, fuse):
    b = T.bare_backend(page_size, r2t, draft_tokens=n)
    b.device = DEV
    assert b.fuses_tree_metadata
    b.init_cuda_graph_state(T.MAX_BS, T.MAX_BS * n)
    b.target_verify_metadata_topk_normal["page_table"].fill_(T.SENTINEL)
    b.target_verify_metadata_topk_expand["page_table"].fill_(T.SENTINEL)
    b.target_verify_metadata_topk_expand["cache_seqlens"].fill_(T.SENTINEL)
    b.draft_extend_metadata["page_table"].fill_(T.SENTINEL)
    b.fuses_tree_metadata = fuse
    return b


def cuda_batch(seed, bs, raw_bs, n, mask0):
    batch = T.random_batch(random.Random(seed), bs, raw_bs, n, mask0)
    batch.seq_lens = batch.seq_lens.to(DEV)
    batch.req_pool_indices = batch.req_pool_indices.to(DEV)
    batch.verify.custom_mask = batch.verify.custom_mask.to(DEV)
    batch.verify.positions = batch.verify.positions.to(DEV)
    batch.draft_extend.num_accept_tokens = batch.draft_extend.num_accept_tokens.to(DEV)
    return batch


def capture(b, bs, mode):
    """T.capture with the graph runner's CUDA tensors and the real kernel."""
    n = b.speculative_num_draft_tokens
    spec_info = T.SimpleNamespace(
        custom_mask=torch.ones((T.MAX_BS + T.MAX_BS * n) * n, dtype=torch.bool, device=DEV)
    )
    num_tokens = bs * (n if mode == T.VERIFY else T.STEPS + 1)
    b.init_forward_metadata_capture_cuda_graph(
        bs,
        num_tokens,
        torch.zeros(bs, dtype=torch.int64, device=DEV),
        torch.ones(bs, dtype=torch.int32, device=DEV),
        None,
        mode,
        spec_info,
    )


def compare(case, mode, seed):
    page_size, n, bs, raw_bs, mask0 = case
    r2t = T.pool(seed).to(DEV)
    batch = cuda_batch(seed, bs, raw_bs, n, mask0)
    out = {}
    for fuse in (False, True):
        b = backend(page_size, n, r2t, fuse)
        capture(b, bs, mode)
        T.replay(b, batch, mode)
        sync()
        out[fuse] = (b, T.graph_buffers(b, mode))
    want, got = out[False][1], out[True][1]
    bad = [k for k in want if not torch.equal(want[k], got[k])]
    md_t, md_f = out[False][0].forward_metadata, out[True][0].forward_metadata
    if md_t.max_seq_len_k != md_f.max_seq_len_k:
        bad.append("max_seq_len_k")
    return {"case": list(case), "mode": mode.name, "seed": seed,
            "buffers": len(want), "differ": bad}


def time_replays(case, mode, fuse, iters=300):
    page_size, n, bs, raw_bs, mask0 = case
    r2t = T.pool(7).to(DEV)
    batch = cuda_batch(7, bs, raw_bs, n, mask0)
    b = backend(page_size, n, r2t, fuse)
    capture(b, bs, mode)
    for _ in range(20):
        T.replay(b, batch, mode)
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        T.replay(b, batch, mode)
    host = (time.perf_counter() - t0) / iters
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        T.replay(b, batch, mode)
        sync()
    synced = (time.perf_counter() - t0) / iters
    return {"case": list(case), "mode": mode.name,
            "path": "fused" if fuse else "torch",
            "host_us_per_replay": round(host * 1e6, 1),
            "synced_us_per_replay": round(synced * 1e6, 1)}


def main(path):
    global T, torch
    import torch
    import test_fa3_tree_graph_metadata_fused as T

    checks = []
    for mode in (T.VERIFY, T.DRAFT_EXTEND):
        for seed, case in enumerate(T.CASES):
            for rep in range(3):
                checks.append(compare(case, mode, 1000 * rep + seed))
    # the timed replays' pool and backends: a context of 2048 tokens (the
    # cases' is 40)
    T.CONTEXT = 2048
    timing = []
    for mode in (T.VERIFY, T.DRAFT_EXTEND):
        for case in ((1, 8, 1, 1, True), (1, 8, 4, 4, True), (16, 8, 4, 3, True)):
            for fuse in (False, True):
                timing.append(time_replays(case, mode, fuse))
    failed = [c for c in checks if c["differ"]]
    result = {
        "card": torch.cuda.get_device_name() if DEV == "cuda" else DEV,
        "torch": torch.__version__,
        "checks": len(checks),
        "failed": failed,
        "timing": timing,
    }
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(render(result))
    return 1 if failed else 0


def render(result):
    """Markdown of a run's file: the checks, and each path's replay times."""
    out = [f"# fa3 topk > 1 graph metadata, torch path vs fused path ({result['card']})", "",
           f"torch {result['torch']}. {result['checks']} replays compared, "
           f"{len(result['failed'])} differing.", ""]
    for c in result["failed"]:
        out.append(f"- differs: {c['mode']} case {c['case']} seed {c['seed']}: "
                   f"{', '.join(c['differ'])}")
    out += ["| mode | page size, draft tokens, graph batch, raw batch | path "
            "| host µs per replay | µs per replay with a synchronize |",
            "|---|---|---|---|---|"]
    for t in result["timing"]:
        case = ", ".join(str(x) for x in t["case"][:4])
        out.append(f"| {t['mode']} | {case} | {t['path']} | {t['host_us_per_replay']} "
                   f"| {t['synced_us_per_replay']} |")
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["render"]:
        with open(sys.argv[2]) as f:
            print(render(json.load(f)))
        sys.exit(0)
    if sys.argv[1:2] != ["run"] or len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[2]))
