"""The idioms of Hugging Face's model code, written with torch alone (so
that they are tested where transformers is not installed): a causal mask
added as torch.finfo(dtype).min (also in place) or chosen by torch.where,
position ids of shape [1, s], the attention scale as a one-element tensor
or baddbmm's alpha, GELU's tanh form written out (gelu_new), torch.cat of
activations."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SEQ, HIDDEN, VOCAB = 8, 16, 256


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.mask = mask  # finfo, finfo_in_place, where, bidirectional
        self.q = nn.Linear(HIDDEN, HIDDEN)
        self.k = nn.Linear(HIDDEN, HIDDEN)
        self.v = nn.Linear(HIDDEN, HIDDEN)
        keep = torch.ones(SEQ, SEQ, dtype=torch.bool)
        if mask != "bidirectional":
            keep = keep.tril()
        self.register_buffer("keep", keep.view(1, SEQ, SEQ))

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.mask == "finfo_in_place":
            # GPT-NeoX's scores: baddbmm on zeros, the scale as alpha.
            scores = torch.baddbmm(
                torch.zeros(q.size(0), SEQ, SEQ, dtype=q.dtype), q,
                k.transpose(1, 2), beta=1.0, alpha=HIDDEN ** -0.5)
        else:
            scores = q @ k.transpose(-2, -1)
            scores = scores / torch.full([], HIDDEN ** 0.5,
                                         dtype=scores.dtype)
        lowest = torch.finfo(scores.dtype).min
        if self.mask == "finfo":
            scores = scores + torch.full((SEQ, SEQ), lowest).triu(1)
        elif self.mask == "finfo_in_place":
            scores += torch.full((SEQ, SEQ), lowest).triu(1)  # Phi's
        else:
            scores = torch.where(self.keep, scores,
                                 torch.full([], lowest, dtype=scores.dtype))
        return F.softmax(scores, -1) @ v


class MLP(nn.Module):
    """Its hidden activation is two projections joined by torch.cat."""

    def __init__(self, gelu):
        super().__init__()
        self.gelu = gelu
        self.fc = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.gate = nn.Linear(HIDDEN, HIDDEN)
        self.proj = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        h = torch.cat((self.fc(x), self.gate(x)), dim=-1)
        return self.proj(gelu_new(h) if self.gelu else h * h.pow(3))


class Layer(nn.Module):
    def __init__(self, mask, gelu):
        super().__init__()
        self.attn = Attention(mask)
        self.mlp = MLP(gelu)

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self, mask="finfo", gelu=True):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(SEQ, HIDDEN)
        self.layers = nn.ModuleList([Layer(mask, gelu)])
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens):
        positions = torch.arange(SEQ).unsqueeze(0)  # [1, s]
        x = self.embed(tokens) + self.position(positions)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def inputs():
    generator = torch.Generator().manual_seed(0)
    return (torch.randint(0, VOCAB, (2, SEQ), generator=generator),
            torch.randint(0, VOCAB, (2, SEQ), generator=generator))


def finfo_mask():
    torch.manual_seed(0)
    return Model(mask="finfo"), inputs(), loss_fn


def where_mask():
    torch.manual_seed(0)
    return Model(mask="where"), inputs(), loss_fn


def where_bidirectional():
    torch.manual_seed(0)
    return Model(mask="bidirectional"), inputs(), loss_fn


def in_place():
    """Scores by baddbmm, the mask added in place."""
    torch.manual_seed(0)
    return Model(mask="finfo_in_place"), inputs(), loss_fn


class MutatedView(Model):
    """A view taken before an in-place op and read after it."""

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        before = x.view(-1)
        x.mul_(2.0)
        return self.head(x + before.view(x.shape))


def mutated_view():
    torch.manual_seed(0)
    return MutatedView(), inputs(), loss_fn


def cube():
    torch.manual_seed(0)
    return Model(gelu=False), inputs(), loss_fn


class LayerDrop(Model):
    """OPT's layerdrop: each layer skipped when a draw falls below p."""

    def __init__(self, layerdrop):
        super().__init__()
        self.layerdrop = layerdrop

    def forward(self, tokens):
        positions = torch.arange(SEQ).unsqueeze(0)
        x = self.embed(tokens) + self.position(positions)
        for layer in self.layers:
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue
            x = layer(x)
        return self.head(x)


def layerdrop_zero():
    torch.manual_seed(0)
    return LayerDrop(0.0), inputs(), loss_fn


def layerdrop_some():
    torch.manual_seed(0)
    return LayerDrop(0.1), inputs(), loss_fn


class OwnLoss(Model):
    """A model that computes its own loss as Hugging Face's causal LMs do:
    forward(input_ids, labels) scores logits[:, :-1] against labels[:, 1:],
    called as model(input_ids=ids, labels=ids)."""

    def forward(self, input_ids, labels=None):
        logits = super().forward(input_ids)
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return F.cross_entropy(shift_logits.view(-1, VOCAB),
                               shift_labels.view(-1))


def own_loss():
    torch.manual_seed(0)
    ids = inputs()[0]
    return OwnLoss(), {"input_ids": ids, "labels": ids}


def own_loss_other_labels():
    torch.manual_seed(0)
    ids, targets = inputs()
    return OwnLoss(), {"input_ids": ids, "labels": targets}


class Unshifted(Model):
    def forward(self, input_ids, labels=None):
        logits = super().forward(input_ids)
        return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))


def unshifted_labels():
    torch.manual_seed(0)
    ids = inputs()[0]
    return Unshifted(), {"input_ids": ids, "labels": ids}


def keyword_mask():
    torch.manual_seed(0)
    ids = inputs()[0]
    return OwnLoss(), {"input_ids": ids, "attention_mask": ids}


