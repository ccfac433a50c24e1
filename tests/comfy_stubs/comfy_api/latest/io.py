"""Stand-in for ``comfy_api.latest.io``: schema classes with the real ones' fields and rules.

Only what the Ditto pack uses: widget inputs (Boolean, Int, Float, String, Combo), the IMAGE,
AUDIO, VIDEO and custom socket types, outputs, hidden inputs, Schema (with the real
``validate``/``finalize`` rules), ComfyNode and NodeOutput.
"""
from __future__ import annotations

from collections import Counter
from enum import Enum
from typing import Any, Optional


class FolderType(str, Enum):
    input = "input"
    output = "output"
    temp = "temp"


class NumberDisplay(str, Enum):
    number = "number"
    slider = "slider"


class Hidden(str, Enum):
    unique_id = "UNIQUE_ID"
    prompt = "PROMPT"
    extra_pnginfo = "EXTRA_PNGINFO"
    dynprompt = "DYNPROMPT"


def _pruned(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


class Input:
    Parent: Any = None

    def __init__(self, id: str, display_name: str = None, optional: bool = False, tooltip: str = None,
                 lazy: bool = None, extra_dict: dict = None):
        self.id, self.display_name, self.optional, self.tooltip, self.lazy = id, display_name, optional, tooltip, lazy
        self.extra_dict = extra_dict or {}

    @property
    def io_type(self) -> str:
        return self.Parent.io_type

    def get_io_type(self) -> str:
        return self.io_type

    def as_dict(self) -> dict:
        return _pruned({"display_name": self.display_name, "optional": self.optional or None,
                        "tooltip": self.tooltip, "lazy": self.lazy}) | _pruned(self.extra_dict)


class WidgetInput(Input):
    def __init__(self, id, display_name=None, optional=False, tooltip=None, lazy=None, default=None,
                 socketless=None, widget_type=None, force_input=None, extra_dict=None):
        super().__init__(id, display_name, optional, tooltip, lazy, extra_dict)
        self.default, self.socketless, self.widget_type, self.force_input = default, socketless, widget_type, force_input

    def as_dict(self) -> dict:
        return super().as_dict() | _pruned({"default": self.default, "socketless": self.socketless,
                                            "forceInput": self.force_input})


class Output:
    Parent: Any = None

    def __init__(self, id: str = None, display_name: str = None, tooltip: str = None, is_output_list: bool = False):
        self.id, self.display_name, self.tooltip, self.is_output_list = id, display_name, tooltip, is_output_list

    @property
    def io_type(self) -> str:
        return self.Parent.io_type

    def as_dict(self) -> dict:
        return _pruned({"display_name": self.display_name, "tooltip": self.tooltip})


class ComfyTypeIO:
    io_type: str = None
    Input = Input
    Output = Output


def comfytype(io_type: str):
    """Bind ``io_type`` to a type class and give it its own Input/Output subclasses."""
    def decorate(cls):
        cls.io_type = io_type
        cls.Input = type("Input", (cls.Input,), {"Parent": cls})
        cls.Output = type("Output", (cls.Output,), {"Parent": cls})
        return cls
    return decorate


def Custom(io_type: str) -> type[ComfyTypeIO]:
    @comfytype(io_type)
    class CustomType(ComfyTypeIO):
        pass
    return CustomType


@comfytype("BOOLEAN")
class Boolean(ComfyTypeIO):
    class Input(WidgetInput):
        def __init__(self, id, display_name=None, optional=False, tooltip=None, lazy=None, default=None,
                     label_on=None, label_off=None, socketless=None, force_input=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.label_on, self.label_off = label_on, label_off

        def as_dict(self):
            return super().as_dict() | _pruned({"label_on": self.label_on, "label_off": self.label_off})


@comfytype("INT")
class Int(ComfyTypeIO):
    class Input(WidgetInput):
        def __init__(self, id, display_name=None, optional=False, tooltip=None, lazy=None, default=None, min=None,
                     max=None, step=None, control_after_generate=None, display_mode=None, socketless=None,
                     force_input=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.min, self.max, self.step = min, max, step
            self.control_after_generate, self.display_mode = control_after_generate, display_mode

        def as_dict(self):
            return super().as_dict() | _pruned({"min": self.min, "max": self.max, "step": self.step,
                                                "control_after_generate": self.control_after_generate})


@comfytype("FLOAT")
class Float(ComfyTypeIO):
    class Input(WidgetInput):
        def __init__(self, id, display_name=None, optional=False, tooltip=None, lazy=None, default=None, min=None,
                     max=None, step=None, round=None, display_mode=None, socketless=None, force_input=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.min, self.max, self.step, self.round, self.display_mode = min, max, step, round, display_mode

        def as_dict(self):
            return super().as_dict() | _pruned({"min": self.min, "max": self.max, "step": self.step, "round": self.round})


@comfytype("STRING")
class String(ComfyTypeIO):
    class Input(WidgetInput):
        def __init__(self, id, display_name=None, optional=False, tooltip=None, lazy=None, multiline=False,
                     placeholder=None, default=None, dynamic_prompts=None, socketless=None, force_input=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.multiline, self.placeholder, self.dynamic_prompts = multiline, placeholder, dynamic_prompts

        def as_dict(self):
            return super().as_dict() | _pruned({"multiline": self.multiline, "placeholder": self.placeholder})


@comfytype("COMBO")
class Combo(ComfyTypeIO):
    class Input(WidgetInput):
        def __init__(self, id, options=None, display_name=None, optional=False, tooltip=None, lazy=None,
                     default=None, control_after_generate=None, upload=None, image_folder=None, remote=None,
                     socketless=None):
            if isinstance(options, type) and issubclass(options, Enum):
                options = [v.value for v in options]
            if isinstance(default, Enum):
                default = default.value
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless)
            self.options, self.control_after_generate = options, control_after_generate

        def as_dict(self):
            return super().as_dict() | _pruned({"options": self.options,
                                                "control_after_generate": self.control_after_generate})


@comfytype("IMAGE")
class Image(ComfyTypeIO):
    pass


@comfytype("MASK")
class Mask(ComfyTypeIO):
    pass


@comfytype("AUDIO")
class Audio(ComfyTypeIO):
    pass


@comfytype("VIDEO")
class Video(ComfyTypeIO):
    pass


@comfytype("*")
class AnyType(ComfyTypeIO):
    pass


class HiddenHolder:
    def __init__(self, values: Optional[dict] = None):
        self._values = values or {}

    def __getattr__(self, key: str):
        return self._values.get(Hidden[key], None) if key in Hidden.__members__ else None


class Schema:
    def __init__(self, node_id: str, display_name: str = None, category: str = "sd", inputs: list = None,
                 outputs: list = None, hidden: list = None, description: str = "", is_input_list: bool = False,
                 is_output_node: bool = False, is_deprecated: bool = False, is_experimental: bool = False,
                 is_api_node: bool = False, not_idempotent: bool = False, enable_expand: bool = False,
                 search_aliases: list = None):
        # search_aliases: as in the newer ComfyUI versions that have it (older ones reject it).
        self.node_id, self.display_name, self.category = node_id, display_name, category
        self.search_aliases = search_aliases or []
        self.inputs, self.outputs, self.hidden = inputs or [], outputs or [], hidden
        self.description, self.is_output_node, self.not_idempotent = description, is_output_node, not_idempotent
        self.is_input_list, self.is_deprecated, self.is_experimental = is_input_list, is_deprecated, is_experimental

    def validate(self) -> None:
        """The real rule: ids unique among inputs, among outputs, and between the two."""
        inputs = [i.id for i in self.inputs]
        outputs = [o.id for o in self.outputs]
        issues = [f"{kind} ids must be unique: {[k for k, n in Counter(ids).items() if n > 1]}"
                  for kind, ids in (("Input", inputs), ("Output", outputs)) if len(set(ids)) != len(ids)]
        if set(inputs) & set(outputs):
            issues.append(f"Ids must be unique between inputs and outputs: {set(inputs) & set(outputs)}")
        if issues:
            raise ValueError("\n".join(issues))

    def finalize(self) -> None:
        if self.is_output_node:
            self.hidden = list(self.hidden or [])
            for h in (Hidden.prompt, Hidden.extra_pnginfo):
                if h not in self.hidden:
                    self.hidden.append(h)
        for i, output in enumerate(self.outputs):
            if output.id is None:
                output.id = f"_{i}_{output.io_type}_"


class NodeOutput:
    def __init__(self, *args: Any, ui: Any = None, expand: dict = None, block_execution: str = None):
        self.args, self.ui, self.expand, self.block_execution = args, ui, expand, block_execution

    @property
    def result(self):
        return self.args if self.args else None

    def __getitem__(self, index):
        return self.args[index]


class ComfyNode:
    hidden: HiddenHolder = HiddenHolder()

    @classmethod
    def define_schema(cls) -> Schema:
        raise NotImplementedError

    @classmethod
    def execute(cls, **kwargs) -> NodeOutput:
        raise NotImplementedError

    @classmethod
    def GET_SCHEMA(cls) -> Schema:
        schema = cls.define_schema()
        schema.finalize()
        schema.validate()
        return schema
