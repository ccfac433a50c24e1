#!/bin/bash
# Device call 2 (session 24): session 23's plan as it was prepared: bench_live at 8, 10 and 12
# streams (25 steps), then the GPU tests session 23's call 3 did not reach (AOT packages left out).
exec bash bench/measurements/2026-12-05-h200-s23/plan_next_2.sh
