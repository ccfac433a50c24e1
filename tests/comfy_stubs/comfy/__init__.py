"""Stand-in for the ``comfy`` package (only ``utils`` and ``model_management``)."""
