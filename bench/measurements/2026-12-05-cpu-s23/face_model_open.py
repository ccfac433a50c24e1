"""What opening the face models costs a new process (session 23; DittoPipeline now opens them when
a registration first needs them): importing onnxruntime and MediaPipe's tasks, each in a fresh
interpreter (torch, numpy and cv2 already imported, as in the pipeline), and creating CPU sessions
for three ONNX files of the official files' sizes (plain conv stacks: the real graphs have more
nodes and cost more). MediaPipe's landmarker itself needs the official .task file, absent here."""
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORTS = {
    "onnxruntime": "import onnxruntime",
    "mediapipe.tasks": "from mediapipe.tasks.python import BaseOptions, vision",
}
SIZES_MB = {"det_10g": 16.9, "2d106det": 5.0, "landmark203": 3.0}


def import_seconds(statement: str) -> float:
    code = ("import time, numpy, cv2, torch; t = time.perf_counter(); " + statement +
            "; print(time.perf_counter() - t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def conv_stack(mb: float, layers: int = 30):
    import torch.nn as nn

    ch = int(((mb * 2**20 / 4) / (layers * 9)) ** 0.5)
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Conv2d(ch, ch, 3, padding=1), nn.ReLU())])


def main() -> None:
    for name, statement in IMPORTS.items():
        runs = [import_seconds(statement) for _ in range(3)]
        print(f"import {name}: {[round(r, 3) for r in runs]} s, median {statistics.median(runs):.3f}")
    import onnxruntime as ort
    import torch

    with tempfile.TemporaryDirectory() as folder:
        files = []
        for name, mb in SIZES_MB.items():
            model = conv_stack(mb)
            path = Path(folder) / f"{name}.onnx"
            torch.onnx.export(model, torch.zeros(1, model[0].in_channels, 64, 64), str(path),
                              input_names=["x"], output_names=["y"], dynamo=False)
            files.append(path)
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for path in files:
                ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            runs.append(time.perf_counter() - start)
        print(f"three CPU sessions ({', '.join(f'{p.stat().st_size / 2**20:.1f}' for p in files)} MiB): "
              f"{[round(r, 3) for r in runs]} s, median {statistics.median(runs):.3f}")


if __name__ == "__main__":
    main()
