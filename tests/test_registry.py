"""The registry resolves every watched API in the installed Warp, or says which it cannot."""

import importlib.machinery
import re
import sys
import types

import pytest
import warp as wp

from trackgen_contract import registry
from trackgen_contract.registry import (
    OPS,
    TABLE,
    RegistryError,
    Watch,
    installed,
    parse_version,
    resolve,
)

VERSION = parse_version(wp.__version__)


def test_every_row_resolves_or_is_absent_by_rule():
    registry = installed()
    resolved = {entry.api for entry in registry}
    for watch in TABLE:
        if watch.applies_to(VERSION):
            assert watch.api in resolved, watch
        else:
            assert watch.api not in resolved or any(
                w.api == watch.api and w.applies_to(VERSION) for w in TABLE
            ), watch


def test_code_objects_are_the_public_functions():
    registry = installed()
    assert registry.by_api("wp.launch").code is wp.launch.__code__
    assert registry.by_api("wp.copy").code is wp.copy.__code__
    assert registry.by_api("wp.array.numpy").code is wp.array.numpy.__code__
    getter = wp.array.__dict__["__array_interface__"].fget
    assert registry.by_api("wp.array.__array_interface__").code is getter.__code__
    assert registry.by_api("wp.HashGrid").code is wp.HashGrid.__init__.__code__
    assert registry.by_api("wp.ScopedStream").code is wp.ScopedStream.__enter__.__code__


def test_each_code_object_is_watched_once():
    codes = [entry.code for entry in installed()]
    assert len(codes) == len(set(map(id, codes)))


def test_table_is_well_formed():
    for watch in TABLE:
        assert watch.op in OPS
        assert watch.api.startswith("wp.")
        assert watch.path.split(".")[0] in ("wp", "ctx", "det")
    assert {w.op for w in TABLE} == set(OPS)


def test_parameter_roles_name_real_parameters():
    for entry in installed():
        watch = entry.watch
        names = set(entry.parameters) | set(entry.code.co_varnames[: entry.code.co_argcount])
        for role in (watch.stream, watch.data, *watch.devices):
            if role is not None:
                assert role in names, (entry.api, role)


def test_launch_tiled_positions_stand_for_launch_parameters():
    entry = installed().by_api("wp.launch_tiled")
    assert entry.parameters[7] == "stream"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("1.19.0", (1, 19, 0)),
        ("1.10.1", (1, 10, 1)),
        ("1.20.0.dev20260101", (1, 20, 0)),
        ("1.8.0rc1", (1, 8, 0)),
        ("2", (2,)),
    ],
)
def test_parse_version(text, version):
    assert parse_version(text) == version


def test_unreadable_version():
    with pytest.raises(RegistryError, match="cannot read the warp-lang version 'dev'"):
        parse_version("dev")


def fake_warp(version, without=()):
    """The installed warp's namespace under another version, some names removed."""
    fake = types.ModuleType("warp")
    fake.__dict__.update({k: v for k, v in vars(wp).items() if k not in without})
    fake.__version__ = version
    return fake


def test_a_missing_api_is_an_error_naming_it_and_the_version():
    message = rf"cannot find wp\.capture_begin .* warp-lang {re.escape(wp.__version__)}"
    with pytest.raises(RegistryError, match=message):
        resolve(fake_warp(wp.__version__, without={"capture_begin"}))


def test_version_rules_skip_what_a_version_lacks_by_design(monkeypatch):
    rows = [w for w in TABLE if w.api in ("wp.launch", "wp.capture_if")]
    monkeypatch.setattr(registry, "TABLE", tuple(rows))
    older = resolve(fake_warp("1.7.2", without={"capture_if"}))
    assert {e.api for e in older} == {"wp.launch"}
    with pytest.raises(RegistryError, match=r"wp\.capture_if"):
        resolve(fake_warp("1.8.0", without={"capture_if"}))


def test_too_old_warp_is_refused():
    with pytest.raises(RegistryError, match="older than the oldest supported version"):
        resolve(fake_warp("1.5.1"))


def test_applies_to():
    watch = Watch("wp.x", "sync", "wp.x", since=(1, 8), until=(1, 13))
    assert [watch.applies_to(v) for v in [(1, 7, 2), (1, 8, 0), (1, 12, 1), (1, 13, 0)]] == [
        False,
        True,
        True,
        False,
    ]


def test_a_public_subpackage_is_named_once_its_import_is_complete():
    # A stand-in for a Warp subpackage whose own import makes a breach (its classes are
    # not defined yet when the breach is named): it is read once its import is complete,
    # though no module was imported since.
    name = "warp.tc_late_probe"
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__spec__._initializing = True
    sys.modules[name] = module
    try:
        exec("class Thing:\n    def __init__(self):\n        pass\n", vars(module))
        init = vars(module).pop("Thing").__init__.__code__
        registry = installed()
        assert registry.public_name(init, name) == "wp.tc_late_probe.Thing.__init__"
        module.Thing = types.new_class("Thing")
        module.Thing.__init__ = types.FunctionType(init, {})
        module.Thing.__module__ = name
        module.__spec__._initializing = False
        assert registry.public_name(init, name) == "wp.tc_late_probe.Thing"
    finally:
        del sys.modules[name]


def test_public_names():
    registry = installed()
    assert registry.public_name(wp.zeros.__code__, "warp") == "wp.zeros"
    assert registry.public_name(wp.array.__init__.__code__, "warp") == "wp.array"
    assert registry.public_name(wp.array.contiguous.__code__, "warp") == "wp.array.contiguous"
    if "__new__" in vars(wp.array2d):  # Python code of its own in recent Warp
        assert registry.public_name(wp.array2d.__new__.__code__, "warp") == "wp.array2d"
    grad = vars(wp.array)["requires_grad"]
    assert registry.public_name(grad.fset.__code__, "warp") == "wp.array.requires_grad"
    assert registry.public_name(grad.fget.__code__, "warp") == "wp.array.requires_grad"

    def helper():
        pass

    assert registry.public_name(helper.__code__, "warp._src.fem.cache") == (
        "wp.fem.cache.test_public_names.<locals>.helper"
    )
