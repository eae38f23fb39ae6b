"""Patch D: which attention backends opt out of the host seq_lens mirror.

TritonAttnBackend and TritonMultiStepDraftBackend (not an AttentionBackend
subclass) declare needs_cpu_seq_lens = False; every other AttentionBackend
subclass keeps the base class's True. Walked from the source
(attention_backend_classes.py), so a new backend is covered.
"""

import unittest

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention.base_attn_backend import (  # noqa: E402
    AttentionBackend,
)
from sglang.srt.layers.attention.triton_backend import (  # noqa: E402
    TritonAttnBackend,
    TritonMultiStepDraftBackend,
)

from attention_backend_classes import (  # noqa: E402  (helper beside this file)
    attention_backend_classes_in_source,
    import_backend_class,
)

OPTED_OUT = {"TritonAttnBackend"}


class TestNeedsCpuSeqLensFlags(CustomTestCase):
    def test_base_default_is_true(self):
        self.assertIs(AttentionBackend.needs_cpu_seq_lens, True)

    def test_triton_pair_opts_out(self):
        self.assertIs(TritonAttnBackend.needs_cpu_seq_lens, False)
        self.assertFalse(issubclass(TritonMultiStepDraftBackend, AttentionBackend))
        self.assertIs(TritonMultiStepDraftBackend.needs_cpu_seq_lens, False)

    def test_every_other_backend_keeps_true(self):
        classes = attention_backend_classes_in_source()
        names = {name for _, name in classes}
        self.assertTrue(
            {"TritonAttnBackend", "FlashInferAttnBackend", "TRTLLMHAAttnBackend"}
            <= names
        )
        for module_name, class_name in classes:
            with self.subTest(backend=class_name):
                cls = import_backend_class(module_name, class_name)
                expected = class_name not in OPTED_OUT
                self.assertIs(cls.needs_cpu_seq_lens, expected, class_name)


if __name__ == "__main__":
    unittest.main()
