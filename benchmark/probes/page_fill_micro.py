"""Micro-benchmark: what fa3's page-table fill costs when it covers whole rows.

Without the host seq_lens mirror (patch 0009), FlashAttentionBackend fills
each row of its page table up to `max_context_len` (the model's context
length) instead of up to the batch's longest length. The fill is a gather
from `req_to_token` into the page-table buffer, once per plan: three draft
steps, the verify and the draft extend, five plans a decode step. This
script times that gather on the GPU, as graph replay does it (page size 1:
`page_table[:, :w].copy_(req_to_token[rows[:, None], cols[:w]])`), for a
tight width (what the host mirror would give) and for whole rows of common
context lengths, at several batch sizes. Needs a CUDA device:

    python3 page_fill_micro.py [--trials 50] [--out FILE.json]
    python3 page_fill_micro.py --render FILE.json   # FILE.md from its points

The times are CUDA-event medians around each fill, so a small fill shows the
launch floor (~60 us per fill on an H100), not its copy time; read the
growth with batch and width.
"""

import argparse
import json
import os
import statistics

BATCH_SIZES = (1, 8, 32, 128, 256)
# a tight fill for ~1k-token requests, then whole rows of common context lengths
WIDTHS = (1024, 8192, 32768, 131072)
PLANS_PER_STEP = 5


def time_fill(req_to_token, page_table, rows, cols, width, trials):
    """Median GPU time of one fill of `width` columns, in microseconds."""
    import torch

    def fill():
        page_table[:, :width].copy_(req_to_token[rows[:, None], cols[:width]])

    for _ in range(3):
        fill()
    times = []
    for _ in range(trials):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fill()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def measure(trials):
    import torch

    device = torch.device("cuda")
    pool_rows = max(BATCH_SIZES) + 1
    req_to_token = torch.randint(0, 1 << 20, (pool_rows, max(WIDTHS)),
                                 dtype=torch.int32, device=device)
    cols = torch.arange(max(WIDTHS), device=device)
    points = []
    for bs in BATCH_SIZES:
        page_table = torch.zeros(bs, max(WIDTHS), dtype=torch.int32, device=device)
        rows = torch.randperm(pool_rows - 1, device=device)[:bs] + 1
        for width in WIDTHS:
            us = time_fill(req_to_token, page_table, rows, cols, width, trials)
            points.append({"batch_size": bs, "width": width, "fill_us": round(us, 2),
                           "step_us": round(us * PLANS_PER_STEP, 2),
                           "bytes_moved": 2 * 4 * bs * width})
    return points


def table(result):
    """Markdown page of a result: fill time per decode step by batch and width."""
    points = result["points"]
    widths = sorted({p["width"] for p in points})
    batches = sorted({p["batch_size"] for p in points})
    lines = [f"Fill time of fa3's page table per decode step ({result['plans_per_step']} plans), "
             f"microseconds, on {result['card']} (median of {result['trials']} trials per fill; "
             "width: page-table columns filled per row).", "",
             "| batch | " + " | ".join(f"width {w}" for w in widths) + " |",
             "|---|" + "---|" * len(widths)]
    by_point = {(p["batch_size"], p["width"]): p["step_us"] for p in points}
    for bs in batches:
        lines.append(f"| {bs} | " + " | ".join(f"{by_point[(bs, w)]:.0f}" for w in widths) + " |")
    return "\n".join(lines) + "\n"


def render(path):
    """Write the Markdown page of a results JSON beside it (FILE.md)."""
    with open(path) as f:
        result = json.load(f)
    md = os.path.splitext(path)[0] + ".md"
    with open(md, "w") as f:
        f.write(table(result))
    return md


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--out", help="write the points as JSON here")
    ap.add_argument("--render", metavar="FILE.json",
                    help="no measurement: write FILE.md from a results JSON")
    a = ap.parse_args(argv)
    if a.render:
        print(render(a.render))
        return
    import torch  # only the measurement needs it

    if not torch.cuda.is_available():
        raise SystemExit("page_fill_micro: needs a CUDA device")
    result = {"card": torch.cuda.get_device_name(), "torch": torch.__version__,
              "plans_per_step": PLANS_PER_STEP, "trials": a.trials,
              "points": measure(a.trials)}
    print(table(result), end="")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
