# Seconds of the first triton_key() in a new process: Triton hashing its installation ("hashed")
# against the key kept in the user cache by ditto_core.triton_key ("kept", its cache warm).
# Run: PYTHONPATH=. python triton_key_cpu.py hashed|kept (session 18, the 2-core development machine, Triton 3.9).
import sys, time
from pathlib import Path
from triton.runtime import cache
if sys.argv[1] == "kept":
    from ditto_core.triton_key import keep_triton_key
    keep_triton_key(Path("/tmp/tk_cache"))
start = time.perf_counter(); cache.triton_key(); print(f"{time.perf_counter() - start:.4f}")
