"""DDIM sampling of the LMDM: schedule, 25-step parity, windowing, seeding, CUDA graphs."""
from __future__ import annotations

import logging
import math
import threading

import numpy as np
import pytest
import torch

from ditto_core import compilation, cuda_graphs
from ditto_core.errors import InputError, Interrupted
from ditto_core.models.checkpoints import load_network
from ditto_core.models.lmdm import LMDM
from ditto_core.motion import lmdm_sampler
from ditto_core.motion.lmdm_sampler import DDIMSampler, ddim_time_pairs, generate_motion, iter_motion, sample_window
from tests.parity import rel_l2

W, D = 80, 265


@pytest.fixture(scope="module")
def lmdm(official_ckpt_dir) -> LMDM:
    return load_network("lmdm", official_ckpt_dir)


@pytest.fixture(scope="module")
def ddim_case(load_case) -> dict:
    return load_case("lmdm_ddim")


# ---- schedule and one window ------------------------------------------------------------


def test_time_pairs_match_reference(ddim_case):
    meta = ddim_case["meta"]
    pairs = ddim_time_pairs(25)
    assert pairs == [tuple(p) for p in meta["time_pairs"]]
    assert [t for t, _ in pairs] == meta["time_cond_list"]
    assert pairs[0] == (999, 959) and pairs[-1] == (39, -1)


def test_step_coefficients_match_reference(ddim_case):
    meta = ddim_case["meta"]
    sampler = DDIMSampler(LMDM(), 25)
    # The reference's float32 scalars differ from ours by at most one ulp; c = sqrt(1 - ᾱ' - σ²)
    # cancels catastrophically at the first step, where it is ~1e-3, so compare it absolutely.
    np.testing.assert_allclose(sampler.alpha_next_sqrt, meta["alpha_next_sqrt"], rtol=2e-7)
    np.testing.assert_allclose(sampler.sigma, meta["sigma"], rtol=2e-7)
    np.testing.assert_allclose(sampler.c, meta["c"], rtol=1e-6, atol=1e-4)


def test_step_coefficients_are_finite_for_every_step_count():
    # 3 steps once gave c[0] = sqrt(-1e-8) = NaN, and with it a NaN motion sequence.
    model = LMDM()
    for steps in range(1, 201):
        sampler = DDIMSampler(model, steps)
        assert all(math.isfinite(v) and v >= 0 for v in (*sampler.c, *sampler.sigma, *sampler.alpha_next_sqrt)), steps


def test_ddim_25_steps_parity(lmdm, ddim_case):
    inp = ddim_case["inputs"]
    assert inp["sampling_timesteps"] == 25
    x0 = sample_window(lmdm, inp["kp_cond"], inp["aud_cond"], 25, x_T=inp["x_T"], noise=inp["noise_list"])
    assert rel_l2(x0, ddim_case["outputs"]["x0"]) < 1e-4


def test_window_seeding(lmdm, ddim_case):
    inp = ddim_case["inputs"]

    def run(seed: int) -> torch.Tensor:
        return sample_window(lmdm, inp["kp_cond"], inp["aud_cond"], 2, generator=torch.Generator().manual_seed(seed))

    first, again, other = run(7), run(7), run(8)
    assert torch.equal(first, again)
    assert rel_l2(other, first) > 1e-3


def test_injected_noise_shapes_are_checked(lmdm, ddim_case):
    inp = ddim_case["inputs"]
    with pytest.raises(InputError, match="noise has shape"):
        sample_window(lmdm, inp["kp_cond"], inp["aud_cond"], 25, x_T=inp["x_T"], noise=inp["noise_list"][:5])
    with pytest.raises(InputError, match="steps must be between 1 and 1000"):
        DDIMSampler(lmdm, 0)


# ---- precision modes ------------------------------------------------------------------------


def _tf32_setting():
    matmul = torch.backends.cuda.matmul
    return matmul.fp32_precision if hasattr(matmul, "fp32_precision") else matmul.allow_tf32


