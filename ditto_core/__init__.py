"""Ditto talking heads in plain PyTorch: portrait + speech -> video, GPU first.

Never imports ComfyUI. Start from :class:`ditto_core.pipeline.DittoPipeline` (the whole
pipeline, stage by stage) or :func:`ditto_core.models.ditto_models.load_ditto_models` (the six
networks); ``python -m ditto_core --help`` is the command line.
"""
