"""Bad-input matrix, options: every numeric widget of every node at and beyond its bounds.

ComfyUI itself refuses a widget value outside the declared min/max before a prompt runs; these
tests call the nodes directly (as an API client or another pack could), so the library's own
validation is what answers. At each bound the node must run; beyond it, it must raise an
InputError naming the option and its range, or give the documented result, and a refusal
must leave no video, temporary file or cache entry.

The nodes run through the ComfyUI stand-ins on a pipeline of tiny networks; the LMDM sampler
is replaced by one that returns its noise, so the widget-driven parts of sampling (DDIM
schedule, windows and overlap, smoothing, seeding) run for real at every bound.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Optional

import pytest
import torch

from tests.comfy_stubs import load_pack

pack = load_pack()

import folder_paths  # noqa: E402
from comfy_api.latest import io  # noqa: E402
from ditto_core.audio.audio_features import AudioFeatures  # noqa: E402
from ditto_core.errors import InputError  # noqa: E402
from ditto_core.live.admission import MAX_STREAM_STEPS  # noqa: E402
from ditto_core.live.server import LiveAvatars  # noqa: E402
from ditto_core.models.keypoints import MOTION_DIM  # noqa: E402
from ditto_core.motion.lmdm_sampler import ddim_time_pairs, generate_motion  # noqa: E402
from ditto_core.motion.motion_options import MAX_POSE_OFFSET, MAX_STEPS, MotionOptions  # noqa: E402
from ditto_core.motion.motion_sequence import MotionSequence  # noqa: E402
from ditto_core.registration.options import MAX_SOURCE_SIDE  # noqa: E402
from ditto_core.render.rendered_frames import VideoFrames  # noqa: E402
from ditto_core.render.warp_decode import MAX_BATCH  # noqa: E402
from comfyui_ditto_pack.nodes.model_registry import REGISTRY, ModelHandle  # noqa: E402
from comfyui_ditto_pack.nodes.motion_nodes import SEED_MAX  # noqa: E402
from tests.hardening_support import files_under, hubert_stub, stub_aux, tiny_pipeline  # noqa: E402,F401
from tests.live_support import light_pipeline  # noqa: E402
from tests.test_nodes_execution import TinyDecoder, TinyWarp  # noqa: E402

NODES = {n.GET_SCHEMA().node_id: n for n in asyncio.run(asyncio.run(pack.comfy_entrypoint()).get_node_list())}
SIZE = 320
FACE = (70.0, 60.0, 250.0, 250.0)

pytestmark = pytest.mark.filterwarnings("ignore:Ditto warp\\+decode runs eagerly")


class NoiseSampler:
    """A window sampler that returns its starting noise: the windowing around it is real."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def sample(self, kp_cond, aud_cond, x_T, noise):
        return x_T


def noise_motion(source, audio: AudioFeatures, options: MotionOptions, progress=None) -> MotionSequence:
    """Stand-in for ``DittoPipeline.motion``: the DDIM schedule and ``generate_motion`` at the
    options' steps, seed, overlap and smoothing, mapped to small keypoint offsets."""
    assert len(ddim_time_pairs(options.steps)) == options.steps
    frames = audio.num_frames
    generator = torch.Generator().manual_seed(options.seed)
    vectors = generate_motion(NoiseSampler(options.steps), torch.zeros(MOTION_DIM), torch.zeros(frames, 8),
                              overlap=options.overlap_v2, smoothing=options.smo_k_d, generator=generator,
                              progress=progress)
    assert vectors.shape == (frames, MOTION_DIM) and torch.isfinite(vectors).all()
    kp = 0.01 * vectors[:, :63].reshape(frames, 21, 3)
    return MotionSequence(kp_source=torch.zeros_like(kp), kp_driving=kp,
                          source_index=torch.arange(frames) % len(source))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """ComfyUI-like output and user folders for this module."""
    root = tmp_path_factory.mktemp("comfy")
    folder_paths.set_output_directory(str(root / "output"))
    return root