def test_bf16_sampler_is_close_to_fp32_and_leaves_the_network_alone(lmdm, ddim_case):
    inp = ddim_case["inputs"]
    args = (inp["kp_cond"], inp["aud_cond"], inp["x_T"], inp["noise_list"][:4])
    want = DDIMSampler(lmdm, 5, precision="fp32").sample(*args)
    sampler = DDIMSampler(lmdm, 5, precision="bf16")
    got = sampler.sample(*args)
    assert got.dtype == torch.float32
    # A real bf16 run: not fp32 bit for bit, but a few bf16 ulps relative to the window.
    assert 1e-5 < rel_l2(got, want) < 3e-2
    assert all(p.dtype == torch.float32 for p in lmdm.parameters())
    assert sampler._net is not lmdm


def test_tf32_mode_restores_the_global_setting(lmdm, ddim_case):
    inp = ddim_case["inputs"]
    before = _tf32_setting()
    for precision in ("tf32", "fp32"):
        sampler = DDIMSampler(lmdm, 2, precision=precision)
        assert sampler._net is lmdm  # no copy outside bf16
        sampler.sample(inp["kp_cond"], inp["aud_cond"], inp["x_T"], inp["noise_list"][:1])
        assert _tf32_setting() == before


def test_compiled_step_is_traced_once_for_every_step_count(monkeypatch):
    """Changing the steps widget must not recompile the step (Dynamo gives up after 8 graphs)."""
    import torch._dynamo

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: real_compile(fn, backend="eager", **kwargs))
    monkeypatch.setattr(lmdm_sampler, "compile_available", lambda device: (True, ""))
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    model = LMDM().eval().requires_grad_(False)
    kp, aud, x_T = torch.randn(1, D), torch.randn(1, W, 1103), torch.randn(1, W, D)
    for steps in (2, 3, 5):
        compiled = DDIMSampler(model, steps, compile=True)
        noise = torch.randn(compiled.noise_shape(1))
        want = DDIMSampler(model, steps).sample(kp, aud, x_T, noise)
        assert rel_l2(compiled.sample(kp, aud, x_T, noise), want) < 1e-6
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


@pytest.mark.reliability(
    area="Soak and faults",
    case="a compiled LMDM sampler (--lmdm-compile) compiles a window shape, eagerly (its recording put off, or no "
         "CUDA graphs) while another thread would record a graph",
    behaviour="its first window at each shape is marked as compiling: recordings on other threads are put off (or "
              "wait) until it ends, since Inductor times its kernels between device synchronises")
def test_a_compiled_samplers_first_window_at_each_shape_puts_recordings_elsewhere_off(monkeypatch):
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: real_compile(fn, backend="eager", **kwargs))
    monkeypatch.setattr(lmdm_sampler, "compile_available", lambda device: (True, ""))
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: False)
    model = LMDM().eval().requires_grad_(False)

    def recording_elsewhere_allowed() -> bool:
        given = []

        def record() -> None:
            with cuda_graphs.recording_turn(torch.device("cuda")) as allowed:
                given.append(allowed)

        thread = threading.Thread(target=record)
        thread.start()
        thread.join(10)
        return given == [True]

    for compile_ in (True, False):
        sampler = DDIMSampler(model, 2, cuda_graph=False, compile=compile_)
        loop, seen = sampler._loop, []
        sampler._loop = lambda *args: seen.append(recording_elsewhere_allowed()) or loop(*args)
        for batch in (1, 1, 2):
            kp, aud, x_T = torch.randn(batch, D), torch.randn(batch, W, 1103), torch.randn(batch, W, D)
            sampler.sample(kp, aud, x_T, torch.randn(sampler.noise_shape(batch)))
        # Compiled: put off at each new shape's first window only; uncompiled: never.
        assert seen == ([False, True, False] if compile_ else [True, True, True])
    torch._dynamo.reset()


