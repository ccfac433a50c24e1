# Sourced by device calls that start a real ComfyUI (from session 28 on): session 19's preamble
# (wheels, bytecode, random checkpoints, the HuBERT-large where NEED_HUBERT=1), then what ComfyUI
# needs beyond the device image (torchsde, trampoline) and its source unpacked to /tmp/comfyui.
# Carry [".whl", ".carry"].
. bench/measurements/2026-12-04-h200-s19/preamble.sh
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
[ -d /tmp/comfyui/comfy ] || { mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui; }
