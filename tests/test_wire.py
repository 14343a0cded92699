"""The command server's wire protocol, as both ends read it: typed requests and replies through one encoding."""

from __future__ import annotations

import pytest
from pinpoint.environments import wire


@pytest.mark.parametrize("request_, payload", [
    (wire.Run("pytest -q", "/repo", {"A": "1"}, 30.5, [12]), b""),
    (wire.Write("/repo/a.py"), b"x = 1\n" * 10),
    (wire.Snapshot("/repo", "/.pinpoint/pristine", "abc123", 1 << 30), b""),
    (wire.Stop(), b""),
])
def test_a_request_reads_back_as_the_same_typed_request_after_a_partial_read(request_, payload):
    data = wire.encode_request(request_, payload)
    assert wire.decode_request(data[:-1] if payload else data[: wire.REQUEST.size + 3]) is None  # not all there yet
    decoded, body, used = wire.decode_request(bytearray(data + b"next"))
    assert (decoded, type(decoded), body, used) == (request_, type(request_), payload, len(data))


@pytest.mark.parametrize("header", [b'{"op": "format_disk"}', b'{"op": "read"}', b'{"op": "read", "path": "a", "x": 1}'])
def test_bytes_that_are_not_a_request_are_refused(header):
    with pytest.raises(ValueError):
        wire.decode_request(wire.REQUEST.pack(len(header), 0) + header)


def test_final_replies_decode_to_their_records():
    ran = wire.RunStatus(None, True, False, True, 3)
    assert wire.decode_final(wire.RUN_DONE, ran.pack()) == ran
    assert wire.decode_final(wire.RUN_DONE, wire.RunStatus(137, False, True, False, 0).pack()).exit_code == 137
    failed = wire.Status.failed("No such file", "FileNotFoundError", 2)
    assert wire.decode_final(wire.STATUS, wire.encode_status(failed)) == failed
    done = wire.decode_final(wire.STATUS, wire.encode_status(wire.Status.done(sha256="ab", files=2)))
    assert done.ok and done.result == {"sha256": "ab", "files": 2}
