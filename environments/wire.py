"""The command server's wire protocol: what the host (environments/docker_runtime.py) and the server in the container
(environments/container_server.py) say to each other, written once for both.

The server runs on the image's own Python (3.5 and later, standard library only), so this module is shipped beside
it and keeps to what 3.5 has: typed records are named tuples, not dataclasses.

A request is 8 bytes (header length, payload length, big-endian), a JSON header (the op and the request's fields),
then the payload (the bytes a `Write` writes). The reply is frames, each a kind byte and a 4-byte big-endian length,
then the bytes: OUTPUT frames (a command's output, a file's data) and one final frame, RUN_DONE (a `RunStatus`,
packed) for a `Run`, STATUS (a `Status` as JSON) for every other request.
"""

import collections
import json
import struct

#: a request's header and payload lengths
REQUEST = struct.Struct(">II")
#: a reply frame's kind and length
FRAME = struct.Struct(">cI")
OUTPUT, STATUS, RUN_DONE = b"O", b"X", b"R"
#: a run's final status: exit code (NO_EXIT: none), flags (TIMED_OUT, OOM_KILLED, PIDS_LIMIT_HIT), processes swept
RUN_STATUS = struct.Struct(">iBI")
NO_EXIT = -(1 << 31)
TIMED_OUT, OOM_KILLED, PIDS_LIMIT_HIT = 1, 2, 4


class Run(collections.namedtuple("Run", "cmd cwd env timeout keep_caps")):
    """Run `cmd` in `cwd` with `env` added, killed after `timeout` seconds (None: never); the command keeps at most
    the capabilities `keep_caps`."""

    op = "run"


class Read(collections.namedtuple("Read", "path")):
    """Send the file's bytes as OUTPUT frames."""

    op = "read"


class Write(collections.namedtuple("Write", "path")):
    """Write the request's payload to the file (its folders made, its mode and owner kept)."""

    op = "write"


class Snapshot(collections.namedtuple("Snapshot", "root store base limit_bytes")):
    """Record the tree under `root` (at git commit `base`) as the base later resets restore, its files copied to
    `store`; refused past `limit_bytes`."""

    op = "snapshot"


class Reset(collections.namedtuple("Reset", "root keep_bytecode")):
    """Put the tree under `root` back to its snapshot (trusted bytecode kept with `keep_bytecode`)."""

    op = "reset"


class TrustBytecode(collections.namedtuple("TrustBytecode", "root")):
    """Record the bytecode of the snapshot's unchanged files as it is now (before any untrusted code ran)."""

    op = "trust_bytecode"


class Digest(collections.namedtuple("Digest", "root patterns stats")):
    """sha256 of the files under `root` whose name matches `patterns` (None: all), or with `stats` of every
    entry's lstat."""

    op = "digest"


class Stop(collections.namedtuple("Stop", "")):
    """Kill every running command and whatever it left."""

    op = "stop"


class Own(collections.namedtuple("Own", "root uid gid home")):
    """Hand the tree under `root` to uid:gid, who then runs the commands, with `home` as its home folder."""

    op = "own"


REQUESTS = {cls.op: cls for cls in (Run, Read, Write, Snapshot, Reset, TrustBytecode, Digest, Stop, Own)}


class Status(collections.namedtuple("Status", "ok message error errno result")):
    """How a request other than `Run` ended: `ok`, else why (`message`; a failed file operation's exception name
    and errno in `error` and `errno`); `result` holds what the op counted or computed (e.g. files, changed,
    sha256)."""

    @classmethod
    def done(cls, **result):
        return cls(True, None, None, None, result)

    @classmethod
    def failed(cls, message, error=None, errno=None):
        return cls(False, message, error, errno, {})


class RunStatus(collections.namedtuple("RunStatus", "exit_code timed_out oom_killed pids_limit_hit swept")):
    """How a command ended: its exit code (None when killed on timeout), whether the timeout, the memory cgroup's
    OOM killer or the pids limit struck, and how many escaped processes were swept after it."""

    def pack(self):
        flags = ((TIMED_OUT if self.timed_out else 0) | (OOM_KILLED if self.oom_killed else 0)
                 | (PIDS_LIMIT_HIT if self.pids_limit_hit else 0))
        return RUN_STATUS.pack(NO_EXIT if self.exit_code is None else self.exit_code, flags, self.swept)

    @classmethod
    def unpack(cls, data):
        exit_code, flags, swept = RUN_STATUS.unpack(data)
        return cls(None if exit_code == NO_EXIT else exit_code, bool(flags & TIMED_OUT), bool(flags & OOM_KILLED),
                   bool(flags & PIDS_LIMIT_HIT), swept)


def encode_request(request, payload=b""):
    """A request's bytes on the wire."""
    fields = dict(request._asdict())
    fields["op"] = request.op
    header = json.dumps(fields).encode("utf-8")
    return REQUEST.pack(len(header), len(payload)) + header + payload


def decode_request(buf):
    """(request, payload, bytes used) of the first complete request in `buf`, or None while it is incomplete;
    ValueError for bytes that are not a request (an unknown op, missing or extra fields)."""
    if len(buf) < REQUEST.size:
        return None
    head, size = REQUEST.unpack_from(buf)
    end = REQUEST.size + head + size
    if len(buf) < end:
        return None
    fields = json.loads(bytes(buf[REQUEST.size:REQUEST.size + head]).decode("utf-8"))
    cls = REQUESTS.get(fields.pop("op", None))
    if cls is None or set(fields) != set(cls._fields):
        raise ValueError("not a request of this protocol")
    return cls(**fields), bytes(buf[REQUEST.size + head:end]), end


def encode_frame(kind, data):
    return FRAME.pack(kind, len(data)) + data


def encode_status(status):
    return json.dumps(status._asdict()).encode("utf-8")


def decode_final(kind, data):
    """The final frame's record: a `RunStatus` (RUN_DONE) or a `Status` (STATUS)."""
    if kind == RUN_DONE:
        return RunStatus.unpack(data)
    return Status(**json.loads(data.decode("utf-8")))
