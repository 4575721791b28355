"""A tiny PyTorch inference loop (no optimizer): ``traceinsight record`` counts the model's outermost forward calls
as the steps.

    traceinsight record -- python examples/infer_tiny.py
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10)).to(device).eval()
    total = 0
    with torch.inference_mode():
        for _ in range(args.batches):
            images = torch.randn(args.batch_size, 3, 32, 32, device=device)
            total += int(model(images).argmax(1).sum())
    print(f"done: {args.batches} batches, checksum {total}")


if __name__ == "__main__":
    main()