@pytest.fixture(scope="module")
def handle(base, hubert_stub):
    """A model handle whose pipeline is tiny: stub face models, tiny networks, stand-in motion."""
    pipeline = tiny_pipeline(base, hubert_stub, stub_aux(base / "aux", (SIZE, SIZE), [FACE]))
    pipeline.models.warp_network, pipeline.models.decoder = TinyWarp().eval(), TinyDecoder().eval()
    pipeline.motion = noise_motion
    pipeline.compile = False
    handle = ModelHandle(str(base / "models"), "cpu", "fp32", str(base / "cache"))
    REGISTRY.pipeline(handle, build=lambda: pipeline)
    yield handle
    REGISTRY.release(handle)


def video_image(frames: int = 3) -> torch.Tensor:
    """ComfyUI IMAGE (frames, SIZE, SIZE, 3) float in [0, 1], a little different per frame."""
    ramp = torch.linspace(0, 1, SIZE)
    image = torch.stack([ramp[None].expand(SIZE, -1), ramp[:, None].expand(-1, SIZE), 1 - ramp[None].expand(SIZE, -1)], -1)
    return torch.stack([(image + 0.02 * i).clamp(0, 1) for i in range(frames)])


def speech(seconds: float = 1.0) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"waveform": 0.1 * torch.randn(1, 1, int(seconds * 16000), generator=g), "sample_rate": 16000}


def defaults(node_id: str) -> dict[str, Any]:
    """Every widget of a node at its schema default."""
    return {i.id: i.default for i in NODES[node_id].GET_SCHEMA().inputs if hasattr(i, "default")}


@pytest.fixture(scope="module")
def source(handle):
    return NODES["DittoRegisterAvatar"].execute(models=handle, image=video_image(), **defaults("DittoRegisterAvatar"))[0]


@pytest.fixture(scope="module")
def features(handle):
    return NODES["DittoAudioFeatures"].execute(models=handle, audio=speech())[0]


def run_node(node_id: str, widget: str, value, handle, source, features, base):
    """Execute ``node_id`` with every widget at its default but ``widget = value``."""
    inputs = {
        "DittoRegisterAvatar": dict(models=handle, image=video_image()),
        "DittoMotionOptions": dict(fade_to="source") if widget.startswith("fade") else {},
        "DittoLMDMSampler": dict(models=handle, source=source, audio_features=features),
        "DittoWarpDecode": dict(models=handle, source=source,
                                motion=noise_motion(source, features, MotionOptions(steps=2)), compile=False),
        "DittoSaveVideo": dict(frames=VideoFrames(frames=torch.zeros(3, 64, 64, 3, dtype=torch.uint8)),
                               filename_prefix="bounds/clip", preset="ultrafast"),
        "DittoTalkingHead": dict(models=handle, image=video_image(1), audio=speech(0.3), detect_face=True,
                                 filename_prefix="bounds/aio", preset="ultrafast"),
        "DittoPublishLiveAvatar": dict(models=handle, source=source, avatar_id="bounds"),
    }[node_id]
    if node_id != "DittoPublishLiveAvatar":
        return NODES[node_id].execute(**{**defaults(node_id), **inputs, widget: value})
    # Each run on avatars of its own (a runtime's steps are fixed by its first warm-up), with a
    # pipeline a live runtime can run on (the tiny one here has no stitching network).
    from comfyui_ditto_pack.nodes import live_nodes

    published, live_nodes.LIVE_AVATARS = live_nodes.LIVE_AVATARS, LiveAvatars()
    REGISTRY.pipeline = lambda models: light_pipeline(base)
    try:
        return NODES[node_id].execute(**{**defaults(node_id), **inputs, widget: value})
    finally:
        del REGISTRY.pipeline
        live_nodes.LIVE_AVATARS.shutdown()
        live_nodes.LIVE_AVATARS = published


@dataclass(frozen=True)
class WidgetCase:
    """A numeric widget, the values just beyond its bounds, and what each gives."""

    node_id: str
    widget: str
    below: Any
    above: Any
    below_error: Optional[str]  # regex of the InputError, None: accepted (documented result)
    above_error: Optional[str]
    behaviour: str

    def param(self):
        mark = pytest.mark.reliability(area="Options", case=f"{self.node_id.removeprefix('Ditto')} {self.widget}",
                                       behaviour=self.behaviour)
        return pytest.param(self, id=f"{self.node_id}.{self.widget}", marks=mark)


