"""Hugging Face transformers causal LMs as written, built from tiny configs
with random weights (no hub here): 2 layers, hidden 64, 4 heads, vocab 256,
seq 64, batch 4, dropout 0, eager attention, no cache. Each build function
returns (the model, (tokens, targets), loss_fn): the model's own forward,
its logits scored by cross-entropy against trainmem-run's targets (the
tokens shifted by one). Needs transformers (scripts/setup.sh's venv)."""
import torch
import torch.nn.functional as F
import transformers as hf


def config(cls, **overrides):
    values = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128,
                  max_position_embeddings=64, use_cache=False,
                  attn_implementation="eager")
    values.update(overrides)
    return cls(**values)


def inputs():
    generator = torch.Generator().manual_seed(0)
    return (torch.randint(0, 256, (4, 64), generator=generator),
            torch.randint(0, 256, (4, 64), generator=generator))


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                           targets.reshape(-1))


def built(model_class, cfg):
    torch.manual_seed(0)
    return model_class(cfg), inputs(), loss_fn


def gpt2():
    """GPT-2: position ids [1, s], the attention scale as a tensor, the
    causal mask by torch.where with finfo.min, gelu_new written out."""
    cfg = hf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                        n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, use_cache=False,
                        attn_implementation="eager")
    return built(hf.GPT2LMHeadModel, cfg)


def llama():
    """Llama with grouped-query attention (2 K/V heads)."""
    return built(hf.LlamaForCausalLM,
                 config(hf.LlamaConfig, num_key_value_heads=2))


def llama_mha():
    """Llama with as many K/V heads as heads."""
    return built(hf.LlamaForCausalLM,
                 config(hf.LlamaConfig, num_key_value_heads=4))


def mistral():
    return built(hf.MistralForCausalLM,
                 config(hf.MistralConfig, num_key_value_heads=2,
                        sliding_window=None))


def qwen2():
    return built(hf.Qwen2ForCausalLM,
                 config(hf.Qwen2Config, num_key_value_heads=2))


def neox():
    """GPT-NeoX (Pythia): a fused QKV viewed and sliced per head, a partial
    rotary embedding (rotary_pct 0.25: rotated part and passed part joined
    by torch.cat), scores by torch.baddbmm, the causal mask by torch.where
    and then added again as the attention mask."""
    return built(hf.GPTNeoXForCausalLM,
                 config(hf.GPTNeoXConfig, hidden_dropout=0.0,
                        attention_dropout=0.0))


def phi():
    """Phi: a partial rotary embedding (partial_rotary_factor 0.5) and the
    mask added in place (attn_weights += causal_mask)."""
    return built(hf.PhiForCausalLM,
                 config(hf.PhiConfig, resid_pdrop=0.0, embd_pdrop=0.0,
                        attention_dropout=0.0))


def gemma():
    """Gemma: its RMSNorm scales by 1 + weight, the embeddings by a
    normalizer tensor, GeGLU with the tanh GELU."""
    return built(hf.GemmaForCausalLM,
                 config(hf.GemmaConfig, num_key_value_heads=2, head_dim=16,
                        hidden_activation="gelu_pytorch_tanh"))


def bloom():
    """Bloom: ALiBi (its bias built from the attention mask's cumsum,
    added by baddbmm; 4 heads), its kv_length read from cache_position, its
    GELU written out (bloom_gelu_forward), keys transposed through a
    merged batch."""
    cfg = hf.BloomConfig(vocab_size=256, hidden_size=64, n_layer=2, n_head=4,
                         hidden_dropout=0.0, attention_dropout=0.0,
                         use_cache=False, attn_implementation="eager")
    return built(hf.BloomForCausalLM, cfg)


def bloom6():
    """Bloom with 6 heads: ALiBi's slopes of a head count that is not a
    power of two (4 geometric, then 2 interleaved)."""
    cfg = hf.BloomConfig(vocab_size=256, hidden_size=96, n_layer=2, n_head=6,
                         hidden_dropout=0.0, attention_dropout=0.0,
                         use_cache=False, attn_implementation="eager")
    return built(hf.BloomForCausalLM, cfg)


def falcon():
    """Falcon (multi-query): one K/V head picked out of the fused QKV by
    list indexing (fused_qkv[..., [-2], :], aten.index), broadcast over the
    query heads; its rotary embedding on halves."""
    return built(hf.FalconForCausalLM,
                 config(hf.FalconConfig, hidden_dropout=0.0,
                        attention_dropout=0.0))


def opt():
    """OPT: ReLU in the feed-forward, learned positions offset by 2 (from
    the attention mask's cumsum), pre-norm layers."""
    cfg = hf.OPTConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, ffn_dim=128,
                       word_embed_proj_dim=64, max_position_embeddings=64,
                       dropout=0.0, attention_dropout=0.0,
                       activation_dropout=0.0, layerdrop=0.0,
                       use_cache=False, attn_implementation="eager")
    return built(hf.OPTForCausalLM, cfg)


def persimmon():
    """Persimmon: squared ReLU (relu2: torch.square(relu(x))), LayerNorm
    of the queries and keys, a partial rotary embedding."""
    return built(hf.PersimmonForCausalLM,
                 config(hf.PersimmonConfig, hidden_act="relu2",
                        hidden_dropout=0.0, attention_dropout=0.0))


def own_loss(model_class, cfg):
    """The model's own loss, called as Hugging Face documents it:
    model(input_ids=ids, labels=ids), the labels shifted inside."""
    torch.manual_seed(0)
    ids = inputs()[0]
    return model_class(cfg), {"input_ids": ids, "labels": ids}


def llama_own_loss():
    return own_loss(hf.LlamaForCausalLM,
                    config(hf.LlamaConfig, num_key_value_heads=2))


def gpt2_own_loss():
    cfg = hf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                        n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, use_cache=False,
                        attn_implementation="eager")
    return own_loss(hf.GPT2LMHeadModel, cfg)


# Published shapes, built with trainmem-import --meta (parameters on the
# meta device: no weights in memory), bf16 as the checkpoints are, to
# import and plan at the size they train at. Built in bf16 as
# from_pretrained(torch_dtype=torch.bfloat16) builds (_from_config): the
# rotary tables stay f32, where .to(torch.bfloat16) would round them.
def published(model_class, cfg):
    model = model_class._from_config(cfg, torch_dtype=torch.bfloat16)
    return model, inputs(), loss_fn


def llama2_7b():
    """Llama-2-7B's config.json values: the shape of trainmem-model's
    llama2-7b preset."""
    return published(hf.LlamaForCausalLM, hf.LlamaConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
        max_position_embeddings=4096, rms_norm_eps=1e-5, use_cache=False,
        attn_implementation="eager"))


def mistral_7b():
    """Mistral-7B-v0.1's config.json values (its 4096-token sliding window
    is the causal mask at seq 4096)."""
    return published(hf.MistralForCausalLM, hf.MistralConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=10000.0,
        sliding_window=4096, use_cache=False, attn_implementation="eager"))


def qwen2_7b():
    """Qwen2-7B's config.json values."""
    return published(hf.Qwen2ForCausalLM, hf.Qwen2Config(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944,
        num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_theta=1000000.0, use_cache=False, attn_implementation="eager"))
