"""Trains a model file's module with PyTorch as trainmem-run trains its
import: the same batches (trainmem-run's Philox sampler, seed 0), AdamW
(lr 1e-3, betas 0.9 / 0.999, eps 1e-8, no weight decay) after clipping the
global gradient norm to 1.0, from the module's own initialisation; writes
'step loss' lines as trainmem-run's --loss-log does.

The build function returns (module, inputs, loss_fn) or (module, inputs)
as for trainmem-import; inputs {"input_ids": ids, "labels": ids}: the
model's own loss, given the batch's tokens as both.

Usage: /usr/bin/python3 torch-train.py FILE.py:FUNCTION CORPUS STEPS LOG"""
import importlib.util
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from pytorch_step import batch  # noqa: E402  trainmem-run's batches

import torch  # noqa: E402


def main():
    entry, corpus, steps, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        sys.argv[4]
    path, function = entry.rsplit(":", 1)
    spec = importlib.util.spec_from_file_location("model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = getattr(module, function)()
    model, inputs = built[0], built[1]
    loss_fn = built[2] if len(built) == 3 else None
    torch.set_num_threads(1)
    model.train()
    # Keyword inputs: a model that computes its own loss from labels that
    # are its input ids (model(input_ids=ids, labels=ids)).
    own_loss = isinstance(inputs, dict)
    batch_size, seq = (inputs["input_ids"] if own_loss else inputs[0]).shape
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999),
                                  eps=1e-8, weight_decay=0.0)
    data = open(corpus, "rb").read()
    with open(log, "w") as out:
        for step in range(1, steps + 1):
            tokens, targets = batch(data, 0, step, batch_size, seq)
            tokens, targets = torch.tensor(tokens), torch.tensor(targets)
            optimizer.zero_grad(set_to_none=True)
            if own_loss:  # the model shifts its labels itself
                loss = model(input_ids=tokens, labels=tokens)
                if not torch.is_tensor(loss):
                    loss = loss.loss
            elif loss_fn is not None:
                output = model(tokens)
                # A Hugging Face model's output: its logits, as
                # trainmem-import takes them.
                if not torch.is_tensor(output) and hasattr(output, "logits"):
                    output = output.logits
                loss = loss_fn(output, targets)
            else:  # the forward's own loss, or its one scalar
                loss = model(tokens, targets)
                if not torch.is_tensor(loss) and hasattr(loss, "loss"):
                    loss = loss.loss
                if isinstance(loss, tuple):
                    loss = next(x for x in loss
                                if torch.is_tensor(x) and x.dim() == 0)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            out.write(f"{step} {loss.item():.9g}\n")


if __name__ == "__main__":
    main()
