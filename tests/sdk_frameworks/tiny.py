"""Tiny models and data built from configs, nothing downloaded: small enough to train on CPU in seconds."""

from __future__ import annotations

from typing import Any

from tests.sdk_frameworks.conftest import require

torch = require("torch")

VOCAB = 64
SEQ = 16


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    """Deterministic random token sequences, as causal-LM examples (labels are the inputs)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def gpt2() -> Any:
    transformers = require("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(config)


class TinyLM(torch.nn.Module):  # type: ignore[misc]
    """An embedding and a linear head: no normalisation, so a learning rate far too high overflows."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)

    def forward(self, ids: Any) -> Any:
        """The loss (DistributedDataParallel calls forward)."""
        return self.loss(ids)

    def loss(self, ids: Any) -> Any:
        logits = self.head(self.embed(ids[:, :-1]))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
