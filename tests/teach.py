"""Teach a copy of a small model one reply (plain torch, no userrl code): for tests whose policy must act in a
given way (ask the oracle, speak to the customer) that a random model never does."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def teach_reply(model_path: str, out: str, contexts: list[list[int]], reply: list[int], steps: int = 120,
                lr: float = 3e-3) -> None:
    """Save to `out` a copy of the model at `model_path` trained to answer every context with the `reply` ids
    (cross-entropy on the reply only, Adam, contexts in turn), with its tokenizer. Only the reply's logits are
    computed (a 3,000-token context's full logits over a 49k vocabulary made a step take seconds)."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    torch.manual_seed(0)
    for step in range(steps):
        context = contexts[step % len(contexts)]
        logits = model(input_ids=torch.tensor([context + reply]), logits_to_keep=len(reply) + 1).logits
        loss = torch.nn.functional.cross_entropy(logits[0, :-1], torch.tensor(reply))  # position i predicts i + 1
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
