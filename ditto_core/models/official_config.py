"""Ditto's official config file, read as data: the procedural blink table and nothing is run.

The official inference code loads ``ditto_cfg/v0.4_hubert_cfg_pytorch.pkl`` (HuggingFace
``digital-avatar/ditto-talkinghead``) with ``pickle``, which would run any code a tampered file
names. Here the file's opcode stream is parsed by :func:`pickletools.genops` (a parser: it never
resolves a name) and interpreted by a small stack machine that builds only plain data: dicts,
lists, tuples, sets, strings, bytes, numbers and numpy arrays/scalars, rebuilt from their raw
bytes with :func:`numpy.frombuffer`. Every other class or function the file names is never
imported or called; it becomes an :class:`OpaqueObject` recording the dotted name (and what the
file would have passed to it), so parts of the config we do not need do not stop the read.

The one entry the pack uses is ``default_kwargs["delta_eye_arr"]``: a (K, 63) float32 array of
expression offsets replaying one recorded blink (row 0 = eyes open); see :func:`blink_table`.
"""
from __future__ import annotations

import math
import pickletools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import Tensor

from ..errors import CheckpointError, MissingModelError
from ..model_files import CONFIG_DIR, CONFIG_FILE, HF_REPO
from .keypoints import NUM_KP

MAX_CONFIG_BYTES = 64 << 20
"""The official config is a few hundred KiB; anything far larger is not one."""


@dataclass(eq=False)
class OpaqueObject:
    """A class or function the config names, never imported, and whatever it would have built.

    Attributes:
        name: dotted name as written in the file, e.g. ``"collections.Counter"``.
        args: arguments the file passes to it (REDUCE / NEWOBJ); None when it is only referred to.
        state: what the file would hand to ``__setstate__`` (BUILD), if anything.
        elements: values appended to it (list-like objects).
        items: key/value pairs set on it (dict-like objects).
    """

    name: str
    args: Optional[tuple] = None
    state: Any = None
    elements: list = field(default_factory=list)
    items: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        called = "" if self.args is None else "(...)"
        return f"<opaque {self.name}{called}>"


class _Malformed(ValueError):
    """The opcode stream is not a well-formed data pickle."""


class _ArrayStub(OpaqueObject):
    """An ndarray between numpy's ``_reconstruct`` and the BUILD that supplies its bytes."""


class _DtypeStub(OpaqueObject):
    """A dtype between its REDUCE (type code) and the BUILD that supplies its byte order."""

    def resolve(self, byteorder: str = "=") -> np.dtype:
        if byteorder not in ("<", ">", "|", "="):
            raise _Malformed(f"dtype byte order {byteorder!r}")
        return np.dtype(self.args[0]).newbyteorder(byteorder)


# dtype codes numpy writes for bool, int, uint and float (e.g. "f4", "b1", "u8").
_PLAIN_DTYPE = re.compile(r"[biuf]\d{1,2}")
_NUMPY_MODULES = ("numpy.core", "numpy._core")  # numpy 1.x and 2.x spellings


def _dtype(code: Any, *_flags: Any) -> _DtypeStub:
    # numpy passes (code, align, copy); the flags change nothing for plain types.
    if isinstance(code, str) and code.startswith("O"):
        raise _Malformed("it holds an object array, which could only be rebuilt by running code")
    if not (isinstance(code, str) and _PLAIN_DTYPE.fullmatch(code)):
        raise _Malformed(f"numpy dtype {code!r} is not a plain bool/int/float type")
    np.dtype(code)  # unknown sizes ("f3") raise TypeError here, before any data is read
    return _DtypeStub("numpy.dtype", (code,))


def _as_dtype(value: Any) -> np.dtype:
    if isinstance(value, _DtypeStub):
        return value.resolve()
    if isinstance(value, np.dtype):
        return value
    raise _Malformed(f"expected a numpy dtype, found {value!r}")


def _array(shape: Any, dtype: Any, fortran: bool, data: Any) -> np.ndarray:
    """An owned, native-byte-order array from its shape, dtype and raw bytes."""
    dtype = _as_dtype(dtype)
    if not (isinstance(shape, tuple) and all(isinstance(n, int) and n >= 0 for n in shape)):
        raise _Malformed(f"array shape {shape!r}")
    if not isinstance(data, (bytes, bytearray)):
        raise _Malformed("array data is not raw bytes (object arrays are refused)")
    count = math.prod(shape)
    if count * dtype.itemsize != len(data):
        raise _Malformed(f"array of shape {shape} and dtype {dtype} with {len(data)} bytes of data")
    flat = np.frombuffer(data, dtype=dtype, count=count)
    return flat.reshape(shape, order="F" if fortran else "C").astype(dtype.newbyteorder("="))


