# Sourced at the top of a device call's script (run from main, $OUT set by the device tool, END the
# seconds the call may take): the clock, $O for logs, and the helpers the calls share.
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o1; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }                  # seconds left to the call
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }         # a step's name, exit status, time so far
gpu_pytest() { timeout $1 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short "${@:2}"; }
nvidia-smi --query-gpu=name --format=csv,noheader
