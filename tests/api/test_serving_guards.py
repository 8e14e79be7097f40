"""The serving guards' boundaries, without a server: which addresses a remote image may come from, which
query values an access log masks, and where the request-body limits start refusing (the end-to-end
behaviour is in test_image_fetch_limits.py, test_hostile_bodies.py and test_space_hostile.py)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import threading
import time

import pytest

from gym.api.accesslog import redact_query
from gym.api.intake import MAX_DEPTH, MAX_INT_DIGITS, MAX_MESSAGES, MAX_VALUES, RequestRejected, parse_body
from gym.api.remote_images import FetchPolicy, FetchRefused, fetch_image_bytes, parse_allow_list, refusal
from gym.api.schemas import ChatCompletionRequest


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "a loopback address"),
        ("127.255.0.9", "a loopback address"),
        ("::1", "a loopback address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("::ffff:169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("169.254.1.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("10.2.3.4", "a private address"),
        ("172.16.0.1", "a private address"),
        ("192.168.1.1", "a private address"),
        ("fc00::1", "a private address"),
        ("0.0.0.0", "a private address"),
        ("100.64.0.1", "a non-public address"),
        ("224.0.0.1", "a non-public address"),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_which_addresses_are_refused(address: str, reason: str | None) -> None:
    assert refusal(ipaddress.ip_address(address)) == reason


def test_the_allow_list_names_hosts_addresses_and_networks() -> None:
    policy = FetchPolicy.build(parse_allow_list("images.lan, 10.1.0.0/16 127.0.0.2,[::1]"), 3)
    assert policy.timeout_s == 3
    assert policy.allows("images.lan", ipaddress.ip_address("192.168.0.5"))
    assert policy.allows("other", ipaddress.ip_address("10.1.200.3"))
    assert policy.allows("other", ipaddress.ip_address("::1"))
    assert not policy.allows("other", ipaddress.ip_address("10.2.0.1"))
    assert not policy.allows("other", ipaddress.ip_address("127.0.0.1"))


@pytest.mark.parametrize(
    ("target", "logged"),
    [
        ("/v1/models?api_key=sk-1&limit=2", "/v1/models?api_key=***&limit=2"),
        ("/?__theme=dark;token=abc", "/?__theme=dark;token=***"),
        (
            "/x?X-Amz-Signature=f00&hf%5Ftoken=hf_x&refresh-token=r",
            "/x?X-Amz-Signature=***&hf%5Ftoken=***&refresh-token=***",
        ),
        ("/x?password=p&q=cats&PAGE=2", "/x?password=***&q=cats&PAGE=2"),
        ("/health", "/health"),
    ],
)
def test_access_log_masks_credential_query_values(target: str, logged: str) -> None:
    assert redact_query(target) == logged


def _refusal(body: dict | bytes) -> RequestRejected | None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        parse_body(raw, ChatCompletionRequest)
    except RequestRejected as error:
        return error
    return None


def test_body_limits_start_exactly_where_documented() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert _refusal({**base, "messages": base["messages"] * MAX_MESSAGES}) is None
    error = _refusal({**base, "messages": base["messages"] * (MAX_MESSAGES + 1)})
    assert error is not None and error.param == "messages" and f"at most {MAX_MESSAGES:,}" in error.message

    def nested(levels: int) -> dict:
        schema: dict = {"type": "object"}
        for _ in range(levels - 5):  # tools, [0], function, parameters and the innermost "type": 5 levels
            schema = {"properties": schema}
        return {**base, "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}

    assert _refusal(nested(MAX_DEPTH)) is None
    error = _refusal(nested(MAX_DEPTH + 1))
    assert (
        error is not None
        and error.message == f"tools: nested more than {MAX_DEPTH} levels deep; this server's limit."
    )

    fits = json.dumps(base)[:-1] + f', "seed": 0, "metadata": {{"a": "{"x"}"}}}}'
    assert _refusal(fits.encode()) is None
    for digits, refused in ((MAX_INT_DIGITS, False), (MAX_INT_DIGITS + 1, True)):
        body = json.dumps(base)[:-1] + f', "max_tokens": {"9" * digits}}}'
        error = _refusal(body.encode())
        assert (error is not None and error.message.startswith("max_tokens: an integer of")) is refused, error

    error = _refusal({**base, "stop": ["a"] * MAX_VALUES})
    assert error is not None and error.code == "request_too_complex"


class _Stall(threading.Thread):
    """A loopback listener that accepts and then sends ``drip`` one byte per 0.1 s (nothing: a stalled
    TLS handshake), for at most ``seconds``, then hangs up by itself."""

    def __init__(self, drip: bytes, seconds: float) -> None:
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.drip, self.seconds = drip, seconds
        self.start()

    def run(self) -> None:
        connection, _ = self.listener.accept()
        connection.settimeout(0.1)
        with connection, contextlib.suppress(OSError):
            end = time.monotonic() + self.seconds
            for byte in self.drip or b"\0" * int(self.seconds * 10):
                if time.monotonic() > end:
                    break
                if self.drip:
                    connection.sendall(bytes([byte]))
                    time.sleep(0.1)
                else:
                    with contextlib.suppress(TimeoutError):
                        if connection.recv(4096) == b"":  # the client hung up
                            break
        self.listener.close()


@pytest.mark.parametrize(
    ("scheme", "drip"),
    [("http", b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n" + b"X-Slow: " + b"a" * 200), ("https", b"")],
    ids=["headers-drip", "tls-handshake-stall"],
)
def test_the_fetch_deadline_bounds_headers_and_the_tls_handshake(scheme: str, drip: bytes) -> None:
    stall = _Stall(drip, seconds=8)
    policy = FetchPolicy.build(["127.0.0.1"], timeout_s=1)
    start = time.monotonic()
    with pytest.raises(FetchRefused) as error:
        fetch_image_bytes(f"{scheme}://127.0.0.1:{stall.listener.getsockname()[1]}/a.png", "part", policy)
    elapsed = time.monotonic() - start
    assert str(error.value) == "part: fetching the image took longer than 1 s, this server's limit"
    assert elapsed < stall.seconds / 2, elapsed  # cut at the deadline, long before the stall ends
    stall.join(timeout=stall.seconds + 5)