def _frombuffer(data: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    # numpy's protocol-5 form: the raw buffer first, then how to view it.
    if order not in ("C", "F"):
        raise _Malformed(f"array order {order!r}")
    return _array(shape, dtype, order == "F", data)


def _scalar(dtype: Any, data: Any) -> Any:
    dtype = _as_dtype(dtype)
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise _Malformed(f"numpy {dtype} scalar whose data is not {dtype.itemsize} raw bytes")
    return np.frombuffer(data, dtype=dtype, count=1).astype(dtype.newbyteorder("="))[0]


def _reconstruct(subtype: Any, shape: Any, code: Any) -> Any:
    # The array's contents arrive in the BUILD that follows; an ndarray subclass stays opaque.
    if isinstance(subtype, OpaqueObject) and subtype.name == "numpy.ndarray" and subtype.args is None:
        return _ArrayStub("numpy.ndarray", ())
    return NotImplemented


def _latin1(text: Any, encoding: Any) -> bytes:
    # Protocol 2 has no bytes opcode: Python 3 writes bytes as _codecs.encode(text, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise _Malformed(f"_codecs.encode({type(text).__name__}, {encoding!r})")
    return text.encode("latin-1")


def _bytes_like(kind: type) -> Callable[..., Any]:
    def build(*args: Any) -> Any:
        if len(args) > 1 or (args and not isinstance(args[0], (bytes, bytearray))):
            raise _Malformed(f"{kind.__name__}{tuple(type(a).__name__ for a in args)}")
        return kind(*args)

    return build


_CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "builtins.bytes": _bytes_like(bytes),
    "builtins.bytearray": _bytes_like(bytearray),
    "collections.OrderedDict": lambda: {},  # a dict keeps insertion order too
    "_codecs.encode": _latin1,
    "numpy.dtype": _dtype,
    **{f"{m}.multiarray._reconstruct": _reconstruct for m in _NUMPY_MODULES},
    **{f"{m}.multiarray.scalar": _scalar for m in _NUMPY_MODULES},
    **{f"{m}.numeric._frombuffer": _frombuffer for m in _NUMPY_MODULES},
}
"""The only callables a config may invoke: our own data constructors, keyed by the name the file
writes (the name only selects one of these; nothing is looked up). NotImplemented from one means
"leave this call opaque"."""


