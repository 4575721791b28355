"""nn.LSTM training with cuDNN disabled (PyTorch's per-timestep fallback), NVTX range per step."""
import torch
from torch import nn
torch.manual_seed(0); torch.backends.cudnn.enabled = False
lstm = nn.LSTM(256, 512, num_layers=2, batch_first=True).cuda(); head = nn.Linear(512, 10).cuda()
opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
x = torch.randn(64, 32, 256, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
for i in range(8):
    torch.cuda.nvtx.range_push(f"step {i}")
    opt.zero_grad(set_to_none=True)
    out, _ = lstm(x)
    nn.functional.cross_entropy(head(out[:, -1]), y).backward(); opt.step()
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
