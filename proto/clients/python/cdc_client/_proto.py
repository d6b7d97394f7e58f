"""_proto.py: the generated protobuf modules, compiled from the repository's proto/ directory with
protoc --python_out once per process (nothing is checked in, so the client cannot drift from the
schema). $CDC_PROTO_PATH names another directory holding cdc/v1/*.proto."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_FILES = ("cdc/v1/event.proto", "cdc/v1/subscriber.proto")


def proto_dir():
    """Where the .proto files are: $CDC_PROTO_PATH, else proto/ of the repository this package is in."""
    d = os.environ.get("CDC_PROTO_PATH") or os.path.join(_HERE, "..", "..", "..")
    d = os.path.normpath(d)
    if not os.path.isfile(os.path.join(d, PROTO_FILES[1])):
        raise ImportError("cdc_client: %s not found under %s (set CDC_PROTO_PATH to the directory "
                          "holding cdc/v1/*.proto)" % (PROTO_FILES[1], d))
    return d


def _compile():
    out = tempfile.mkdtemp(prefix="cdc-client-py-")
    atexit.register(shutil.rmtree, out, True)
    try:
        subprocess.run(["protoc", "-I" + proto_dir(), "--python_out=" + out] + list(PROTO_FILES),
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise ImportError("cdc_client: protoc not found (Debian: apt-get install protobuf-compiler)")
    except subprocess.CalledProcessError as e:
        raise ImportError("cdc_client: protoc failed: %s" % e.stderr.decode(errors="replace").strip())
    # cdc/ and cdc/v1/ stay namespace packages (no __init__.py) so that they merge with, rather
    # than lose to, any other directory called cdc on sys.path, such as the repository's C sources.
    sys.path.insert(0, out)
    from cdc.v1 import event_pb2, subscriber_pb2
    return event_pb2, subscriber_pb2


event_pb2, subscriber_pb2 = _compile()

# Both generated modules' messages and enum values in one namespace: pb.Event, pb.ServerFrame,
# pb.FAILOVER, pb.OP_INSERT, pb.Error.BAD_FRAME...
pb = types.ModuleType("cdc_client.pb")
for _m in (event_pb2, subscriber_pb2):
    for _k in dir(_m):
        if not _k.startswith("_") and _k != "DESCRIPTOR":
            setattr(pb, _k, getattr(_m, _k))
