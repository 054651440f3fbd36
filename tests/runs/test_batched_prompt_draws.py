"""The trace-of-covariance run samples a c1 batch's prompts in one sampler call (decode batches across prompts):
every prompt gets the continuations it gets when drawn alone."""

import json
import os

from grpo_mse.policy.logprobs import PromptSampler
from grpo_mse.policy.sampling import SamplingSettings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_prompts_drawn_together_get_their_own_continuations(builtin_policy):
    model, tokenizer = builtin_policy
    with open(os.path.join(ROOT, "data", "arithmetic_zero_shot.jsonl")) as f:
        rows = [json.loads(line) for line in f][:3]
    settings = SamplingSettings((tokenizer.eos_token_id,), tokenizer.pad_token_id, 3.0, 0.98, 12)
    sampler = PromptSampler(model, tokenizer, settings, gen_bs=8, seed=5)
    streams = [(4, 10 + i) for i in range(len(rows))]
    together = sampler.draw_all(list(zip(rows, streams)), 6)  # 18 rows in batches of 8: across prompts
    alone = [sampler.draw(row, stream, 6) for row, stream in zip(rows, streams)]
    assert together == alone
    assert len({len(ids) for ids, _, _ in together}) == 2  # prompts of two lengths share batches (left padding)
    assert len({len(c) for _, continuations, _ in together for c in continuations}) >= 3