class MHALayer(nn.Module):
    """nn.MultiheadAttention as its documentation shows it: a causal float
    mask (nn.Transformer.generate_square_subsequent_mask's), its packed
    in_proj (one [3h, h] weight whose product is split by select), the
    scores by baddbmm on the mask."""

    def __init__(self, need_weights):
        super().__init__()
        self.need_weights = need_weights
        self.ln = nn.LayerNorm(HIDDEN)
        self.attn = nn.MultiheadAttention(HIDDEN, 2, batch_first=True)
        self.mlp = MLP(True)

    def forward(self, x):
        mask = torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1)
        h = self.ln(x)
        y, _ = self.attn(h, h, h, attn_mask=mask,
                         need_weights=self.need_weights)
        x = x + y
        return x + self.mlp(x)


class MHAModel(Model):
    def __init__(self, need_weights=False):
        super().__init__()
        self.layers = nn.ModuleList([MHALayer(need_weights)])


def mha():
    torch.manual_seed(0)
    return MHAModel(), inputs(), loss_fn


def mha_weights():
    torch.manual_seed(0)
    return MHAModel(need_weights=True), inputs(), loss_fn


class NarrowAttention(nn.Module):
    """A fused Q/K/V projection whose parts are taken by narrow and select
    (Bloom's fused_qkv[..., i, :] of a [b, s, 3, h] view)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)

    def forward(self, x):
        fused = self.qkv(x)
        q = fused.narrow(-1, 0, HIDDEN)
        parts = fused.view(x.size(0), SEQ, 3, HIDDEN)
        k, v = parts[..., 1, :], parts.select(2, 2)
        scores = q @ k.transpose(-2, -1) * HIDDEN ** -0.5
        scores = scores + torch.full((SEQ, SEQ), float("-inf")).triu(1)
        return F.softmax(scores, -1) @ v


def narrow_select():
    torch.manual_seed(0)
    model = Model()
    model.layers[0].attn = NarrowAttention()
    return model, inputs(), loss_fn


def smoothed_loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                           label_smoothing=0.1)


def label_smoothing():
    """F.cross_entropy(..., label_smoothing=0.1)."""
    torch.manual_seed(0)
    return Model(), inputs(), smoothed_loss_fn


class OptAttention(Attention):
    """OPT's scores: the mask added, then clamped at the lowest value."""

    def __init__(self):
        super().__init__("finfo")

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(-2, -1) * HIDDEN ** -0.5
        lowest = torch.finfo(scores.dtype).min
        scores = scores + torch.full((SEQ, SEQ), lowest).triu(1)
        scores = torch.max(scores, torch.tensor(lowest))
        return F.softmax(scores, -1) @ v


class OptStyle(Model):
    """OPT's learned positions: ids from a cumsum of the [b, s] attention
    mask, offset by 2 (rows 2..s+1 of the table, the same in every row)."""

    def __init__(self):
        super().__init__()
        self.position = nn.Embedding(SEQ + 2, HIDDEN)
        self.layers[0].attn = OptAttention()

    def forward(self, tokens):
        mask = torch.ones(tokens.shape, dtype=torch.long)
        positions = (torch.cumsum(mask, dim=1) * mask).long() - 1
        x = self.embed(tokens) + self.position(positions + 2)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def opt_style():
    torch.manual_seed(0)
    return OptStyle(), inputs(), loss_fn


def plain_attribute_mask():
    """The where-mask kept as a plain tensor attribute (self.keep =
    torch.tril(...), no register_buffer), as hand-written models often
    keep it (GPT-J keeps its sinusoidal table so)."""
    torch.manual_seed(0)
    model = Model(mask="where")
    attention = model.layers[0].attn
    keep = attention._buffers.pop("keep")
    attention.keep = keep
    assert "keep" in vars(attention)
    return model, inputs(), loss_fn


class AlibiAttention(nn.Module):
    """Two heads with ALiBi as hand-written code adds it (MPT's way): a
    buffer [1, h, s, s] of slope_h (j - i) with -inf above the diagonal,
    added to the scaled scores; with `row_constant`, Bloom's m_h j instead
    and the causal mask apart."""

    def __init__(self, row_constant=False):
        super().__init__()
        self.row_constant = row_constant
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        slopes = torch.tensor([0.5, 0.125]).view(1, 2, 1, 1)
        i = torch.arange(SEQ).view(SEQ, 1)
        j = torch.arange(SEQ).view(1, SEQ)
        if row_constant:
            bias = slopes * j.float()
        else:
            bias = (slopes * (j - i).float()).masked_fill(j > i,
                                                          float("-inf"))
        self.register_buffer("bias", bias)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split(HIDDEN, dim=2)
        q, k, v = (t.view(b, s, 2, HIDDEN // 2).transpose(1, 2)
                   for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (HIDDEN // 2) ** -0.5
        scores = scores + self.bias
        if self.row_constant:
            scores = scores.masked_fill(
                torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1),
                float("-inf"))
        y = F.softmax(scores, -1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, HIDDEN))


class AlibiModel(Model):
    """No position embeddings: ALiBi is the position signal."""

    def __init__(self, row_constant=False):
        super().__init__()
        self.layers[0].attn = AlibiAttention(row_constant)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def alibi():
    torch.manual_seed(0)
    return AlibiModel(), inputs(), loss_fn


def alibi_row_constant():
    torch.manual_seed(0)
    return AlibiModel(row_constant=True), inputs(), loss_fn


def random_bias():
    """A constant attention bias that is not ALiBi's: refused by name."""
    torch.manual_seed(0)
    model = AlibiModel(row_constant=True)
    model.layers[0].attn.bias = torch.randn(1, 2, SEQ, SEQ)
    return model, inputs(), loss_fn