def test_compile_where_it_cannot_run_samples_eagerly_and_says_so_once(monkeypatch, caplog):
    from torch._dynamo.exc import BackendCompilerFailed

    monkeypatch.setattr(compilation, "_announced", set())
    model = LMDM().eval().requires_grad_(False)
    kp, aud, x_T = torch.randn(1, D), torch.randn(1, W, 1103), torch.randn(1, W, D)
    noise = torch.randn(1, 1, W, D)
    want = DDIMSampler(model, 2).sample(kp, aud, x_T, noise)
    with caplog.at_level(logging.WARNING, logger=lmdm_sampler.__name__):
        for _ in range(2):  # the CPU: never compiled
            sampler = DDIMSampler(model, 2, compile=True)
            assert not sampler.compile and torch.equal(sampler.sample(kp, aud, x_T, noise), want)

        def failing_compile(fn, **kwargs):
            def call(*args):
                raise BackendCompilerFailed(failing_compile, RuntimeError("no C++ compiler"), None)

            return call

        monkeypatch.setattr(lmdm_sampler, "compile_available", lambda device: (True, ""))
        monkeypatch.setattr(torch, "compile", failing_compile)
        sampler = DDIMSampler(model, 2, compile=True)
        assert sampler.compile
        assert torch.equal(sampler.sample(kp, aud, x_T, noise), want) and not sampler.compile
    assert [r.getMessage() for r in caplog.records] == [
        "Ditto LMDM sampler runs without torch.compile: compilation needs a CUDA device",
        "Ditto LMDM sampler runs without torch.compile: compilation failed (BackendCompilerFailed: "
        + str(BackendCompilerFailed(failing_compile, RuntimeError("no C++ compiler"), None)) + ")",
    ]


def test_under_cuda_malloc_async_a_recorded_sampler_keeps_its_graph_and_drops_the_compile(monkeypatch, caplog):
    # ComfyUI's default allocator cannot record compiled kernels into a CUDA graph; at batch 1 the
    # graph is worth more than the compile, so the sampler records its eager step there.
    monkeypatch.setattr(compilation, "_announced", set())
    monkeypatch.setattr(lmdm_sampler, "compile_available", lambda device: (True, ""))
    monkeypatch.setattr(lmdm_sampler, "uses_cuda_malloc_async", lambda device: True)
    model = LMDM().eval().requires_grad_(False)
    with caplog.at_level(logging.WARNING, logger=lmdm_sampler.__name__):
        recorded = DDIMSampler(model, 2, compile=True, cuda_graph=True)
        unrecorded = DDIMSampler(model, 2, compile=True, cuda_graph=False)
    assert not recorded.compile and recorded.cuda_graph and recorded._guided_step == recorded._net.guided_step
    assert unrecorded.compile  # nothing recorded: compiled kernels run as they are
    assert [r.getMessage() for r in caplog.records] == [
        "Ditto LMDM sampler runs without torch.compile: the cudaMallocAsync allocator (ComfyUI's default) "
        "cannot record compiled steps"]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("steps", [1, 2, 5])
def test_a_recorded_step_reading_its_step_from_the_device_computes_what_the_loop_does(precision, steps):
    """graph_span="step" replays one recorded step per step; the step it runs is read from a counter
    on the device (its time rows, timestep and update constants gathered there). Run eagerly, that
    step's arithmetic is bit for bit the loop's, and the counter ends past the last step."""
    torch.manual_seed(0)
    model = LMDM().eval().requires_grad_(False)
    sampler = DDIMSampler(model, steps, cuda_graph=False, precision=precision)
    for batch in (1, 2):
        kp, aud, x_T = torch.randn(batch, D), torch.randn(batch, W, 1103), torch.randn(batch, W, D)
        noise = torch.randn(sampler.noise_shape(batch))
        want = sampler.sample(kp, aud, x_T, noise)
        shared = sampler._prologue_tensors(kp, aud)
        x, rows, index = x_T.clone(), torch.zeros((steps, batch, W, D)), torch.zeros(1, dtype=torch.long)
        rows[: steps - 1] = noise
        for _ in range(steps):
            got = sampler._recorded_step(x, rows, index, shared)
        assert torch.equal(got, want)
        assert index.tolist() == [steps]


def test_an_unknown_graph_span_is_refused():
    with pytest.raises(InputError, match="graph span must be one of window, step, got 'layer'"):
        DDIMSampler(LMDM().eval(), 2, graph_span="layer")


def test_unknown_precision_is_refused(lmdm):
    with pytest.raises(InputError, match="precision must be one of fp32, tf32, bf16"):
        DDIMSampler(lmdm, 25, precision="fp16")


# ---- windowing over a sequence ------------------------------------------------------------


class StubSampler:
    """Deterministic stand-in for a window: prediction = condition channels + half the reference frame.

    Records every (kp_cond, aud_cond) it was given.
    """

    steps = 3

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def sample(self, kp_cond, aud_cond, x_T, noise):
        assert x_T.shape == (1, W, D) and noise.shape == (self.steps - 1, 1, W, D)
        self.calls.append((kp_cond.clone(), aud_cond.clone()))
        return aud_cond[..., :D] + 0.5 * kp_cond[:, None, :]


