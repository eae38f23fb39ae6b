"""sglang picks the EAGLE parameters before it chooses spec v1 or spec v2.

Launched with only a draft model (no --speculative-num-steps, topk or draft
tokens), an EAGLE server gets auto_choose_speculative_params' choice: 5 / 4 /
8 for a Llama target. Spec v2 serves topk 1 only, and server_args runs a
larger topk on spec v1 (the overlap schedule off); that rule must see the
chosen topk, not the unset one, or spec v2 runs a topk-4 tree it cannot
serve. ServerArgs is built on CPU from a local config.json.
"""

import json
import tempfile
import unittest

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")

from sglang.srt.server_args import prepare_server_args  # noqa: E402


def _model_dir(arch):
    path = tempfile.mkdtemp()
    with open(f"{path}/config.json", "w") as f:
        json.dump({"architectures": [arch], "model_type": "llama", "hidden_size": 256,
                   "intermediate_size": 512, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "num_hidden_layers": 2,
                   "vocab_size": 1000, "max_position_embeddings": 2048,
                   "torch_dtype": "bfloat16"}, f)
    return path


def _args(arch, *flags):
    path = _model_dir(arch)
    return prepare_server_args(
        ["--model-path", path, "--device", "cpu", "--attention-backend", "triton",
         "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", path,
         *flags])


class TestAutoSpeculativeParams(CustomTestCase):
    def test_llama_gets_topk_4_on_spec_v1(self):
        args = _args("LlamaForCausalLM")
        self.assertEqual(
            (args.speculative_num_steps, args.speculative_eagle_topk,
             args.speculative_num_draft_tokens), (5, 4, 8))
        self.assertTrue(args.disable_overlap_schedule)

    def test_other_models_keep_topk_1_on_spec_v2(self):
        args = _args("Qwen2ForCausalLM")
        self.assertEqual(args.speculative_eagle_topk, 1)
        self.assertFalse(args.disable_overlap_schedule)

    def test_given_parameters_are_kept(self):
        args = _args("LlamaForCausalLM", "--speculative-num-steps", "3",
                     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
        self.assertEqual(args.speculative_eagle_topk, 1)
        self.assertFalse(args.disable_overlap_schedule)


if __name__ == "__main__":
    unittest.main()
