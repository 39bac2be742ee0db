"""A Llama in plain PyTorch, as Meta's reference writes one: RMSNorm as
pow / mean / rsqrt, rotary embeddings on interleaved pairs written with
strided slices, cos / sin tables and a stack, SwiGLU, grouped-query
attention whose K/V heads are repeated by expand + reshape, no biases, an
untied output matrix (build_halves: the rotary embedding on halves, as
Hugging Face's rotate_half writes it). The shape of trainmem-model's llama2 preset at
--layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 192 --vocab 256
--seq 64 --batch 4 --dtype f32."""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPE = dict(layers=int(os.environ.get("LLAMA_LAYERS", 2)), hidden=64,
             heads=4, kv_heads=2, ffn=192, vocab=256, seq=64, batch=4,
             theta=10000.0)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        norm = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return norm.type_as(x) * self.weight


def rotary_tables(d, seq, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    angles = torch.outer(torch.arange(seq).float(), freqs)
    return torch.cos(angles), torch.sin(angles)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_halves(x, cos, sin):
    """Hugging Face's and GPT-NeoX's convention: x[i] with x[i + d/2]."""
    cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    return x * cos + rotate_half(x) * sin


def apply_rotary(x, cos, sin):
    """x: [b, heads, s, d]; rotates (x[2i], x[2i+1]) by position * freq_i."""
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, seq, theta, halves=False,
                 interleave=False):
        super().__init__()
        self.rotary = apply_rotary_halves if halves else apply_rotary
        self.interleave = interleave
        self.heads, self.kv_heads = heads, kv_heads
        self.d = hidden // heads
        self.wq = nn.Linear(hidden, heads * self.d, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, hidden, bias=False)
        cos, sin = rotary_tables(self.d, seq, theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.wk(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.wv(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        q = self.rotary(q, self.cos[:s], self.sin[:s])
        k = self.rotary(k, self.cos[:s], self.sin[:s])
        rep = self.heads // self.kv_heads
        if self.interleave:  # as many write it
            k = k.repeat_interleave(rep, dim=1)
            v = torch.repeat_interleave(v, rep, dim=1)
        else:
            k = k[:, :, None].expand(b, self.kv_heads, rep, s, self.d)
            k = k.reshape(b, self.heads, s, self.d)
            v = v[:, :, None].expand(b, self.kv_heads, rep, s, self.d)
            v = v.reshape(b, self.heads, s, self.d)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.d)
        scores = scores + self.mask[:s, :s]
        probs = F.softmax(scores.float(), dim=-1).type_as(q)
        out = (probs @ v).transpose(1, 2).reshape(b, s, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.attention_norm = RMSNorm(s["hidden"])
        self.attention = Attention(s["hidden"], s["heads"], s["kv_heads"],
                                   s["seq"], s["theta"], s.get("halves"),
                                   s.get("interleave", False))
        self.ffn_norm = RMSNorm(s["hidden"])
        self.feed_forward = FeedForward(s["hidden"], s["ffn"])

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.tok_embeddings = nn.Embedding(s["vocab"], s["hidden"])
        self.layers = nn.ModuleList(TransformerBlock(s)
                                    for _ in range(s["layers"]))
        self.norm = RMSNorm(s["hidden"])
        self.output = nn.Linear(s["hidden"], s["vocab"], bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


def loss_fn(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def build(dtype=torch.float32, halves=False, interleave=False):
    torch.manual_seed(0)
    s = dict(SHAPE, halves=halves, interleave=interleave)
    model = Llama(s).to(dtype)
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    targets = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    return model, (tokens, targets), loss_fn


def build_bf16():
    return build(torch.bfloat16)


def build_halves():
    """Rotary embeddings as Hugging Face writes them (rotate_half)."""
    return build(halves=True)


def build_repeat_interleave():
    """K/V heads repeated by repeat_interleave (a user's own Llama)."""
    return build(interleave=True)