class _OpcodeReader:
    """Stack machine over :func:`pickletools.genops` output that builds plain data only."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}
        self.stub_memo_keys: dict[int, list[int]] = {}  # id(stub) -> memo keys, rebound by BUILD

    def run(self, data: bytes) -> Any:
        for opcode, arg, pos in pickletools.genops(data):
            if opcode.name == "STOP":
                return self.pop()
            handler = getattr(self, f"op_{opcode.name}", None)
            if handler is None:
                raise _Malformed(f"opcode {opcode.name} at byte {pos} is not allowed in a config")
            handler(arg)
        raise _Malformed("no STOP opcode")

    # -- helpers --

    def pop(self) -> Any:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise _Malformed("stack underflow")
        return self.stack.pop()

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise _Malformed("missing MARK")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def top(self) -> Any:
        value = self.pop()
        self.stack.append(value)
        return value

    def remember(self, key: int) -> None:
        value = self.top()
        self.memo[key] = value
        if isinstance(value, (_ArrayStub, _DtypeStub)):
            self.stub_memo_keys.setdefault(id(value), []).append(key)

    def recall(self, key: int) -> None:
        if key not in self.memo:
            raise _Malformed(f"memo entry {key} read before it was written")
        self.stack.append(self.memo[key])

    def add_items(self, target: Any, pairs: list[Any]) -> None:
        if len(pairs) % 2:
            raise _Malformed("odd number of SETITEMS values")
        mapping = target.items if isinstance(target, OpaqueObject) else target
        if not isinstance(mapping, dict):
            raise _Malformed(f"SETITEM on {type(target).__name__}")
        for key, value in zip(pairs[::2], pairs[1::2]):
            mapping[key] = value

    def add_elements(self, target: Any, values: list[Any]) -> None:
        if isinstance(target, OpaqueObject):
            target.elements.extend(values)
        elif isinstance(target, list):
            target.extend(values)
        else:
            raise _Malformed(f"APPEND on {type(target).__name__}")

    def call(self, func: Any, args: Any) -> Any:
        if not (isinstance(func, OpaqueObject) and func.args is None and isinstance(args, tuple)):
            raise _Malformed(f"REDUCE of {func!r}")
        constructor = _CONSTRUCTORS.get(func.name)
        value = constructor(*args) if constructor is not None else NotImplemented
        return OpaqueObject(func.name, args) if value is NotImplemented else value

    # -- framing, stack and memo --

    def op_PROTO(self, arg: int) -> None:
        if arg > 5:
            raise _Malformed(f"pickle protocol {arg}")

    def op_FRAME(self, arg: int) -> None:
        pass  # genops reads through frames; their length needs no checking to build the data

    def op_MARK(self, arg: None) -> None:
        self.marks.append(len(self.stack))

    def op_POP(self, arg: None) -> None:
        self.pop()

    def op_POP_MARK(self, arg: None) -> None:
        self.pop_mark()

    def op_DUP(self, arg: None) -> None:
        self.stack.append(self.top())

    def op_MEMOIZE(self, arg: None) -> None:
        self.remember(len(self.memo))

    op_PUT = op_BINPUT = op_LONG_BINPUT = remember
    op_GET = op_BINGET = op_LONG_BINGET = recall

    # -- scalars, strings, bytes --

    def push(self, arg: Any) -> None:
        self.stack.append(arg)

    op_INT = op_BININT = op_BININT1 = op_BININT2 = op_LONG = op_LONG1 = op_LONG4 = push
    op_FLOAT = op_BINFLOAT = push
    op_UNICODE = op_BINUNICODE = op_SHORT_BINUNICODE = op_BINUNICODE8 = push
    op_BINBYTES = op_SHORT_BINBYTES = op_BINBYTES8 = push

    def op_BYTEARRAY8(self, arg: bytes) -> None:
        self.stack.append(bytearray(arg))

    def op_NONE(self, arg: None) -> None:
        self.stack.append(None)

    def op_NEWTRUE(self, arg: None) -> None:
        self.stack.append(True)

    def op_NEWFALSE(self, arg: None) -> None:
        self.stack.append(False)

    # -- containers --

    def op_EMPTY_TUPLE(self, arg: None) -> None:
        self.stack.append(())

    def op_TUPLE(self, arg: None) -> None:
        self.stack.append(tuple(self.pop_mark()))

    def op_TUPLE1(self, arg: None) -> None:
        self.stack.append((self.pop(),))

    def op_TUPLE2(self, arg: None) -> None:
        b, a = self.pop(), self.pop()
        self.stack.append((a, b))

    def op_TUPLE3(self, arg: None) -> None:
        c, b, a = self.pop(), self.pop(), self.pop()
        self.stack.append((a, b, c))

    def op_EMPTY_LIST(self, arg: None) -> None:
        self.stack.append([])

    def op_LIST(self, arg: None) -> None:
        self.stack.append(self.pop_mark())

    def op_APPEND(self, arg: None) -> None:
        value = self.pop()
        self.add_elements(self.top(), [value])

    def op_APPENDS(self, arg: None) -> None:
        values = self.pop_mark()
        self.add_elements(self.top(), values)

    def op_EMPTY_DICT(self, arg: None) -> None:
        self.stack.append({})

    def op_DICT(self, arg: None) -> None:
        mapping: dict = {}
        self.add_items(mapping, self.pop_mark())
        self.stack.append(mapping)

    def op_SETITEM(self, arg: None) -> None:
        value, key = self.pop(), self.pop()
        self.add_items(self.top(), [key, value])

    def op_SETITEMS(self, arg: None) -> None:
        pairs = self.pop_mark()
        self.add_items(self.top(), pairs)

    def op_EMPTY_SET(self, arg: None) -> None:
        self.stack.append(set())

    def op_ADDITEMS(self, arg: None) -> None:
        values = self.pop_mark()
        target = self.top()
        if not isinstance(target, set):
            raise _Malformed(f"ADDITEMS on {type(target).__name__}")
        target.update(values)

    def op_FROZENSET(self, arg: None) -> None:
        self.stack.append(frozenset(self.pop_mark()))

    # -- names and objects: nothing is imported or called --

    def op_GLOBAL(self, arg: str) -> None:
        module, _, name = arg.partition(" ")
        self.push_global(module, name)

    def op_STACK_GLOBAL(self, arg: None) -> None:
        name, module = self.pop(), self.pop()
        if not (isinstance(module, str) and isinstance(name, str)):
            raise _Malformed("STACK_GLOBAL needs two strings")
        self.push_global(module, name)

    def push_global(self, module: str, name: str) -> None:
        if module == "__builtin__":  # how protocol 2 spells builtins
            module = "builtins"
        self.stack.append(OpaqueObject(f"{module}.{name}"))

    def op_REDUCE(self, arg: None) -> None:
        args, func = self.pop(), self.pop()
        self.stack.append(self.call(func, args))

    def op_NEWOBJ(self, arg: None) -> None:
        args, cls = self.pop(), self.pop()
        if not isinstance(cls, OpaqueObject) or not isinstance(args, tuple):
            raise _Malformed("NEWOBJ needs a class and a tuple")
        self.stack.append(OpaqueObject(cls.name, args))

    def op_NEWOBJ_EX(self, arg: None) -> None:
        kwargs, args, cls = self.pop(), self.pop(), self.pop()
        if not isinstance(cls, OpaqueObject) or not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise _Malformed("NEWOBJ_EX needs a class, a tuple and a dict")
        self.stack.append(OpaqueObject(cls.name, args + (kwargs,)))

    def op_BUILD(self, arg: None) -> None:
        state = self.pop()
        target = self.top()
        if isinstance(target, _ArrayStub):
            if not (isinstance(state, tuple) and len(state) in (4, 5)):
                raise _Malformed("ndarray state is not (version, shape, dtype, is_fortran, data)")
            shape, dtype, fortran, data = state[-4:]
            self.replace_stub(target, _array(shape, dtype, bool(fortran), data))
        elif isinstance(target, _DtypeStub):
            if not (isinstance(state, tuple) and len(state) >= 2):
                raise _Malformed("dtype state has no byte order")
            self.replace_stub(target, target.resolve(state[1]))
        elif isinstance(target, OpaqueObject):
            target.state = state
        else:
            raise _Malformed(f"BUILD on {type(target).__name__}")

    def replace_stub(self, stub: OpaqueObject, value: Any) -> None:
        # The finished value takes the stub's place on the stack and in every memo slot holding it,
        # so later references (BINGET) see the array/dtype, not the stub.
        self.stack[-1] = value
        for key in self.stub_memo_keys.pop(id(stub), ()):
            self.memo[key] = value


def _config_error(path: Path, detail: str) -> CheckpointError:
    return CheckpointError(
        f"{path} is not a readable Ditto config ({detail}). Re-download {path.name} from HuggingFace "
        f"{HF_REPO} (folder {CONFIG_DIR}/) into {path.parent}, or remove it to run without procedural blinks."
    )


def read_config(path: Path | str) -> dict:
    """The official config as plain data, without running or importing anything it names.

    Returns a dict whose values are dicts, lists, tuples, sets, str, bytes, numbers, None, numpy
    arrays and scalars (native byte order), and :class:`OpaqueObject` placeholders for
    everything else. Raises :class:`MissingModelError` if ``path`` is not a file and
    :class:`CheckpointError` if it is truncated, corrupt or not a config.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingModelError(f"Ditto config {path} not found; download {CONFIG_FILE} from HuggingFace "
                                f"{HF_REPO} (folder {CONFIG_DIR}/).")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise _config_error(path, f"{size} bytes, far more than a config holds")
    try:
        config = _OpcodeReader().run(path.read_bytes())
    except OSError as exc:
        raise _config_error(path, f"{type(exc).__name__}: {exc}") from exc
    except (ValueError, TypeError) as exc:
        # genops raises ValueError on truncation and unknown opcodes; the rest come from data that
        # does not fit together (an unhashable dict key, a set built from a number, ...).
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise _config_error(path, detail) from exc
    if not isinstance(config, dict):
        raise _config_error(path, f"its top level is {type(config).__name__}, not a dict")
    return config


