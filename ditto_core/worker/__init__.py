"""A warm worker for the render command: one process keeps the pipeline loaded and renders the
clips that ``python -m ditto_core render`` hands it, so a render call skips a new process's
start-up (importing torch, starting CUDA, loading the networks, recording the engine's graphs).

Above :mod:`ditto_core.pipeline`; nothing below imports this package. ``protocol`` is the socket
and its messages, ``client`` the render command's side (no PyTorch), ``server`` the worker,
``cli`` the ``worker`` command and render's ``--worker`` flags.
"""
