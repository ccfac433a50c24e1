#!/bin/bash
# Session 34, call 3: eager_layouts.py (the eager batch in other memory layouts).
# Carry [".whl", ".carry"].
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
export PYTHONPATH=$PWD:$PYTHONPATH
timeout 400 python3 bench/measurements/2026-12-06-h100-s34/eager_layouts.py 2>&1 | grep -v Warning | cut -c1-600