def blink_table(config: Mapping, source: Path | str = "the Ditto config") -> Optional[Tensor]:
    """The (K, 63) float32 blink table ``config["default_kwargs"]["delta_eye_arr"]``, or None.

    None when the config has no such entry. A present but unusable table (wrong shape,
    non-numeric, non-finite) raises :class:`CheckpointError` naming ``source``.
    """
    defaults = config.get("default_kwargs")
    table = defaults.get("delta_eye_arr") if isinstance(defaults, Mapping) else None
    if table is None:
        return None
    width = 3 * NUM_KP
    hint = f"Re-download {CONFIG_FILE} from HuggingFace {HF_REPO} (folder {CONFIG_DIR}/)."
    if not (isinstance(table, np.ndarray) and table.dtype.kind in "iuf" and table.ndim == 2
            and table.shape[0] > 0 and table.shape[1] == width):
        found = f"shape {table.shape}, dtype {table.dtype}" if isinstance(table, np.ndarray) else repr(table)
        raise CheckpointError(f"{source}: default_kwargs['delta_eye_arr'] should be a (K, {width}) numeric "
                              f"array (one blink), found {found}. {hint}")
    tensor = torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32))
    if not bool(torch.isfinite(tensor).all()):
        raise CheckpointError(f"{source}: default_kwargs['delta_eye_arr'] holds NaN or infinite values. {hint}")
    return tensor