def stub_predict(kp: np.ndarray, window: np.ndarray) -> np.ndarray:
    return window[:, :D] + 0.5 * kp[None, :]


def reference_smooth(seq, s, e, smooth_k):
    """Ditto's ``Audio2Motion._smo``: frames [s, e) of the pose channels, averaged from a copy."""
    if smooth_k <= 1:
        return seq
    src, h, n = seq.copy(), smooth_k // 2, seq.shape[0]
    for i in range(s, e):
        seq[i, :202] = src[max(0, i - h) : min(n, i + h + 1), :202].mean(0)
    return seq


def reference_join(res, pred, valid, fuse, smooth_k):
    """Ditto's ``Audio2Motion.__call__`` after the LMDM: the first window, or ``_fuse`` + ``_smo``."""
    if res is None:
        return reference_smooth(pred.copy(), 0, W, smooth_k)
    alpha = (np.arange(fuse, dtype=np.float32) / max(fuse, 1))[:, None]
    n = len(res)
    res[n - fuse :] = res[n - fuse :] * (1 - alpha) + pred[W - valid - fuse : W - valid] * alpha
    res = np.concatenate([res, pred[W - valid :]])
    return reference_smooth(res, len(res) - valid - fuse, len(res) - valid + 1, smooth_k)


def reference_windowing(kp_source, cond, overlap, smooth_k, fix_kp_cond=0, fix_dims=None):
    """Ditto's offline audio-to-motion loop, transcribed over numpy with :func:`stub_predict`."""
    valid, fuse = W - overlap, overlap
    kp, res, idx, clip = kp_source.copy(), None, 0, 0
    while idx < len(cond):
        win = cond[idx : idx + W]
        if len(win) < W:
            win = np.concatenate([win, np.repeat(win[-1:], W - len(win), 0)])
        res = reference_join(res, stub_predict(kp, win), valid, fuse, smooth_k)
        clip += 1
        last = res[len(res) - overlap - 1].copy()
        if fix_kp_cond and clip % fix_kp_cond == 0:
            kp = kp_source.copy()
            if fix_dims:
                kp[fix_dims[0] : fix_dims[1]] = last[fix_dims[0] : fix_dims[1]]
        else:
            kp = last
        idx += valid
    return reference_smooth(res[: len(cond)].copy(), 0, len(cond), smooth_k)


def _inputs(frames: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(D, generator=gen), torch.randn(frames, 300, generator=gen)


@pytest.mark.parametrize(
    "frames, overlap, smooth_k, fix, dims, windows",
    [
        (50, 10, 3, 0, None, 1),  # shorter than a window: padded, then cut
        (80, 10, 3, 0, None, 2),  # one window is not enough: the hop is 70
        (200, 10, 3, 0, None, 3),  # three windows, the last one padded
        (200, 10, 4, 0, None, 3),  # even kernels widen to 5 frames, as in the reference
        (210, 0, 1, 0, None, 3),  # no overlap, no smoothing: plain concatenation
        (300, 20, 5, 2, (1, 199), 5),  # periodic reset to the source frame, keeping pose bins
    ],
)
def test_windowing_matches_reference_loop(frames, overlap, smooth_k, fix, dims, windows):
    kp_source, cond = _inputs(frames)
    stub = StubSampler()
    with torch.no_grad():
        got = generate_motion(
            stub, kp_source, cond, overlap=overlap, smoothing=smooth_k, fix_kp_cond=fix, fix_kp_cond_dims=dims,
            generator=torch.Generator().manual_seed(0),
        )
    assert got.shape == (frames, D) and len(stub.calls) == windows

    expected = reference_windowing(kp_source.numpy(), cond.numpy(), overlap, smooth_k, fix, dims)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)

    # The conditions each window saw: consecutive slices, the last padded with the final frame.
    hop = W - overlap
    for w, (kp, aud) in enumerate(stub.calls):
        part = cond[w * hop : w * hop + W]
        torch.testing.assert_close(aud[0, : len(part)], part)
        torch.testing.assert_close(aud[0, len(part) :], cond[-1].expand(W - len(part), -1))
    torch.testing.assert_close(stub.calls[0][0][0], kp_source)


