"""Read a described value back from the caller's frame without running any of its code.

Only what is *stored* is read: the frame's locals and cells, globals and builtins, entries
of a module's or an instance's ``__dict__``, plain class attributes (functions,
``staticmethod``, ``classmethod``, values without ``__get__``), and items of an exact
``dict``, ``list`` or ``tuple`` whose key is read the same way. A property, any other
descriptor, a ``__getattr__``, a custom ``__getattribute__``, a mapping or sequence of the
user's, an iterator: each would run code to answer, so each is `Unresolved`. Types are
tested with ``type(x) is``, never ``isinstance`` (which may read ``__class__``).
"""

from __future__ import annotations

import collections
import dis
import sys
import types
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TypeVar

from ..codecache import CodeCache
from ..handlers import raised_by_handler
from .values import Const, Method, OneOf, Ref, options

T = TypeVar("T")
_MISSING = object()
# Key types whose hash and equality run no user code, held by id(): asked of every key a
# dict scan meets, where a set lookup by id runs none of the user's code (see
# `is_one_of`) and makes no generator.
_PLAIN_KEYS = frozenset(map(id, (str, int, bool, float, bytes, type(None))))
_NUMBERS = frozenset(map(id, (int, bool, float)))
_NUMBER = object()  # their kind (see `_key_kind`)
# Dict types whose item lookup is dict's own (no __getitem__ of theirs).
_DICTS = (dict, collections.OrderedDict, collections.defaultdict)
DICT_SCAN_LIMIT = 256  # a dict is searched key by key (see `_dict_item`)


def _frame_locals_type() -> type:
    return type(sys._getframe().f_locals)  # FrameLocalsProxy from 3.13, dict before


_FRAME_LOCALS = _frame_locals_type()

# CPython 3.13.0 to 3.13.2 crash (a segfault) reading through ``frame.f_locals`` a name
# that an inlined comprehension binds while the function keeps that name in a cell (one a
# nested function uses): the comprehension's plain value is taken for the cell
# (python/cpython#128396, fixed in 3.13.3). Such names of such code are not read there.
_SHADOWED_CELLS_CRASH = (3, 13) <= sys.version_info < (3, 13, 3)
_shadowed_cells: CodeCache[frozenset[str]] = CodeCache()

