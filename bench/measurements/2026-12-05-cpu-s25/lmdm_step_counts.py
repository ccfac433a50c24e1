"""What one LMDM window launches, counted on the CPU for the tree it runs in (session 25).

* eager: every ATen operator one 25-step window of the eager sampler calls (batch 1), by a
  dispatch mode; ``aten.cat`` and the copies singled out;
* compiled: the kernel and extern calls in Inductor's CPU code for one guided step (SDPA calls,
  written as assignments, are not in this count), plus the dense copies the compiled sampler made
  outside the graph at each step before this session.

    PYTHONPATH=<tree> TORCHINDUCTOR_CACHE_DIR=/tmp/ind python lmdm_step_counts.py <label>
"""
import re
import sys
from collections import Counter

import torch
from torch._inductor.utils import run_and_get_code
from torch.utils._python_dispatch import TorchDispatchMode

from ditto_core.models.lmdm import LMDM
from ditto_core.motion.lmdm_sampler import DDIMSampler

STEPS, BATCH = 25, 1


class Calls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[str(func)] += 1
        return func(*args, **(kwargs or {}))


def main(label: str) -> None:
    torch.manual_seed(0)
    lmdm = LMDM().eval()
    sampler = DDIMSampler(lmdm, steps=STEPS, cuda_graph=False)
    inputs = (torch.randn(BATCH, 265), torch.randn(BATCH, 80, lmdm.cond_dim), torch.randn(BATCH, 80, 265),
              torch.randn(*sampler.noise_shape(BATCH)))
    with torch.no_grad(), Calls() as calls:
        window = sampler.sample(*inputs)
    copies = {k: v for k, v in calls.count.items() if "cat" in k or "clone" in k or "copy" in k}
    print(label, "eager window:", sum(calls.count.values()), "operator calls;", copies)

    condition = lmdm.encode_guidance(*inputs[:2])
    t = torch.randint(0, 1000, (STEPS,))
    tiled = type(condition)(**{**vars(condition), "hidden": condition.hidden.repeat(STEPS, 1)})
    times = lmdm.time_condition(t.repeat_interleave(2 * BATCH), tiled)
    if hasattr(times, "split_steps"):
        time, outside = times.split_steps(STEPS)[3], 0
    else:  # before session 25: a view of the step's rows, copied dense at each step
        time, outside = times.rows(3 * 2 * BATCH, 4 * 2 * BATCH).contiguous(), 3
    with torch.no_grad():
        step, code = run_and_get_code(torch.compile(lmdm.guided_step, dynamic=False), inputs[2], t[3].expand(BATCH),
                                      condition, time)
    found = re.findall(r"^\s+(cpp_fused_\w+|extern_kernels\.\w+)\(", "\n".join(code), re.M)
    kinds = Counter(re.sub(r"_\d+$", "", name) for name in found)
    print(label, "compiled step:", len(found), "kernel/extern calls +", outside, "copies outside;",
          {k: v for k, v in kinds.items() if "cat" in k or "repeat" in k})
    torch.save({"window": window, "step": step}, f"/tmp/lmdm_step_counts_{label}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