@pytest.mark.parametrize(
    "frames, overlap, smooth_k, fix, dims",
    [(50, 10, 3, 0, None), (80, 10, 3, 0, None), (200, 10, 3, 0, None), (200, 10, 4, 0, None),
     (210, 0, 1, 0, None), (300, 20, 5, 2, (1, 199)), (141, 10, 3, 0, None), (700, 75, 3, 0, None)],
)
def test_rows_settled_window_by_window_are_final(frames, overlap, smooth_k, fix, dims):
    """iter_motion's rows [0, ready) never change again, grow with every window and end as
    generate_motion's whole result: a renderer can start on them while later windows sample."""
    kp_source, cond = _inputs(frames)
    schedule = dict(overlap=overlap, smoothing=smooth_k, fix_kp_cond=fix, fix_kp_cond_dims=dims)
    whole = generate_motion(StubSampler(), kp_source, cond, generator=torch.Generator().manual_seed(0), **schedule)
    seen, buffer = [], None
    for ready, motion in iter_motion(StubSampler(), kp_source, cond, generator=torch.Generator().manual_seed(0),
                                     **schedule):
        assert buffer is None or motion is buffer  # one buffer, filled in place
        buffer = motion
        seen.append((ready, motion[:ready].clone()))
    readies = [ready for ready, _ in seen]
    assert readies == sorted(set(readies)) and readies[-1] == frames
    assert len(seen) == -(-frames // (W - overlap))  # every window settles rows (the hop exceeds the smoothing)
    for ready, rows in seen:
        assert torch.equal(rows, whole[:ready])  # bit for bit: the same sums in the same order


def test_carry_over_uses_frame_before_overlap():
    kp_source, cond = _inputs(200)
    stub = StubSampler()
    out = generate_motion(stub, kp_source, cond, overlap=10, smoothing=1)
    # With smoothing off the carried frame is exactly the output frame before the next overlap,
    # as blended when the window was produced (frame 69 from window 0, frame 139 after window 1).
    torch.testing.assert_close(stub.calls[1][0][0], out[69])
    torch.testing.assert_close(stub.calls[2][0][0], out[139])


class ConstantSampler:
    """Window w predicts the constant w + 1 everywhere."""

    steps = 2

    def __init__(self) -> None:
        self.windows = 0

    def sample(self, kp_cond, aud_cond, x_T, noise):
        self.windows += 1
        return torch.full((1, W, D), float(self.windows))


def test_overlap_crossfade_formula():
    out = generate_motion(ConstantSampler(), torch.zeros(D), torch.zeros(150, 8), overlap=10, smoothing=1)
    ramp = torch.arange(10, dtype=torch.float32) / 10
    torch.testing.assert_close(out[:70, 0], torch.ones(70))
    torch.testing.assert_close(out[70:80, 0], 1 * (1 - ramp) + 2 * ramp)
    torch.testing.assert_close(out[80:140, 0], torch.full((60,), 2.0))
    torch.testing.assert_close(out[140:150, 0], 2 * (1 - ramp) + 3 * ramp)


def test_sequence_seeding_and_cancellation(lmdm, ddim_case):
    cond = ddim_case["inputs"]["aud_cond"][0, :30]
    kp = ddim_case["inputs"]["kp_cond"][0]
    sampler = DDIMSampler(lmdm, 2)

    def run(seed: int) -> torch.Tensor:
        return generate_motion(sampler, kp, cond, generator=torch.Generator().manual_seed(seed))

    first, again, other = run(3), run(3), run(4)
    assert first.shape == (30, D)
    assert torch.equal(first, again)
    assert rel_l2(other, first) > 1e-3

    def cancel(done: int, total: int) -> None:
        raise Interrupted("cancelled")

    with pytest.raises(Interrupted):
        generate_motion(StubSampler(), kp, torch.zeros(200, 300), progress=cancel)


def test_sequence_inputs_are_checked():
    kp, cond = _inputs(100)
    with pytest.raises(InputError, match="overlap"):
        generate_motion(StubSampler(), kp, cond, overlap=80)
    with pytest.raises(InputError, match="cond has shape"):
        generate_motion(StubSampler(), kp, cond[:0])
    with pytest.raises(InputError, match="kp_source"):
        generate_motion(StubSampler(), kp[:63], cond)


# ---- CUDA graphs -----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("span", lmdm_sampler.GRAPH_SPANS)
def test_cuda_graph_replay_equals_eager(span):
    torch.manual_seed(0)
    model = LMDM().cuda().eval()
    eager, graphed = DDIMSampler(model, 25, cuda_graph=False), DDIMSampler(model, 25, cuda_graph=True, graph_span=span)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):  # first call captures, later calls replay with new inputs
        kp = torch.randn(2, D, device="cuda", generator=gen)
        aud = torch.randn(2, W, 1103, device="cuda", generator=gen)
        x_T = torch.randn(2, W, D, device="cuda", generator=gen)
        noise = torch.randn(eager.noise_shape(2), device="cuda", generator=gen)
        want = eager.sample(kp, aud, x_T, noise)
        got = graphed.sample(kp, aud, x_T, noise)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert len(graphed._graphs) == 1

    cond = torch.randn(300, 1103, device="cuda", generator=gen)
    seqs = [
        generate_motion(s, kp[0], cond, generator=torch.Generator(device="cuda").manual_seed(5))
        for s in (eager, graphed)
    ]
    torch.testing.assert_close(seqs[1], seqs[0], rtol=1e-6, atol=1e-6)


