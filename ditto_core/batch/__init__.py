"""Many talking heads at once: a jobs file run on every GPU of a machine or a Ray cluster.

Above :mod:`ditto_core.pipeline` (each worker holds one warm pipeline); nothing below imports
this package. ``cli`` is the ``batch`` subcommand, ``jobs`` the jobs file and the records of
finished jobs, ``runner`` what a worker does, ``scheduler`` the driver's dispatch and retry
loop over a pool of workers (``local_pool``: processes; ``ray_pool``: Ray actors), ``driver``
a whole batch and the sharded long clip (segments of :mod:`ditto_core.video.encoder`).
"""
