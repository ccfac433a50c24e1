"""Load Ditto Models and Unload Ditto Models."""
from __future__ import annotations

from typing import Any

from comfy_api.latest import io

from ditto_core import download
from ditto_core.errors import InputError
from ditto_core.precision import NETWORK_PRECISIONS

from . import ditto_types as T
from .model_registry import REGISTRY, ModelHandle, device_choices, resolve_device
from .paths import ROOT_CHOICE, avatar_cache_dir, model_folder_choices, resolve_model_folder
from .runtime import comfy_progress, timed_stage


class LoadDittoModels(io.ComfyNode):
    """The six Ditto networks, on one device, in one precision, for every later node."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoLoadModels",
            display_name="Load Ditto Models",
            description=(
                "Loads Ditto's networks from ComfyUI/models/ditto (or a 'ditto' entry of extra_model_paths.yaml). "
                "Get them from HuggingFace digital-avatar/ditto-talkinghead, folder ditto_pytorch/ "
                "(models/*.pth next to aux_models/)."
            ),
            inputs=[
                io.Combo.Input("model_folder", options=model_folder_choices(), default=ROOT_CHOICE,
                               tooltip="Folder under models/ditto with the files: '.' is models/ditto itself. "
                                       "Networks may sit in it or in models/ or ditto_pytorch/models/ below it, "
                                       "face models and HuBERT in aux_models/ or ditto_pytorch/aux_models/."),
                io.Combo.Input("device", options=device_choices(), default="auto",
                               tooltip="Where every Ditto stage runs; 'auto' is ComfyUI's device (its GPU; the CPU "
                                       "when it runs with --cpu or has no GPU)."),
                io.Combo.Input("precision", options=["auto", *NETWORK_PRECISIONS], default="auto",
                               tooltip="fp32 matches the reference exactly; fp16/bf16 (GPU only) render about "
                                       "twice as fast; 'auto' is fp16 on a GPU, fp32 on the CPU. The motion "
                                       "diffusion always runs in fp32."),
                io.Boolean.Input("download_missing", default=False,
                                 tooltip="Fetch missing official files from HuggingFace ($HF_ENDPOINT for a mirror); "
                                         "each file is verified before it is put in place, and an "
                                         "interrupted download resumes on the next run."),
            ],
            outputs=[T.MODELS.Output(display_name="models", tooltip="Handle on the loaded networks.")],
        )

    @classmethod
    def execute(cls, model_folder: str, device: str, precision: str, download_missing: bool) -> io.NodeOutput:
        folder = resolve_model_folder(model_folder)
        torch_device = resolve_device(device)
        if precision == "auto":
            precision = "fp16" if torch_device.type == "cuda" else "fp32"
        if torch_device.type == "cpu" and precision != "fp32":
            raise InputError(
                f"precision '{precision}' is a GPU fast path; on the CPU choose fp32 (or pick a CUDA device)."
            )
        with timed_stage("Load models", torch_device) as timer:
            if download_missing:
                download.download_missing(folder, progress=comfy_progress())
            handle = ModelHandle(str(folder), str(torch_device), precision, str(avatar_cache_dir()))
            # The first render's CUDA libraries and kernel choices get ready while the workflow's
            # next nodes (avatar, audio, motion) run: the UI never waits for them (CUDA only).
            REGISTRY.pipeline(handle).start_warmup()
        return io.NodeOutput(handle, ui=timer.ui())


class UnloadDittoModels(io.ComfyNode):
    """Frees the networks (and compiled engines) that Ditto holds in VRAM."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoUnloadModels",
            display_name="Unload Ditto Models",
            description=(
                "Releases Ditto's loaded networks, compiled engines and face/audio models. Connect 'after' to "
                "the last Ditto output the workflow needs (Paste Back's frames, the talking-head VIDEO): ComfyUI "
                "runs an output node as early as its inputs allow, so without it the models may be released "
                "before the render and loaded again by it. ComfyUI keeps every node's last output cached, so VRAM "
                "held by sources, renders and frames is only freed when those nodes re-run or are removed; the "
                "networks themselves are freed here. A later Ditto node reloads them on demand."
            ),
            inputs=[
                io.Boolean.Input("enabled", default=True, tooltip="Switch off to keep the models loaded."),
                T.MODELS.Input("models", optional=True,
                               tooltip="Release this model set; leave unconnected to release every Ditto model set."),
                io.AnyType.Input("after", optional=True,
                                 tooltip="Any output (e.g. the frames or the VIDEO): the models are released only "
                                         "once it is made. Its value is not used."),
            ],
            outputs=[],
            is_output_node=True,
            not_idempotent=True,
        )

    @classmethod
    def execute(cls, enabled: bool, models: ModelHandle | None = None, after: Any = None) -> io.NodeOutput:
        released = REGISTRY.release(models) if enabled else 0
        return io.NodeOutput(ui={"text": [f"released {released} Ditto model set(s)"]})

    @classmethod
    def fingerprint_inputs(cls, **kwargs) -> float:
        return float("nan")  # never equal to itself: release on every run, not only when inputs change


NODES = [LoadDittoModels, UnloadDittoModels]