REFUSED = "at the bounds it runs; beyond them, InputError naming the option and its range, and nothing is written."
CASES = [
    WidgetCase("DittoRegisterAvatar", "crop_scale", 0.95, 5.05, "crop_scale must be a number between 1.0 and 5.0",
               "crop_scale must be a number between 1.0 and 5.0", f"1.0 to 5.0: {REFUSED}"),
    WidgetCase("DittoRegisterAvatar", "crop_vx_ratio", -1.005, 1.005, "crop_vx_ratio must be a number between -1.0 and 1.0",
               "crop_vx_ratio must be a number between -1.0 and 1.0", f"-1.0 to 1.0: {REFUSED}"),
    WidgetCase("DittoRegisterAvatar", "crop_vy_ratio", -1.005, 1.005, "crop_vy_ratio must be a number between -1.0 and 1.0",
               "crop_vy_ratio must be a number between -1.0 and 1.0", f"-1.0 to 1.0: {REFUSED}"),
    WidgetCase("DittoRegisterAvatar", "face_index", -2, 64, "face_index must be None .* or a face number >= 0",
               r"face_index 64 is out of range: 1 face\(s\)",
               "-1 (largest face) to 63; an index past the faces found, or below -1, is refused with the number "
               "of faces found; nothing is written."),
    WidgetCase("DittoRegisterAvatar", "max_size", 254, MAX_SOURCE_SIDE + 2, "max_size must be a whole number of "
               f"pixels between 256 and {MAX_SOURCE_SIDE}", "max_size must be a whole number of pixels between",
               f"256 to {MAX_SOURCE_SIDE} px: {REFUSED}"),
    WidgetCase("DittoRegisterAvatar", "video_smoothing", 0, 64, r"smo_k_s must be a whole number from 1 \(no smoothing\) to 1001", None,
               "1 (off) to 63; 0 is refused; wider windows up to 1001 are accepted and average over the whole "
               "clip."),
    *[WidgetCase("DittoMotionOptions", f"{axis}_offset", -MAX_POSE_OFFSET - 0.5, MAX_POSE_OFFSET + 0.5,
                 f"delta_{axis}=-60.5 is not allowed: expected degrees between -60 and 60",
                 f"delta_{axis}=60.5 is not allowed: expected degrees between -60 and 60",
                 f"-60 to 60 degrees: {REFUSED}") for axis in ("pitch", "yaw", "roll")],
    *[WidgetCase("DittoMotionOptions", name, -1, 251, rf"{name}=-1 is not allowed: expected an integer in \[0, 1000000\]",
                 None, "0 to 250 frames; negative is refused; longer fades up to a million frames are accepted "
                 "(one longer than the clip never completes).") for name in ("fade_in", "fade_out")],
    WidgetCase("DittoLMDMSampler", "steps", 0, MAX_STEPS + 1, r"steps=0 is not allowed: expected an integer in "
               r"\[1, 1000\]", r"steps=1001 is not allowed", f"1 to 1000 DDIM steps: {REFUSED}"),
    WidgetCase("DittoLMDMSampler", "seed", -1, SEED_MAX + 1, r"seed=-1 is not allowed", r"seed=18446744073709551616 "
               "is not allowed", f"0 to 2**64-1: {REFUSED}"),
    WidgetCase("DittoLMDMSampler", "overlap", -1, 80, r"overlap_v2=-1 is not allowed", r"overlap_v2=80 is not "
               r"allowed: expected an integer in \[0, 79\]", f"0 to 79 frames of the 80-frame window: {REFUSED}"),
    WidgetCase("DittoLMDMSampler", "smoothing", 0, 32, r"smo_k_d=0 is not allowed", None,
               "1 (off) to 31; 0 is refused; wider windows up to 1001 are accepted and smooth the pose more."),
    WidgetCase("DittoWarpDecode", "batch_size", -1, MAX_BATCH + 1, "batch_size must be >= 0", None,
               f"0 (automatic) to {MAX_BATCH}; negative is refused; larger batches are accepted and only cost "
               "memory."),
    WidgetCase("DittoSaveVideo", "crf", -1, 52, r"crf must be an integer in \[0, 51\]",
               r"crf must be an integer in \[0, 51\]", f"0 (lossless) to 51: {REFUSED}"),
    WidgetCase("DittoTalkingHead", "steps", 0, MAX_STEPS + 1, r"steps=0 is not allowed", r"steps=1001 is not allowed",
               "1 to 1000: beyond them refused before any work starts; nothing is written."),
    WidgetCase("DittoTalkingHead", "seed", -1, SEED_MAX + 1, r"seed=-1 is not allowed", r"seed=\d+ is not allowed",
               "0 to 2**64-1: beyond them refused before any work starts; nothing is written."),
    WidgetCase("DittoPublishLiveAvatar", "steps", 0, MAX_STREAM_STEPS + 1, r"steps=0 is not allowed: expected an integer "
               r"in \[1, 50\]", r"steps=51 is not allowed", "1 to 50 DDIM steps: beyond them refused before the avatar "
               "is published or a warm-up starts."),
    WidgetCase("DittoTalkingHead", "crf", -1, 52, r"crf must be an integer in \[0, 51\]",
               r"crf must be an integer in \[0, 51\]",
               "0 to 51: beyond them refused before registration starts; nothing is written."),
]