def _on_a_new_thread(function, *args) -> None:
    """``function(*args)`` on a thread of its own; what it raises is raised here."""
    raised = []

    def target():
        try:
            function(*args)
        except BaseException as error:
            raised.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if raised:
        raise raised[0]


@pytest.mark.gpu
def test_a_recording_put_off_skips_its_warm_up_on_the_thread_that_ran_the_window_eagerly(monkeypatch):
    """Under ComfyUI's allocator a window whose recording is put off (background GPU work running)
    runs eagerly; the recording that follows on the same thread needs no eager warm-up of its own
    (one network pass fewer), another thread's still does, and every answer equals eager sampling."""
    from ditto_core import cuda_graphs
    from ditto_core.cuda_graphs import beside_captures

    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)
    torch.manual_seed(0)
    model = LMDM().cuda().eval().requires_grad_(False)
    eager, graphed = DDIMSampler(model, 5, cuda_graph=False), DDIMSampler(model, 5, cuda_graph=True)
    passes = []
    run = graphed._run

    def counted(*inputs):
        passes.append(threading.get_ident())
        return run(*inputs)

    graphed._run = counted  # what sample() and its recordings call
    gen = torch.Generator(device="cuda").manual_seed(0)

    def window(batch: int) -> tuple:
        return (torch.randn(batch, D, device="cuda", generator=gen), torch.randn(batch, W, 1103, device="cuda", generator=gen),
                torch.randn(batch, W, D, device="cuda", generator=gen),
                torch.randn(eager.noise_shape(batch), device="cuda", generator=gen))

    def check(batch: int) -> None:
        args = window(batch)
        torch.testing.assert_close(graphed.sample(*args), eager.sample(*args), rtol=1e-6, atol=1e-6)

    busy, leave = threading.Event(), threading.Event()

    def background():
        with beside_captures():
            busy.set()
            assert leave.wait(60)

    worker = threading.Thread(target=background)
    worker.start()
    try:
        assert busy.wait(60)
        check(1)
        check(2)
        assert len(passes) == 2 and not graphed._graphs  # put off: eager, one pass each
        _on_a_new_thread(check, 2)  # another thread's batch-2 window is put off too
    finally:
        leave.set()
        worker.join()
    check(1)  # recorded without a warm-up: one pass (the recording itself)
    assert len(passes) == 4 and len(graphed._graphs) == 1
    _on_a_new_thread(check, 2)
    # That thread never ran the batch-2 window eagerly itself: warm-up and recording, two passes.
    assert passes[4:] == [passes[4]] * 2 and passes[4] != threading.get_ident()
    check(1)
    check(2)
    assert len(passes) == 6 and len(graphed._graphs) == 2  # replays


@pytest.mark.gpu
@pytest.mark.reliability(
    area="Soak and faults",
    case="an LMDM window graph recorded in inference mode (the motion-ahead worker) replayed under no_grad "
         "(a later clip with fades, a motion() call), or the reverse",
    behaviour="the replay copies its inputs in inference mode and answers as eager sampling does (the copy was "
              "refused before and the clip failed)")
