"""Store open time at 1M MAUs after the quick_check fix: a store built with random vectors (no gate,
no haystack), saved, then opened three times. Prints MAUs/s of store.add and each open time.
The peak RSS it prints includes the ingest store it keeps alive while opening: not a store figure.

Usage: ``python benchmarks/perf/bench_lifelong_open.py`` (leaves its store folder in /tmp: delete it)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a plain script
# ruff: noqa: E401, E402, E702
import tempfile
import time
from pathlib import Path

import numpy as np

from memsys.config import IndexConfig
from memsys.records import MAU
from memsys.store import MemoryStore

d = Path(tempfile.mkdtemp(dir="/tmp")) / "s"
store = MemoryStore.create(d, embedder_name="r", dim=384, index=IndexConfig())
rng = np.random.default_rng(0)
t = time.time()
for b in range(1000):
    v = rng.standard_normal((1000, 384)).astype(np.float32); v /= np.linalg.norm(v, axis=1, keepdims=True)
    store.add([MAU(f"m{b*1000+i}", f"memory w{b*1000+i} about topic {i%97} and thing {i%13}", embedding=v[i], details={"text": "x"*200}) for i in range(1000)])
print("store+index only, MAUs/s", 1000000 / (time.time() - t))
store.save(); store.close()
import resource

for _ in range(3):
    t = time.time(); s = MemoryStore.open(d); print("open_s", time.time() - t); s.close()


print(d)
print("peak_rss_gib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
