"""_proto.py: the generated protobuf modules, cdc_client._pb. A built package (pip install, a wheel)
holds them, made from cdc's proto/ by protoc at build time (setup.py); used from the repository,
the package compiles them once per process with the same code (_protoc.py)."""
import atexit
import importlib.util
import shutil
import sys
import tempfile
import types

try:
    import google.protobuf  # noqa: F401
except ModuleNotFoundError as e:
    raise ImportError("cdc_client needs the protobuf runtime (the module google.protobuf): on Debian "
                      "`apt-get install python3-protobuf`, else `pip install protobuf`") from e


def _compile():
    """cdc_client._pb compiled into a temporary directory (removed at exit)."""
    from . import _protoc
    out = tempfile.mkdtemp(prefix="cdc-client-py-")
    atexit.register(shutil.rmtree, out, True)
    try:
        _protoc.generate(out)
    except RuntimeError as e:
        raise ImportError(str(e)) from None
    spec = importlib.util.spec_from_file_location(__package__ + "._pb", out + "/__init__.py",
                                                  submodule_search_locations=[out])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


try:
    from ._pb import event_pb2, subscriber_pb2
except ModuleNotFoundError as e:
    if e.name != __package__ + "._pb":
        raise
    _compile()
    from ._pb import event_pb2, subscriber_pb2

# Both generated modules' messages and enum values in one namespace: pb.Event, pb.ServerFrame,
# pb.FAILOVER, pb.OP_INSERT, pb.Error.BAD_FRAME...
pb = types.ModuleType("cdc_client.pb")
for _m in (event_pb2, subscriber_pb2):
    for _k in dir(_m):
        if not _k.startswith("_") and _k != "DESCRIPTOR":
            setattr(pb, _k, getattr(_m, _k))
