"""Stand-in for ComfyUI's ``comfy_api`` package."""
