"""Patch A: the ModelWorkerBatch indirection is gone.

Source-level check over the imported sglang package: neither the class nor
ScheduleBatch.get_model_worker_batch is named anywhere (code, comments or
docstrings), so no consumer can silently keep the old copy-then-forward path.
"""

import pathlib
import re
import unittest

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")

import sglang  # noqa: E402

PATTERN = re.compile(r"ModelWorkerBatch|get_model_worker_batch")
PACKAGE_DIR = pathlib.Path(sglang.__file__).parent


class TestNoModelWorkerBatch(CustomTestCase):
    def test_no_reference_left_in_package(self):
        hits = []
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            for lineno, line in enumerate(text.splitlines(), 1):
                if PATTERN.search(line):
                    rel = path.relative_to(PACKAGE_DIR)
                    hits.append(f"{rel}:{lineno}: {line.strip()}")
        self.assertEqual(hits, [], "\n".join(hits))

    def test_schedule_batch_has_no_conversion(self):
        from sglang.test.test_utils import maybe_stub_sgl_kernel

        maybe_stub_sgl_kernel()
        from sglang.srt.managers import schedule_batch

        self.assertFalse(hasattr(schedule_batch, "ModelWorkerBatch"))
        self.assertFalse(
            hasattr(schedule_batch.ScheduleBatch, "get_model_worker_batch")
        )


if __name__ == "__main__":
    unittest.main()
