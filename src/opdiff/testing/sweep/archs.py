"""The sweep's architecture catalog: `transformers` models made small on a CPU from a config with seeded weights.

Each entry names the config and model classes, the config's size arguments and the kind of inputs it takes;
`build(name)` returns (model in eval mode, inputs) or raises `Unbuildable` with the reason (a class missing in
this transformers version, a config that refuses the small sizes). Nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEQ, BATCH, VOCAB, IMAGE = 12, 2, 128, 32

# the size arguments most configs take (hidden_size, layers, heads, ...)
_STD = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
            max_position_embeddings=64)
_GQA = dict(_STD, num_key_value_heads=2)
_MOE = dict(num_local_experts=4, num_experts_per_tok=2)
_BART = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB, max_position_embeddings=64,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
_VIT = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128, image_size=IMAGE,
            patch_size=8)
_AUDIO = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128,
              conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=4, vocab_size=32)


@dataclass(frozen=True)
class Arch:
    """One architecture: transformers class names, config size arguments, input kind and family."""

    name: str
    family: str  # decoder | encoder | encdec | vision | audio | ssm
    config: str
    model: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: str = "causal"  # causal | text | seq2seq | image | wave | whisper | clip


def _a(name: str, family: str, config: str, model: str, kwargs: dict[str, Any], inputs: str = "causal") -> Arch:
    return Arch(name, family, config, model, dict(kwargs), inputs)


ARCHS: dict[str, Arch] = {a.name: a for a in [
    # decoder LMs: dense, GQA, MoE, ALiBi, sliding window, parallel attention+MLP
    _a("gpt2", "decoder", "GPT2Config", "GPT2LMHeadModel", dict(n_layer=3, n_embd=64, n_head=4, n_positions=64, vocab_size=VOCAB)),
    _a("llama", "decoder", "LlamaConfig", "LlamaForCausalLM", _GQA),
    _a("mistral", "decoder", "MistralConfig", "MistralForCausalLM", dict(_GQA, sliding_window=4)),
    _a("qwen2", "decoder", "Qwen2Config", "Qwen2ForCausalLM", _GQA),
    _a("qwen3", "decoder", "Qwen3Config", "Qwen3ForCausalLM", dict(_GQA, head_dim=16)),
    _a("mixtral", "decoder", "MixtralConfig", "MixtralForCausalLM", dict(_GQA, **_MOE)),
    _a("qwen2_moe", "decoder", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
       dict(_GQA, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64)),
    _a("olmoe", "decoder", "OlmoeConfig", "OlmoeForCausalLM", dict(_GQA, num_experts=4, num_experts_per_tok=2)),
    _a("bloom", "decoder", "BloomConfig", "BloomForCausalLM", dict(hidden_size=64, n_layer=3, n_head=4, vocab_size=VOCAB)),
    _a("mpt", "decoder", "MptConfig", "MptForCausalLM", dict(d_model=64, n_layers=3, n_heads=4, vocab_size=VOCAB, max_seq_len=64)),
    _a("falcon", "decoder", "FalconConfig", "FalconForCausalLM",
       dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, vocab_size=VOCAB, parallel_attn=True, new_decoder_architecture=False)),
    _a("gptj", "decoder", "GPTJConfig", "GPTJForCausalLM", dict(n_embd=64, n_layer=3, n_head=4, rotary_dim=8, n_positions=64, vocab_size=VOCAB)),
    _a("gpt_neox", "decoder", "GPTNeoXConfig", "GPTNeoXForCausalLM", dict(_STD, use_parallel_residual=True)),
    _a("gpt_neo", "decoder", "GPTNeoConfig", "GPTNeoForCausalLM",
       dict(hidden_size=64, num_layers=3, num_heads=4, attention_types=[[["global", "local"], 1], [["global"], 1]],
            window_size=4, max_position_embeddings=64, vocab_size=VOCAB)),
    _a("codegen", "decoder", "CodeGenConfig", "CodeGenForCausalLM", dict(n_embd=64, n_layer=3, n_head=4, rotary_dim=8, n_positions=64, vocab_size=VOCAB)),
    _a("gpt_bigcode", "decoder", "GPTBigCodeConfig", "GPTBigCodeForCausalLM", dict(n_embd=64, n_layer=3, n_head=4, n_positions=64, vocab_size=VOCAB)),
    _a("phi", "decoder", "PhiConfig", "PhiForCausalLM", dict(_STD, partial_rotary_factor=0.5)),
    _a("phi3", "decoder", "Phi3Config", "Phi3ForCausalLM", dict(_GQA, pad_token_id=0)),
    _a("gemma", "decoder", "GemmaConfig", "GemmaForCausalLM", dict(_GQA, head_dim=16)),
    _a("gemma2", "decoder", "Gemma2Config", "Gemma2ForCausalLM", dict(_GQA, head_dim=16, sliding_window=4)),
    _a("opt", "decoder", "OPTConfig", "OPTForCausalLM",
       dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, ffn_dim=128, vocab_size=VOCAB, max_position_embeddings=64, word_embed_proj_dim=64)),
    _a("starcoder2", "decoder", "Starcoder2Config", "Starcoder2ForCausalLM", dict(_GQA, sliding_window=8)),
    _a("olmo", "decoder", "OlmoConfig", "OlmoForCausalLM", _STD),
    _a("olmo2", "decoder", "Olmo2Config", "Olmo2ForCausalLM", _STD),
    _a("stablelm", "decoder", "StableLmConfig", "StableLmForCausalLM", _GQA),
    _a("granite", "decoder", "GraniteConfig", "GraniteForCausalLM", _GQA),
    _a("cohere", "decoder", "CohereConfig", "CohereForCausalLM", _GQA),
    _a("persimmon", "decoder", "PersimmonConfig", "PersimmonForCausalLM", _STD),
    _a("biogpt", "decoder", "BioGptConfig", "BioGptForCausalLM", _STD),
    _a("xglm", "decoder", "XGLMConfig", "XGLMForCausalLM",
       dict(d_model=64, num_layers=3, attention_heads=4, ffn_dim=128, vocab_size=VOCAB, max_position_embeddings=64)),
    # encoders
    _a("bert", "encoder", "BertConfig", "BertModel", _STD, "text"),
    _a("roberta", "encoder", "RobertaConfig", "RobertaModel", dict(_STD, pad_token_id=1), "text"),
    _a("xlm_roberta", "encoder", "XLMRobertaConfig", "XLMRobertaModel", dict(_STD, pad_token_id=1), "text"),
    _a("deberta", "encoder", "DebertaConfig", "DebertaModel", _STD, "text"),
    _a("deberta_v2", "encoder", "DebertaV2Config", "DebertaV2Model", _STD, "text"),
    _a("electra", "encoder", "ElectraConfig", "ElectraModel", dict(_STD, embedding_size=32), "text"),
    _a("albert", "encoder", "AlbertConfig", "AlbertModel", dict(_STD, embedding_size=32, num_hidden_groups=1), "text"),
    _a("distilbert", "encoder", "DistilBertConfig", "DistilBertModel",
       dict(dim=64, n_layers=3, n_heads=4, hidden_dim=128, vocab_size=VOCAB, max_position_embeddings=64), "text"),
    _a("mpnet", "encoder", "MPNetConfig", "MPNetModel", _STD, "text"),
    _a("megatron_bert", "encoder", "MegatronBertConfig", "MegatronBertModel", _STD, "text"),
    _a("convbert", "encoder", "ConvBertConfig", "ConvBertModel", dict(_STD, embedding_size=64), "text"),
    _a("modernbert", "encoder", "ModernBertConfig", "ModernBertModel", dict(_STD, pad_token_id=0), "text"),
    # encoder-decoders
    _a("t5", "encdec", "T5Config", "T5ForConditionalGeneration",
       dict(num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128, d_kv=16, num_heads=4, vocab_size=VOCAB, decoder_start_token_id=0), "seq2seq"),
    _a("bart", "encdec", "BartConfig", "BartForConditionalGeneration", _BART, "seq2seq"),
    _a("mbart", "encdec", "MBartConfig", "MBartForConditionalGeneration", _BART, "seq2seq"),
    _a("marian", "encdec", "MarianConfig", "MarianMTModel", dict(_BART, pad_token_id=VOCAB - 1), "seq2seq"),
    _a("pegasus", "encdec", "PegasusConfig", "PegasusForConditionalGeneration", _BART, "seq2seq"),
    _a("m2m_100", "encdec", "M2M100Config", "M2M100ForConditionalGeneration", _BART, "seq2seq"),
    # vision
    _a("vit", "vision", "ViTConfig", "ViTModel", _VIT, "image"),
    _a("deit", "vision", "DeiTConfig", "DeiTModel", _VIT, "image"),
    _a("beit", "vision", "BeitConfig", "BeitModel", dict(_VIT, vocab_size=64), "image"),
    _a("dinov2", "vision", "Dinov2Config", "Dinov2Model", dict(_VIT, mlp_ratio=2), "image"),
    _a("swin", "vision", "SwinConfig", "SwinModel", dict(image_size=IMAGE, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4), "image"),
    _a("convnext", "vision", "ConvNextConfig", "ConvNextModel", dict(hidden_sizes=[16, 32], depths=[2, 2], num_stages=2, image_size=IMAGE), "image"),
    _a("convnextv2", "vision", "ConvNextV2Config", "ConvNextV2Model", dict(hidden_sizes=[16, 32], depths=[2, 2], num_stages=2, image_size=IMAGE), "image"),
    _a("resnet", "vision", "ResNetConfig", "ResNetModel", dict(embedding_size=16, hidden_sizes=[16, 32], depths=[2, 2], layer_type="basic"), "image"),
    _a("regnet", "vision", "RegNetConfig", "RegNetModel", dict(embedding_size=16, hidden_sizes=[16, 32], depths=[2, 2], groups_width=8), "image"),
    _a("clip_vision", "vision", "CLIPVisionConfig", "CLIPVisionModel", _VIT, "image"),
    _a("siglip_vision", "vision", "SiglipVisionConfig", "SiglipVisionModel", _VIT, "image"),
    # audio
    _a("whisper", "audio", "WhisperConfig", "WhisperForConditionalGeneration",
       dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB, num_mel_bins=16, max_source_positions=16,
            max_target_positions=32, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=3), "whisper"),
    _a("wav2vec2", "audio", "Wav2Vec2Config", "Wav2Vec2Model", _AUDIO, "wave"),
    _a("hubert", "audio", "HubertConfig", "HubertModel", _AUDIO, "wave"),
    _a("wavlm", "audio", "WavLMConfig", "WavLMModel", dict(_AUDIO, num_buckets=32), "wave"),
    _a("data2vec_audio", "audio", "Data2VecAudioConfig", "Data2VecAudioModel", dict(_AUDIO, num_conv_pos_embeddings=5), "wave"),
    # state-space
    _a("mamba", "ssm", "MambaConfig", "MambaForCausalLM", dict(hidden_size=64, num_hidden_layers=3, vocab_size=VOCAB, state_size=8, expand=2)),
    _a("mamba2", "ssm", "Mamba2Config", "Mamba2ForCausalLM",
       dict(hidden_size=64, num_hidden_layers=3, vocab_size=VOCAB, state_size=8, expand=2, head_dim=16, num_heads=8, n_groups=1, chunk_size=8)),
    _a("falcon_mamba", "ssm", "FalconMambaConfig", "FalconMambaForCausalLM", dict(hidden_size=64, num_hidden_layers=3, vocab_size=VOCAB, state_size=8, expand=2)),
]}


class Unbuildable(Exception):
    """The architecture cannot be made small here (the reason is the message)."""


def _inputs(kind: str, gen, cfg) -> dict[str, Any]:
    import torch

    ids = lambda n: torch.randint(3, VOCAB - 2, (BATCH, n), generator=gen)  # avoid pad/bos/eos ids
    if kind == "causal":
        return {"input_ids": ids(SEQ)}
    if kind == "text":
        x = ids(SEQ)
        mask = torch.ones_like(x)
        mask[1, -3:] = 0  # padding, so that a mask fault changes something
        return {"input_ids": x, "attention_mask": mask}
    if kind == "seq2seq":
        x = ids(SEQ)
        mask = torch.ones_like(x)
        mask[1, -3:] = 0
        return {"input_ids": x, "attention_mask": mask, "decoder_input_ids": ids(SEQ // 2)}
    if kind == "image":
        return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen)}
    if kind == "wave":
        return {"input_values": torch.randn(BATCH, 800, generator=gen)}
    if kind == "whisper":
        return {"input_features": torch.randn(BATCH, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=gen),
                "decoder_input_ids": ids(6)}
    raise ValueError(f"unknown input kind {kind!r}")


def build(name: str, seed: int = 0):
    """(model in eval mode, inputs) of architecture `name`, seeded: two calls give identical models."""
    import torch
    import transformers

    arch = ARCHS[name]
    cfg_cls, model_cls = getattr(transformers, arch.config, None), getattr(transformers, arch.model, None)
    if cfg_cls is None or model_cls is None:
        raise Unbuildable(f"transformers {transformers.__version__} has no {arch.config if cfg_cls is None else arch.model}")
    try:
        cfg = cfg_cls(**arch.kwargs)
        cfg._attn_implementation = "eager"
        cfg.use_cache = False  # a module re-run by the oracle must not append to a cache  # the reference kernel; SDPA is a benign change of its own
        torch.manual_seed(seed)
        model = model_cls(cfg).eval()
    except Exception as exc:  # any refusal of the small config is a reason to record
        raise Unbuildable(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]) from None
    gen = torch.Generator().manual_seed(seed + 1)
    return model, _inputs(arch.inputs, gen, cfg)


def output_tensor(out) -> Any:
    """The model output a user looks at (logits, else the last hidden state, else the first tensor)."""
    import torch

    if torch.is_tensor(out):
        return out
    for key in ("logits", "last_hidden_state", "pooler_output"):
        v = getattr(out, key, None)
        if torch.is_tensor(v):
            return v
    if isinstance(out, (tuple, list)):
        return next(v for v in out if torch.is_tensor(v))
    return next(v for v in out.values() if torch.is_tensor(v))
