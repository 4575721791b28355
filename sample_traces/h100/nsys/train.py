"""MLP training under Nsight Systems: an NVTX range per step, loss.item() every step, empty_cache() every step."""
import torch
from torch import nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
x = torch.randn(1024, 2048, device="cuda"); y = torch.randint(0, 10, (1024,), device="cuda")
for i in range(30):
    torch.cuda.nvtx.range_push(f"step {i}")
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(m(x), y)
    loss.backward(); opt.step()
    print(loss.item()) if i % 10 == 0 else loss.item()
    torch.cuda.empty_cache()
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
