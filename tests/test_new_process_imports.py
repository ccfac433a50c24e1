"""A new process that renders eagerly never imports Dynamo (nor what a trace needs).

Importing ``torch._dynamo`` costs about as much as ``import torch`` (seconds of every CLI call),
and only a trace needs it. These run in a fresh interpreter each: the test process itself has
long imported everything.
"""
from __future__ import annotations

import torch

from ditto_core.models import lmdm as lmdm_module

from tests.process_support import child_json
from tests.triton_interpreter import run_interpreted

_LOAD_AND_BUILD = """
    import json, sys
    import torch
    from ditto_core.models.ditto_models import load_ditto_models
    from ditto_core.render import warp_decode

    models = load_ditto_models(sys.argv[1], "cpu")
    # Dynamo, and the symbolic-shapes module that a meta-device reference kernel's check imports.
    loaded = [name for name in ("torch._dynamo", "torch.fx.experimental.symbolic_shapes") if name in sys.modules]
    # As on a CUDA machine: the engine would compile, but this clip renders before any graph.
    warp_decode.compile_available = lambda device: (True, "")
    engine = warp_decode.WarpDecodeEngine(models.warp_network, models.decoder, batch_size=2)
    f_s = torch.zeros(1, 32, 16, 64, 64)
    kp = torch.zeros(1, 21, 3)
    with torch.inference_mode():
        frame = engine._render(f_s, kp, kp, eager=True)
    print(json.dumps({"after_load": loaded, "after_engine": "torch._dynamo" in sys.modules,
                      "compiled": engine.stats.compiled, "frame": list(frame.shape),
                      "alphas": models.lmdm.alphas_cumprod.tolist(), "freqs": models.lmdm.rotary.freqs.tolist()}))
"""

_TRITON_MODULES = """
    import json, sys
    import torch
    from torch._library.triton import is_wrap_triton_enabled
    from ditto_core.models import slice_conv_triton, volume_sampling_triton
    from ditto_core.models.triton_kernels import register_triton_operators
    from ditto_core.models.volume_sampling import sample_volume

    imported = "torch._dynamo" in sys.modules
    # Whether each launch would go through the tracing wrapper's higher-order operator (the
    # interpreter's kernels never do, so the switch is read where the launch is made).
    hop_launches = []
    wrapped = volume_sampling_triton.traceable
    def recorded(kernel):
        hop_launches.append(is_wrap_triton_enabled())
        return wrapped(kernel)
    volume_sampling_triton.traceable = recorded
    g = torch.Generator().manual_seed(0)
    volume = torch.randn(1, 2, 3, 4, 5, generator=g).half()
    grid = torch.rand(1, 3, 4, 5, 3, generator=g) * 2 - 1
    want = sample_volume(volume.float(), grid)
    direct = volume_sampling_triton.warp_volume(volume, grid).float()
    after_launch = "torch._dynamo" in sys.modules
    wrapper_imported = "torch._higher_order_ops.triton_kernel_wrap" in sys.modules
    direct_hops = list(hop_launches)
    # As inside a torch.compile trace of a caller that did not register first: the tracing
    # wrapper stays on, so Dynamo sees the launch.
    is_compiling, torch.compiler.is_compiling = torch.compiler.is_compiling, lambda: True
    volume_sampling_triton.warp_volume(volume, grid)
    torch.compiler.is_compiling = is_compiling
    traced_hops = hop_launches[len(direct_hops):]
    register_triton_operators()
    registered = volume_sampling_triton.warp_volume(volume, grid).float()
    print(json.dumps({"after_import": imported, "after_launch": after_launch, "wrapper_imported": wrapper_imported,
                      "hop_launches": direct_hops,
                      "traced_hops": traced_hops, "launches": len(hop_launches),
                      "ops": [hasattr(torch.ops.ditto, name) for name in
                              ("warp_volume", "hourglass_input", "slice_conv_nhwc")],
                      "direct_error": (direct - want).abs().max().item(),
                      "registered_error": (registered - want).abs().max().item()}))
"""


def test_loading_official_networks_and_an_eager_render_import_no_dynamo(official_ckpt_dir):
    seen = child_json(_LOAD_AND_BUILD, str(official_ckpt_dir), timeout=300)
    assert seen["compiled"], "the engine was meant to be a compiling one"
    assert seen["after_load"] == [], f"loading the networks imported {seen['after_load']}"
    assert not seen["after_engine"], "building a compiling engine or an eager batch imported torch._dynamo"
    assert seen["frame"] == [1, 3, 512, 512]
    # The tables a meta build skips are the real ones once loaded.
    want_alphas = lmdm_module.cosine_alphas_cumprod()
    assert torch.equal(torch.tensor(seen["alphas"], dtype=want_alphas.dtype), want_alphas)
    dim = 2 * len(seen["freqs"])
    want_freqs = 1.0 / 10000.0 ** (torch.arange(0, dim, 2).float() / dim)
    assert torch.allclose(torch.tensor(seen["freqs"]), want_freqs, rtol=1e-6, atol=0)


def test_triton_kernels_launch_directly_until_their_operators_are_registered():
    seen = run_interpreted(_TRITON_MODULES)
    assert not seen["after_import"], "importing our Triton kernels imported torch._dynamo"
    assert not seen["after_launch"], "an eager launch of our Triton kernels imported torch._dynamo"
    assert not seen["wrapper_imported"], "an eager launch imported the tracing wrapper (0.4 s of a new process)"
    assert seen["launches"] == 3
    assert seen["hop_launches"] == [False], "eager launches went through the tracing wrapper's dispatch"
    assert seen["traced_hops"] == [True], "a trace would not see the launch"
    assert seen["ops"] == [True, True, True]
    assert seen["direct_error"] < 2e-3 and seen["registered_error"] < 2e-3
