"""Session 39: one line per bench_live concurrency level of the JSON files named (name=path)."""
import json
import sys

for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    try:
        d = json.load(open(path))
    except Exception as e:  # a run cut by its limit: say so and go on
        print(name, "no json", e)
        continue
    print(name, d.get("device"), "warm_up_s", d.get("warm_up_s"))
    for var_name, var in d.get("concurrency", {}).get("variants", {}).items():
        for lvl in var["levels"]:
            r = lvl["rounds"]
            print(name, var_name, lvl["streams"], "p50", lvl["chunk_latency_p50_ms_median"],
                  "p95", lvl["chunk_latency_p95_ms_max"], "missing", lvl["frames_missing"],
                  "busy", lvl["load"]["busy"], "rt", lvl["realtime_ok"],
                  "render_ms", r["render_ms"], "motion_ms", r["motion_ms"])