# The __getattribute__ implementations that find attributes the generic way (type, then
# instance dict): anything else is code that may answer differently.
_GENERIC_GETATTRIBUTE = (object.__getattribute__, types.SimpleNamespace.__getattribute__)
_type_getattribute = type.__getattribute__
_generic_getattr = object.__getattribute__
_classmethod_function = classmethod.__dict__["__func__"].__get__
_CLASSMETHOD_CHAINS = sys.version_info < (3, 13)
_module_getattribute = types.ModuleType.__getattribute__
_type_mro = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__
# Read off the type itself, past any metaclass (whose __getattribute__ could be the user's).
_type_name = type.__dict__["__name__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_module = type.__dict__["__module__"].__get__


def is_one_of(obj: object, choices: tuple[object, ...]) -> bool:
    """Whether `obj` is one of `choices`, by identity: ``obj in choices`` compares with
    ``==``, which a class of the user's (or the metaclass of one) may define."""
    return any(obj is choice for choice in choices)


def _key_kind(key: object) -> object:
    # Numbers compare equal across their types, with equal hashes (`d[True]` finds a
    # stored 1, as Python's lookup does): one kind for them all.
    kind = type(key)
    return _NUMBER if id(kind) in _NUMBERS else kind


class Unresolved(Exception):
    """A value cannot be read back without running code (or is gone)."""


def class_lookup(cls: type, name: str) -> object:
    """`name` in the dict of the first class of `cls`'s MRO that has it, as stored."""
    for klass in _type_mro(cls):
        value = _type_dict(klass).get(name, _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


def _is_data_descriptor(value: object) -> bool:
    kind = type(value)
    return class_lookup(kind, "__set__") is not _MISSING or (
        class_lookup(kind, "__delete__") is not _MISSING
    )


def _instance_dict(obj: object) -> dict | None:
    """``obj.__dict__`` as CPython keeps it (never a property), or None. It may be a dict
    subclass: attribute lookup reads it as a plain dict (``dict.get``), and so do we."""
    descriptor = class_lookup(type(obj), "__dict__")
    # CPython's own: a getset for classes defined in Python, a member for modules.
    if is_one_of(type(descriptor), (types.GetSetDescriptorType, types.MemberDescriptorType)):
        namespace = descriptor.__get__(obj, type(obj))
        return namespace if issubclass(type(namespace), dict) else None
    return None


def _binds_plainly(value: object) -> bool:
    """Whether a class attribute `value` is read through an instance or its class by
    CPython's own code alone: a function, a ``staticmethod``, a ``classmethod`` (of a
    function, before 3.13: there it binds what it wraps through that object's own
    ``__get__``, a ``property`` say), or a value that is no descriptor."""
    kind = type(value)
    if kind is classmethod and _CLASSMETHOD_CHAINS:
        wrapped = _classmethod_function(value)
        return type(wrapped) is types.FunctionType or _no_descriptor(wrapped)
    if kind is types.FunctionType or kind is staticmethod or kind is classmethod:
        return True
    return _no_descriptor(value)


def _no_descriptor(value: object) -> bool:
    return class_lookup(type(value), "__get__") is _MISSING


def _bind(value: object, obj: object, cls: type) -> object:
    """What a class attribute `value` gives when read through `obj` (None: the class)."""
    kind = type(value)
    if not _binds_plainly(value):
        raise Unresolved(f"a descriptor of type {_type_name(kind)}")
    if kind is types.FunctionType:
        return value if obj is None else types.MethodType(value, obj)
    if kind is staticmethod:
        return value.__func__
    if kind is classmethod:
        return types.MethodType(value.__func__, cls)
    return value  # a plain value


def _instance_attribute(obj: object, name: str) -> object:
    cls = type(obj)
    if not is_one_of(class_lookup(cls, "__getattribute__"), _GENERIC_GETATTRIBUTE):
        raise Unresolved(f"{_type_name(cls)} has its own __getattribute__")
    value = class_lookup(cls, name)
    if value is not _MISSING and _is_data_descriptor(value):
        if type(value) is types.MemberDescriptorType:  # a __slots__ entry
            try:
                return value.__get__(obj, cls)
            except AttributeError as error:
                if raised_by_handler(error):
                    raise
                raise Unresolved(name) from None
        raise Unresolved(f"{name} is a data descriptor")
    if type(name) is not str:
        raise Unresolved("an attribute name of a str subclass")
    if value is _MISSING or _binds_plainly(value):
        return generic_attribute(obj, name)
    # Another kind of descriptor: only an own value of the instance answers without it.
    namespace = _instance_dict(obj)
    own = _MISSING if namespace is None else dict.get(namespace, name, _MISSING)
    if own is _MISSING:
        return _bind(value, obj, cls)  # raises Unresolved
    return own


def generic_attribute(obj: object, name: str) -> object:
    """``obj.<name>`` found the generic way (the instance's own value, else its class's,
    bound by CPython's descriptors), for a class whose `name` binds plainly (see
    `_binds_plainly`), or `Unresolved` (a ``__getattr__`` would answer, or nothing).

    Not through ``obj.__dict__``: CPython keeps an instance's attributes inline until its
    ``__dict__`` is asked for, and once it has made the dict every later attribute read
    and write of the object takes a slower path, for the rest of its life (2.2-3.7x on
    3.11-3.15; ~10% of Warp's ``Launch.launch`` on 3.11 and 3.12)."""
    try:
        return _generic_getattr(obj, name)
    except AttributeError as error:
        if raised_by_handler(error):
            raise
        raise Unresolved(name) from None


def _class_attribute(cls: type, name: str) -> object:
    meta = type(cls)
    if class_lookup(meta, "__getattribute__") is not _type_getattribute:
        raise Unresolved(f"{_type_name(meta)} has its own __getattribute__")
    if class_lookup(meta, name) is not _MISSING:
        raise Unresolved(f"{name} is defined by the metaclass")
    value = class_lookup(cls, name)
    if value is _MISSING:
        raise Unresolved(name)
    return _bind(value, None, cls)


def _module_attribute(module: types.ModuleType, name: str) -> object:
    kind = type(module)
    if class_lookup(kind, "__getattribute__") is not _module_getattribute:
        raise Unresolved(f"{_type_name(kind)} has its own __getattribute__")
    if kind is not types.ModuleType:
        on_class = class_lookup(kind, name)
        if on_class is not _MISSING and _is_data_descriptor(on_class):
            raise Unresolved(f"{name} is a data descriptor of {_type_name(kind)}")
    value = _instance_dict(module)
    value = _MISSING if value is None else dict.get(value, name, _MISSING)
    if value is _MISSING:
        raise Unresolved(name)  # a module __getattr__ would answer
    return value


def attribute(obj: object, name: str) -> object:
    """``obj.name`` as Python would find it, or `Unresolved` where finding it runs code."""
    kind = type(obj)
    if issubclass(kind, types.ModuleType):
        return _module_attribute(obj, name)  # type: ignore[arg-type]
    if issubclass(kind, type):
        return _class_attribute(obj, name)  # type: ignore[arg-type]
    return _instance_attribute(obj, name)


def _plain_key(key: object) -> bool:
    kind = type(key)
    if kind is tuple:
        return all(_plain_key(k) for k in key)  # type: ignore[union-attr]
    return id(kind) in _PLAIN_KEYS


def _dict_item(mapping: dict, key: object) -> object:
    # `mapping[key]` would compare with stored keys of equal hash through *their*
    # __eq__, which may be the user's: look for the key among keys of its own kind.
    if len(mapping) > DICT_SCAN_LIMIT:
        raise Unresolved("a large dict")
    kind = _key_kind(key)
    try:
        for stored, value in dict.items(mapping):
            # The stored key must be plain too: a tuple's == compares its items.
            if stored is key:
                return value
            if _key_kind(stored) is kind and _plain_key(stored) and stored == key:
                return value
    except RuntimeError as error:  # changed size during iteration: another thread wrote
        if raised_by_handler(error):
            raise
        raise Unresolved("a dict being changed") from None
    raise Unresolved(repr(key))


def item(container: object, key: object) -> object:
    """``container[key]`` for an exact dict, list or tuple (or an `OrderedDict` or a
    `defaultdict`, whose items are a dict's, read as stored) and a plain key."""
    kind = type(container)
    if not _plain_key(key):
        raise Unresolved("a key of the user's type")
    if is_one_of(kind, _DICTS):
        # A defaultdict makes a missing item (its __missing__ may be the user's): only a
        # stored one is read, and a missing one is Unresolved.
        return _dict_item(container, key)  # type: ignore[arg-type]
    if (kind is list or kind is tuple) and is_one_of(type(key), (int, bool)):  # cmds[True]
        try:
            return container[key]  # type: ignore[index]
        except IndexError as error:
            if raised_by_handler(error):
                raise
            raise Unresolved(repr(key)) from None
    raise Unresolved(f"an item of a {_type_name(kind)}")


def frame_local(frame: FrameType, name: str, default: object) -> object:
    """The local `name` of `frame` as ``frame.f_locals`` has it, or `default`. Unresolved
    where reading it would crash CPython (see `_SHADOWED_CELLS_CRASH`)."""
    if _SHADOWED_CELLS_CRASH and name in _shadowed_cells.get_or_make(frame.f_code, _cells_rebound):
        raise Unresolved(f"{name}, a cell that a comprehension rebinds (CPython 3.13.0-3.13.2)")
    return _namespace_get(frame.f_locals, name, default)


def _cells_rebound(code: CodeType) -> frozenset[str]:
    # An inlined comprehension saves the function's own binding of its variable with
    # LOAD_FAST_AND_CLEAR. Where that is a cell's or a free variable's name, the slot then
    # holds the comprehension's plain value (the crashing case) unless the comprehension
    # makes a cell of its own there at once (its variable is used by a nested function).
    cells = set(code.co_cellvars) | set(code.co_freevars)
    instructions = list(dis.get_instructions(code))
    names = set()
    for saved, following in zip(instructions, [*instructions[1:], None], strict=True):
        if saved.opname == "LOAD_FAST_AND_CLEAR" and saved.argval in cells:
            celled = following is not None and following.opname == "MAKE_CELL"
            if not (celled and following.arg == saved.arg):
                names.add(saved.argval)
    return frozenset(names)


def _namespace_get(namespace: object, name: str, default: object = _MISSING) -> object:
    if type(namespace) is dict:
        return dict.get(namespace, name, default)
    if type(namespace) is _FRAME_LOCALS:  # 3.13+: the frame's own view of its locals
        return namespace.get(name, default)  # type: ignore[attr-defined]
    # A mapping of the user's (exec with custom locals, a __prepare__ namespace, globals
    # of a dict subclass): Python asks its __getitem__, which we may not run.
    raise Unresolved(f"{name} in a namespace of type {_type_name(type(namespace))}")


def _name(ref: Ref, frame: FrameType) -> object:
    name, scope = ref.name, ref.scope
    if scope != "global":
        value = frame_local(frame, name, _MISSING)
        if value is not _MISSING:
            return value
        if scope == "fast":
            raise Unresolved(name)
    for namespace in (frame.f_globals, frame.f_builtins):
        value = _namespace_get(namespace, name)
        if value is not _MISSING:
            return value
    raise Unresolved(name)


def agreed(read: Callable[[object, FrameType], T], value: object, frame: FrameType) -> T:
    """What `read` gives for `value` (``read(value, frame)``), one answer for every option
    of a `OneOf` (whichever path was taken), or `Unresolved` where they differ."""
    answers = [read(option, frame) for option in options(value)]
    first = answers[0]
    if any(answer != first for answer in answers):
        raise Unresolved("a value that differs by the path taken")
    return first


def resolve(value: object, frame: FrameType) -> object:
    """The object a `Ref`, `Method`, `Const` or `OneOf` (where all its options read the
    same object) describes, read from `frame`."""
    kind = type(value)
    if kind is OneOf:
        found = [resolve(option, frame) for option in value.options]  # type: ignore[attr-defined]
        if any(obj is not found[0] for obj in found):
            raise Unresolved("an object that differs by the path taken")
        return found[0]
    if kind is Const:
        return value.value  # type: ignore[attr-defined]
    if kind is Method:
        return attribute(resolve(value.receiver, frame), value.name)  # type: ignore[attr-defined]
    if kind is not Ref:
        raise Unresolved(repr(value))
    obj = _name(value, frame)  # type: ignore[arg-type]
    for step, key in value.steps:  # type: ignore[attr-defined]
        obj = attribute(obj, key) if step == "attr" else item(obj, resolve(key, frame))
    return obj


def sequence_length(value: object, frame: FrameType) -> int:
    """The length of a ``*args`` value: an exact tuple or list only (an iterator would be
    consumed, a sequence of the user's would run its ``__len__``)."""
    if type(value) is OneOf:
        return agreed(sequence_length, value, frame)
    obj = resolve(value, frame)
    if not is_one_of(type(obj), (tuple, list)):
        raise Unresolved(f"*args of type {_type_name(type(obj))}")
    return len(obj)  # type: ignore[arg-type]


def mapping_keys(value: object, frame: FrameType) -> frozenset[str]:
    """The keys of a ``**kwargs`` value: an exact dict of string keys only."""
    if type(value) is OneOf:
        return agreed(mapping_keys, value, frame)
    obj = resolve(value, frame)
    if type(obj) is not dict:
        raise Unresolved(f"**kwargs of type {_type_name(type(obj))}")
    keys = list(dict.keys(obj))  # type: ignore[arg-type]
    if not all(type(k) is str for k in keys):
        raise Unresolved("**kwargs with keys that are not strings")
    return frozenset(keys)


def keyword(value: object, frame: FrameType) -> str:
    """A keyword name read back (``**{key: value}``): an exact ``str`` only."""
    name = resolve(value, frame)
    if type(name) is not str:
        raise Unresolved(f"a keyword name of type {_type_name(type(name))}")
    return name  # type: ignore[return-value]


def describe(obj: object) -> str:
    """Name `obj` for a message without running any of its code (no ``repr``, no
    attribute of the user's): a plain function (bound or not) by its qualified name,
    anything else by its class."""
    if obj is None:
        return "nothing"
    if type(obj) is types.MethodType:
        obj = obj.__func__  # type: ignore[attr-defined]
    if type(obj) is types.FunctionType:
        module = obj.__module__  # type: ignore[attr-defined]
        prefix = f"{module}." if type(module) is str else ""
        return prefix + obj.__qualname__  # type: ignore[attr-defined]
    kind = type(obj)
    module = _type_module(kind)
    prefix = f"{module}." if type(module) is str and module != "builtins" else ""
    return f"a {prefix}{_type_qualname(kind)} object"
