"""A GPT in plain PyTorch, written as nanoGPT writes one (pre-LN blocks,
learned positions, a causal mask buffer filled with -inf before the softmax,
tanh GELU, the head tied to the token table), with Q, K and V as three
nn.Linear: the shape of trainmem-model's GPT preset, so that the imported
graph's memory can be compared with the preset's."""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPE = dict(layers=int(os.environ.get("GPT_LAYERS", 2)), hidden=64, heads=4,
             vocab=256, seq=64, batch=4)


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.heads = heads
        self.register_buffer(
            "bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        d = C // self.heads
        q = self.q(x).view(B, T, self.heads, d).transpose(1, 2)
        k = self.k(x).view(B, T, self.heads, d).transpose(1, 2)
        v = self.v(x).view(B, T, self.heads, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, seq)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class FlatBlock(nn.Module):
    """The same block written flat, its modules named freely (no
    attention or MLP submodule, no 'attn' or 'mlp' in any name): the
    importer finds the parts from the graph."""

    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.norm_a = nn.LayerNorm(hidden)
        self.wq = nn.Linear(hidden, hidden)
        self.wk = nn.Linear(hidden, hidden)
        self.wv = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm_b = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)
        self.heads = heads
        self.register_buffer(
            "bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        d = C // self.heads
        h = self.norm_a(x)
        q = self.wq(h).view(B, T, self.heads, d).transpose(1, 2)
        k = self.wk(h).view(B, T, self.heads, d).transpose(1, 2)
        v = self.wv(h).view(B, T, self.heads, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.out(y.transpose(1, 2).contiguous().view(B, T, C))
        h = F.gelu(self.up(self.norm_b(x)), approximate="tanh")
        return x + self.down(h)


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, seq, block=Block):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.h = nn.ModuleList(block(hidden, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens):
        T = tokens.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def loss_fn(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def build(dtype=torch.float32):
    torch.manual_seed(0)
    s = SHAPE
    model = GPT(s["layers"], s["hidden"], s["heads"], s["vocab"], s["seq"])
    model = model.to(dtype)
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    targets = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    return model, (tokens, targets), loss_fn


def build_bf16():
    return build(torch.bfloat16)


def build_flat():
    torch.manual_seed(0)
    s = SHAPE
    model = GPT(s["layers"], s["hidden"], s["heads"], s["vocab"], s["seq"],
                block=FlatBlock)
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    targets = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    return model, (tokens, targets), loss_fn
