#!/usr/bin/env python3
"""Trains a small model on CPU and dumps its state every k steps.

bench/incremental replays the dumps (--trace DIR) to measure how many bytes
stagger ships between consecutive checkpoints of real training, next to
its synthetic classes (docs/benchmarks.md "Realistic data").

  make_torch_trace.py --out DIR [--steps 300] [--every 50] [--seed 1]

The model is a small transformer-like stack (embedding, attention and MLP
blocks, layer norms) trained with AdamW on a synthetic next-token task, so
weights and both Adam moments evolve as in real training. Each dump is
DIR/step_NNNNNN/ with one raw little-endian file per tensor and an
index.txt of lines "name dtype dim0,dim1,... file" (dtype F32 or BF16):
the model's state_dict() (fp32), a bf16 copy of it (what mixed-precision
training holds on the GPU), and the optimizer's exp_avg / exp_avg_sq.
Exits 0 with a message when torch is not installed.
"""
import argparse
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    a = p.parse_args()
    if a.steps < 1 or a.every < 1 or a.every > a.steps:
        sys.exit("make_torch_trace.py: need 1 <= --every <= --steps")
    try:
        import torch
        from torch import nn
    except ImportError:
        print("make_torch_trace.py: torch is not installed; no trace made")
        return 0

    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                     nn.Linear(4 * d, d))

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(a.vocab, a.dim)
            self.blocks = nn.ModuleList(Block(a.dim) for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.dim)
            self.head = nn.Linear(a.dim, a.vocab, bias=False)

        def forward(self, tokens):
            n = tokens.shape[1]
            mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
            x = self.emb(tokens)
            for b in self.blocks:
                x = b(x, mask)
            return self.head(self.ln(x))

    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    # A learnable task: the next token is a fixed function of the current.
    perm = torch.randperm(a.vocab)
    gen = torch.Generator().manual_seed(a.seed + 1)

    def dump(step):
        d = os.path.join(a.out, f"step_{step:06d}")
        os.makedirs(d, exist_ok=True)
        lines = []

        def put(name, t, dtype):
            t = t.detach().contiguous()
            f = name.replace("/", "_") + ".bin"
            if dtype == "BF16":
                raw = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
            else:
                raw = t.to(torch.float32).numpy().tobytes()
            with open(os.path.join(d, f), "wb") as out:
                out.write(raw)
            shape = ",".join(str(s) for s in t.shape) or "1"
            lines.append(f"{name} {dtype} {shape} {f}")

        for name, t in model.state_dict().items():
            put("model." + name, t, "F32")
            put("bf16." + name, t, "BF16")
        names = {id(p): n for n, p in model.named_parameters()}
        for group in opt.param_groups:
            for prm in group["params"]:
                st = opt.state.get(prm, {})
                for key in ("exp_avg", "exp_avg_sq"):
                    if key in st:
                        put(f"optim.{names[id(prm)]}.{key}", st[key], "F32")
        with open(os.path.join(d, "index.txt"), "w") as out:
            out.write("\n".join(lines) + "\n")

    loss_fn = nn.CrossEntropyLoss()
    for step in range(1, a.steps + 1):
        tokens = torch.randint(0, a.vocab, (8, 64), generator=gen)
        target = perm[tokens]
        loss = loss_fn(model(tokens).reshape(-1, a.vocab), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % a.every == 0:
            dump(step)
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
