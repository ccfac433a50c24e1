"""``ditto_core`` is a plain library: no module of it may import ComfyUI (or need it installed)."""
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import importlib, importlib.util, pkgutil, sys

    FORBIDDEN = ("comfy", "comfy_api", "comfy_extras", "comfy_execution", "folder_paths", "server", "nodes")

    class RefuseComfyUI:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in FORBIDDEN or name.startswith("comfy"):
                raise ImportError(f"ditto_core imported the ComfyUI module {name!r}")
            return None

    sys.meta_path.insert(0, RefuseComfyUI())
    try:
        importlib.import_module("comfy.model_management")
    except ImportError as exc:
        assert "ComfyUI module" in str(exc), exc
    else:
        raise SystemExit("the finder did not refuse a ComfyUI import")
    import ditto_core
    names = [m.name for m in pkgutil.walk_packages(ditto_core.__path__, "ditto_core.")]
    optional = {"triton"}  # the Triton kernels' modules need Triton, which CPU installs may lack
    imported = 0
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name not in optional:
                raise
        else:
            imported += 1
    print(imported, len(names))
""")


def test_no_ditto_core_module_imports_comfyui():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    imported, total = map(int, done.stdout.split())
    assert total >= 60 and imported >= total - 5, (imported, total)  # every module but the Triton ones was loaded