@pytest.mark.reliability(area="Options", case="every numeric widget of every node",
                         behaviour="Has a bounds case in this table; a new widget without one fails the suite.")
def test_every_numeric_widget_has_a_case():
    numeric = {(node_id, i.id) for node_id, node in NODES.items() for i in node.GET_SCHEMA().inputs
               if isinstance(i, (io.Int.Input, io.Float.Input))}
    assert numeric == {(c.node_id, c.widget) for c in CASES}


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_widget_bounds(case: WidgetCase, handle, source, features, base):
    widget = next(i for i in NODES[case.node_id].GET_SCHEMA().inputs if i.id == case.widget)
    assert widget.min is not None and widget.max is not None, "every numeric widget declares its bounds"
    assert case.below < widget.min and case.above > widget.max
    run = lambda value: run_node(case.node_id, case.widget, value, handle, source, features, base)  # noqa: E731

    for bound in (widget.min, widget.max):
        if (case.node_id, case.widget, bound) == ("DittoRegisterAvatar", "face_index", widget.max):
            with pytest.raises(InputError, match="face_index 63 is out of range"):  # the image has one face
                run(bound)
        else:
            assert run(bound) is not None
    for value, error in ((case.below, case.below_error), (case.above, case.above_error)):
        outputs, cache = files_under(base / "output"), files_under(base / "cache")
        if error is None:
            assert run(value) is not None
            continue
        with pytest.raises(InputError, match=error):
            run(value)
        assert files_under(base / "output") == outputs and files_under(base / "cache") == cache


@pytest.mark.reliability(area="Options", case="Save Talking Head Video preset",
                         behaviour="Any libx264 preset name is accepted; another word is refused, listing the "
                                   "presets, before a file is created.")
def test_unknown_preset(handle, source, features, base):
    outputs = files_under(base / "output")
    with pytest.raises(InputError, match="preset must be one of ultrafast, .*veryslow; got 'fastest'"):
        run_node("DittoSaveVideo", "preset", "fastest", handle, source, features, base)
    assert files_under(base / "output") == outputs
    assert run_node("DittoSaveVideo", "preset", "veryslow", handle, source, features, base) is not None


@pytest.mark.reliability(area="Options", case="Ditto Talking Head steps, crf, preset out of range",
                         behaviour="Refused before any registration, audio or motion work starts.")
def test_refused_all_in_one_does_no_work(handle, source, features, base, monkeypatch):
    """The all-in-one node checks its settings before registering anything."""
    from comfyui_ditto_pack.nodes import all_in_one

    monkeypatch.setattr(all_in_one, "register_source", lambda *a, **k: pytest.fail("registration ran"))
    for widget, value in (("steps", 0), ("crf", 99), ("preset", "warp")):
        with pytest.raises(InputError):
            run_node("DittoTalkingHead", widget, value, handle, source, features, base)


@pytest.mark.reliability(area="Options", case="Save Talking Head Video crf 0 and 51",
                         behaviour="Both ends of the range write a playable MP4 with every frame; no partial file.")
def test_saved_video_at_the_bounds_is_playable(handle, source, features, base):
    import av

    for crf in (0, 51):
        saved = run_node("DittoSaveVideo", "crf", crf, handle, source, features, base).ui["images"][0]
        with av.open(str(base / "output" / saved["subfolder"] / saved["filename"])) as container:
            assert sum(1 for _ in container.decode(video=0)) == 3
    assert not [n for n in files_under(base / "output") if ".part" in n]