@pytest.mark.parametrize("recorded_in, replayed_in", [("inference", "no_grad"), ("no_grad", "inference")])
@pytest.mark.parametrize("span", lmdm_sampler.GRAPH_SPANS)
def test_a_window_recorded_in_one_grad_mode_replays_in_the_other(recorded_in, replayed_in, span):
    """A pipeline with ``motion_ahead`` samples its clips' motion on a worker in inference mode, where
    the window graph is recorded; a later clip with fades (never ahead) or a ``motion()`` call samples
    under ``no_grad``, and the replay's input copy was refused ("Inplace update to inference tensor
    outside InferenceMode": session 35's CLI, with the motion ahead by default, crashed so)."""
    modes = {"inference": torch.inference_mode, "no_grad": torch.no_grad}
    torch.manual_seed(0)
    model = LMDM().cuda().eval().requires_grad_(False)
    eager, graphed = DDIMSampler(model, 5, cuda_graph=False), DDIMSampler(model, 5, cuda_graph=True, graph_span=span)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for mode in (recorded_in, replayed_in, replayed_in):
        args = (torch.randn(1, D, device="cuda", generator=gen), torch.randn(1, W, 1103, device="cuda", generator=gen),
                torch.randn(1, W, D, device="cuda", generator=gen),
                torch.randn(eager.noise_shape(1), device="cuda", generator=gen))
        with modes[mode]():
            got = graphed.sample(*args)
        torch.testing.assert_close(got, eager.sample(*args), rtol=1e-6, atol=1e-6)
    assert len(graphed._graphs) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("span", lmdm_sampler.GRAPH_SPANS)
def test_compiled_graph_equals_eager(precision, span):
    """torch.compile'd steps recorded into the window graph (or the step graph) give the eager
    answer of the same precision."""
    torch.manual_seed(0)
    model = LMDM().cuda().eval().requires_grad_(False)
    eager = DDIMSampler(model, 25, cuda_graph=False, precision=precision)
    compiled = DDIMSampler(model, 25, cuda_graph=True, precision=precision, compile=True, graph_span=span)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(2):
        kp = torch.randn(1, D, device="cuda", generator=gen)
        aud = torch.randn(1, W, 1103, device="cuda", generator=gen)
        x_T = torch.randn(1, W, D, device="cuda", generator=gen)
        noise = torch.randn(eager.noise_shape(1), device="cuda", generator=gen)
        want = eager.sample(kp, aud, x_T, noise)
        # Inductor reorders reductions: fp32 agrees to rounding, bf16 to a few bf16 ulps.
        assert rel_l2(compiled.sample(kp, aud, x_T, noise), want) < (1e-5 if precision == "fp32" else 2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("malloc_async", [False, True])
@pytest.mark.parametrize("steps", [1, 2, 25])
def test_step_graphs_replay_the_window_graphs_windows_bit_for_bit(monkeypatch, steps, malloc_async):
    """graph_span="step" records the prologue and one step and replays the step once per step;
    every window equals the whole window's graph exactly (the same kernels, the step's constants
    gathered on the device), at any step count, batch size and precision, and under
    cudaMallocAsync (whose recordings are replayed once as they are made, advancing the counter).
    Under the real cudaMallocAsync (PYTORCH_CUDA_ALLOC_CONF) the native allocator cannot be faked:
    the recording of a batch never replayed would be freed unmade, which aborts the process."""
    if not malloc_async and compilation.uses_cuda_malloc_async(torch.device("cuda")):
        pytest.skip("this process allocates through cudaMallocAsync: its recordings must be replayed once")
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: malloc_async)
    torch.manual_seed(0)
    model = LMDM().cuda().eval().requires_grad_(False)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for precision in ("fp32", "tf32", "bf16"):
        window = DDIMSampler(model, steps, precision=precision)
        step = DDIMSampler(model, steps, precision=precision, graph_span="step")
        for batch in (1, 2, 1):
            args = (torch.randn(batch, D, device="cuda", generator=gen),
                    torch.randn(batch, W, 1103, device="cuda", generator=gen),
                    torch.randn(batch, W, D, device="cuda", generator=gen),
                    torch.randn(window.noise_shape(batch), device="cuda", generator=gen))
            want = window.sample(*args)
            assert torch.equal(step.sample(*args), want), (precision, batch)
        assert len(step._graphs) == 2
