"""A tiny PyTorch training script, written with no profiler code at all: try ``traceinsight record`` on it.

    traceinsight record -- python examples/train_tiny.py
    traceinsight record --sweep BATCH=16,64,256 -- python examples/train_tiny.py --batch-size {BATCH}

Runs on the GPU when there is one, else on the CPU (``--device cpu`` forces it).
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.randn(args.batch_size * 4, 64)
    labels = torch.randint(0, 10, (args.batch_size * 4,))

    for step in range(args.steps):
        i = (step % 4) * args.batch_size
        x, y = data[i:i + args.batch_size].to(device), labels[i:i + args.batch_size].to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
