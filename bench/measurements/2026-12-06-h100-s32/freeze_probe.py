"""Session 32, call 4: does the nodes' freeze hold in a GPU process after the engine's compile?

On the GPU the prompt 10 s after another still loses about 0.2 s to what looks like ComfyUI's
collection, although the node froze the live objects. One process, ComfyUI's allocator where the
shell sets it: the warp+decode engine as ComfyUI builds it (fp16, deferred) renders a short clip,
its compile runs in its thread; then what the collector sees: objects tracked, another freeze
(count), a full collection's time without and with ``freeze_live_objects``, and whether our freeze
was refused."""
import gc
import json
import sys
import time

import torch

from ditto_core import gc_pauses
from ditto_core.models.checkpoints import load_network
from ditto_core.render.warp_decode import WarpDecodeEngine
from tests.test_warp_decode import make_motion, make_source

device = torch.device("cuda")
warp = load_network("warp_network", sys.argv[1], device, torch.float16)
decoder = load_network("decoder", sys.argv[1], device, torch.float16)
engine = WarpDecodeEngine(warp, decoder, batch_size=8, warmup="deferred")
source = make_source(torch.randn(1, 32, 16, 64, 64))
engine.render(source, make_motion(20))  # eager; its end starts the compile in a thread
assert engine._warmups[(True, 8)].ready.wait(timeout=200)
record = {"compile_s": engine.stats.compile_seconds, "tracked": len(gc.get_objects()),
          "freeze_count_after_compile": gc.get_freeze_count(), "skipped": gc_pauses._FREEZE._skipped}
for trial in range(3):
    start = time.perf_counter(); gc.collect(); plain = time.perf_counter() - start
    frozen_ok = gc_pauses.freeze_live_objects(seconds=60)
    start = time.perf_counter(); gc.collect(); frozen = time.perf_counter() - start
    record[f"trial{trial}"] = {"collect_s": round(plain, 4), "freeze_ok": frozen_ok, "collect_frozen_s": round(frozen, 5),
                               "freeze_count": gc.get_freeze_count()}
    gc_pauses.thaw_live_objects()
print(json.dumps(record), flush=True)
