"""Small models: most of them ones the importer must refuse (errors.test),
and a forward that returns (logits, loss) (import.test)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self, hidden, sort=False, branch=False):
        super().__init__()
        self.mlp = nn.Linear(hidden, hidden)
        self.sort, self.branch = sort, branch

    def forward(self, x):
        y = self.mlp(x)
        if self.sort:
            y = torch.sort(y, dim=-1).values  # no train op
        if self.branch and y.sum() > 0:  # data-dependent control flow
            y = y * 2
        return x + y


class Tiny(nn.Module):
    def __init__(self, sort=False, branch=False, vocab=32, hidden=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([Layer(hidden, sort, branch)])
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def inputs():
    return torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))


def sort():
    return Tiny(sort=True), inputs(), loss_fn


def branch():
    return Tiny(branch=True), inputs(), loss_fn


class DataSize(Tiny):
    """Cuts the sequence at a length read out of the tokens: the value is
    computed on one line and read (as a size) on the next."""

    def forward(self, tokens):
        x = self.embed(tokens)
        keep = (tokens > 0).sum(-1).max()  # computed from the input
        x = x[:, :keep]  # read as a size
        return self.head(x)


def data_size():
    return DataSize(), inputs(), loss_fn


class ConstantSize(Tiny):
    """A size read out of a tensor made of constants (Bloom's kv_length =
    cache_position[-1] + 1): computed at import time."""

    def forward(self, tokens):
        x = self.embed(tokens)
        positions = torch.arange(tokens.shape[1])
        length = positions[-1] + 1
        x = x.view(x.shape[0], length, x.shape[2])
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def constant_size():
    return ConstantSize(), inputs(), loss_fn


class Permuted(Tiny):
    """Indexes the features by a list that is not consecutive."""

    def forward(self, tokens):
        x = self.embed(tokens)
        x = x[:, :, [2 * i % 15 for i in range(15)] + [15]]  # aten.index
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def permuted():
    return Permuted(), inputs(), loss_fn


class NoLoss(Tiny):
    """Takes the targets and forgets the loss."""

    def forward(self, tokens, targets):
        return super().forward(tokens)


def logits():
    """The forward returns the logits, not a loss (no loss function)."""
    return NoLoss(), inputs()


def two_inputs_one_taken():
    """No loss function, and a forward that takes the tokens only."""
    return Tiny(), inputs()


def not_a_module():
    return "model", inputs(), loss_fn


class Attention(nn.Module):
    """One attention layer; `fused` splits one Q/K/V projection, `rotary`
    'halves' rotates (x[i], x[i + d/2]), `mask` 'full' is not causal."""

    def __init__(self, hidden, fused=False, rotary=None, mask="causal"):
        super().__init__()
        self.fused, self.rotary = fused, rotary
        if fused:
            self.qkv = nn.Linear(hidden, 3 * hidden)
        else:
            self.q = nn.Linear(hidden, hidden)
            self.k = nn.Linear(hidden, hidden)
            self.v = nn.Linear(hidden, hidden)
        seq = 8
        keep = torch.ones(seq, seq).tril() if mask == "causal" else \
            torch.ones(seq, seq).triu()
        self.register_buffer("keep", keep)
        angles = torch.outer(torch.arange(seq).float(),
                             10000.0 ** (-torch.arange(0, hidden, 2).float()
                                         / hidden))
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1))
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1))

    def forward(self, x):
        if self.fused:
            q, k, v = self.qkv(x).split(x.size(-1), dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        if self.rotary == "halves":
            def rotate(t):
                a, b = t[..., :t.size(-1) // 2], t[..., t.size(-1) // 2:]
                return t * self.cos + torch.cat([-b, a], -1) * self.sin
            q, k = rotate(q), rotate(k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))
        scores = scores.masked_fill(self.keep == 0, float("-inf"))
        return x + F.softmax(scores, -1) @ v


class AttentionModel(Tiny):
    def __init__(self, mlp=None, **attention):
        super().__init__()
        layer = Layer(16)
        layer.mlp = mlp or nn.Linear(16, 16)
        layer.attn = Attention(16, **attention)
        self.layers = nn.ModuleList([layer])

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer.attn(x)
            x = x + layer.mlp(x)
        return self.head(x)


class EveryOther(Tiny):
    """Reads every other feature: a strided slice outside a rotary
    embedding."""

    def __init__(self):
        super().__init__()
        self.layers[0].mlp = nn.Linear(8, 16)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = x + layer.mlp(x[..., ::2])
        return self.head(x)


def every_other():
    return EveryOther(), inputs(), loss_fn


def half_rotary():
    return AttentionModel(rotary="halves"), inputs(), loss_fn


def bidirectional():
    return AttentionModel(mask="full"), inputs(), loss_fn


class LogitsAndLoss(Tiny):
    """nanoGPT's forward(idx, targets) -> (logits, loss)."""

    def forward(self, tokens, targets):
        logits = super().forward(tokens)
        return logits, loss_fn(logits, targets)


def logits_and_loss():
    return LogitsAndLoss(), inputs()


def raises():
    """A build function that fails: its error and line, not a traceback."""
    raise ValueError("no such checkpoint")


class ShiftedLoss(Tiny):
    """Hugging Face's own loss: the labels shifted by labels[..., 1:]."""

    def forward(self, tokens, labels):
        logits = super().forward(tokens)
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                               shift_labels.view(-1))


def shifted_loss():
    return ShiftedLoss(), inputs()


def smoothed_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                           label_smoothing=0.1)


def label_smoothing():
    """F.cross_entropy with label smoothing: its label_smoothing."""
    return Tiny(), inputs(), smoothed_loss


def bad_smoothing():
    return Tiny(), inputs(), lambda logits, targets: F.cross_entropy(
        logits.view(-1, logits.size(-1)), targets.view(-1),
        label_smoothing=1.5)


def on_meta():
    """A module moved to the meta device: its parameters have shapes and
    types, no values; it imports (without --weights)."""
    return Tiny().to("meta"), inputs(), loss_fn


class MaskBuffer(Tiny):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(16))

    def forward(self, tokens):
        return super().forward(tokens) * self.scale.sum()


def buffer_on_meta():
    """A buffer on the meta device: its values are part of the step."""
    return MaskBuffer().to("meta"), inputs(), loss_fn
