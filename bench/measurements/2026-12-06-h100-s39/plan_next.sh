#!/bin/bash
# Prepared in session 39 (not run: its device time was spent). Whether a CUDA graph recorded inside
# a green context keeps to its SMs (green_record_probe.py, PyTorch's own green-context path), then
# session 39's two green probes again for the same machine's baseline. About 20 s on a started machine.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
D=bench/measurements/2026-12-06-h100-s39
timeout 90 python3 $D/green_record_probe.py 2>&1 | tail -2 | cut -c1-1500
timeout 90 python3 $D/green_capture_probe.py 2>&1 | tail -1 | cut -c1-1500
