"""Small real architectures from `transformers`, built from configs with seeded random weights.

Used by `opdiff demo`, the tests and the benchmarks: nothing is downloaded. Each builder returns
(model in eval mode, example inputs as a dict of keyword arguments). Needs torch and transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _seeded(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed + 1)


def gpt2(seed: int = 0, layers: int = 4, width: int = 64, heads: int = 4, seq: int = 16, batch: int = 2, vocab: int = 128):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    gen = _seeded(seed)
    cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, n_positions=max(seq, 32), vocab_size=vocab, bos_token_id=0, eos_token_id=0,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    return model, {"input_ids": ids}


def llama(seed: int = 0, layers: int = 4, width: int = 64, heads: int = 4, seq: int = 16, batch: int = 2, vocab: int = 128):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    gen = _seeded(seed)
    cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=width, intermediate_size=width * 2,
                      num_attention_heads=heads, num_key_value_heads=heads // 2, vocab_size=vocab,
                      max_position_embeddings=max(seq, 32))
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    return model, {"input_ids": ids}


def bert(seed: int = 0, layers: int = 4, width: int = 64, heads: int = 4, seq: int = 16, batch: int = 2, vocab: int = 128):
    import torch
    from transformers import BertConfig, BertModel

    gen = _seeded(seed)
    cfg = BertConfig(num_hidden_layers=layers, hidden_size=width, intermediate_size=width * 2,
                     num_attention_heads=heads, vocab_size=vocab, max_position_embeddings=max(seq, 32),
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def vit(seed: int = 0, layers: int = 4, width: int = 64, heads: int = 4, image: int = 32, patch: int = 8, batch: int = 2):
    import torch
    from transformers import ViTConfig, ViTModel

    gen = _seeded(seed)
    cfg = ViTConfig(num_hidden_layers=layers, hidden_size=width, intermediate_size=width * 2,
                    num_attention_heads=heads, image_size=image, patch_size=patch,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ViTModel(cfg, add_pooling_layer=False).eval()
    pixels = torch.randn(batch, 3, image, image, generator=gen)
    return model, {"pixel_values": pixels}


def t5(seed: int = 0, layers: int = 2, width: int = 64, heads: int = 4, seq: int = 12, batch: int = 2, vocab: int = 128):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    gen = _seeded(seed)
    cfg = T5Config(num_layers=layers, num_decoder_layers=layers, d_model=width, d_ff=width * 2, d_kv=width // heads,
                   num_heads=heads, vocab_size=vocab, dropout_rate=0.0,
                   decoder_start_token_id=0)  # type: ignore[call-arg]  # a PretrainedConfig keyword the stubs omit
    model = T5ForConditionalGeneration(cfg).eval()
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    labels = torch.randint(0, vocab, (batch, seq // 2), generator=gen)
    return model, {"input_ids": ids, "labels": labels}


def resnet(seed: int = 0, image: int = 32, batch: int = 2):
    import torch
    from transformers import ResNetConfig, ResNetModel

    gen = _seeded(seed)
    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], layer_type="basic")
    model = ResNetModel(cfg).eval()
    pixels = torch.randn(batch, 3, image, image, generator=gen)
    return model, {"pixel_values": pixels}


BUILDERS: dict[str, Callable[..., tuple[Any, dict[str, Any]]]] = {
    "gpt2": gpt2,
    "llama": llama,
    "bert": bert,
    "vit": vit,
    "t5": t5,
    "resnet": resnet,
}


def build(name: str, **kwargs):
    """(model, inputs) for one of BUILDERS, seeded so that two calls give identical models."""
    try:
        builder = BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(BUILDERS)}") from None
    return builder(**kwargs)
