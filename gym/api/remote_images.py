"""Fetching a client's http(s) image URL (`gym serve --fetch-remote-images`) without becoming its proxy.

A server that downloads on a client's behalf can be pointed at addresses only the server reaches, and at
URLs that answer one byte a second. So every fetch here:

* resolves the host itself and refuses loopback, private, link-local, cloud metadata and other
  non-public addresses (``localhost``, ``2130706433``, ``0x7f.1``, ``[::1]``, ``[::ffff:127.0.0.1]``
  all resolve to one), unless the operator's allow-list (``--allow-image-hosts``) names the host or
  a network holding the address;
* connects to the very address it checked (no second lookup a rebinding DNS could answer differently);
* follows redirects itself, checking every hop the same way, and only to http(s);
* has one deadline for the whole fetch, DNS lookups and redirects included: a watchdog shuts the socket
  when it passes, however slowly the bytes drip;
* reads at most :data:`REMOTE_IMAGE_MAX_BYTES`.

The URL is never repeated in an error (signed URLs carry credentials), nor the address it resolved to.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

REMOTE_IMAGE_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_FETCH_TIMEOUT_S = 10.0
MAX_REDIRECTS = 5
MAX_REMOTE_IMAGES = 8  # per request: each may take the whole deadline
FETCH_WORKERS = 4  # the fetch pool's size: image fetches never occupy the threads text requests use
ALLOW_HOSTS_ENV = "GYM_ALLOW_IMAGE_HOSTS"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


class FetchRefused(ValueError):
    """The image could not be fetched; the message is the sentence the client reads (a 400)."""


@dataclass(frozen=True)
class FetchPolicy:
    """How a server fetches remote images: the deadline per image and the non-public hosts it may reach."""

    timeout_s: float = DEFAULT_FETCH_TIMEOUT_S
    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = field(default=())

    @classmethod
    def build(cls, allow: Iterable[str] = (), timeout_s: float = DEFAULT_FETCH_TIMEOUT_S) -> FetchPolicy:
        """``allow``: host names, addresses or networks (``127.0.0.1``, ``10.0.0.0/8``, ``images.lan``)."""
        hosts, networks = set(), []
        for entry in (e.strip() for e in allow):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(timeout_s, frozenset(hosts), tuple(networks))

    def allows(self, host: str, address: IPAddress) -> bool:
        return host.rstrip(".") in self.allowed_hosts or any(address in n for n in self.allowed_networks)


def parse_allow_list(text: str | None) -> list[str]:
    """``--allow-image-hosts`` / ``$GYM_ALLOW_IMAGE_HOSTS``: comma- or space-separated entries."""
    return [part for part in (text or "").replace(",", " ").split() if part]


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` is not fetched from without an allow-list entry, or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if address.is_multicast or address.is_unspecified or address.is_reserved or not address.is_global:
        return "a non-public address"
    return None


def fetch_image_bytes(url: str, where: str, policy: FetchPolicy) -> bytes:
    """The bytes at ``url``, following up to :data:`MAX_REDIRECTS` redirects, all within one deadline."""
    deadline = time.monotonic() + policy.timeout_s
    for _hop in range(MAX_REDIRECTS + 1):
        location, data = _get(url, where, policy, deadline)
        if location is None:
            return data
        url = urljoin(url, location)
    raise FetchRefused(f"{where}: the image URL redirected more than {MAX_REDIRECTS} times")


def _resolve(host: str, port: int, where: str, policy: FetchPolicy, deadline: float) -> list[IPAddress]:
    """The host's addresses, looked up within the fetch's deadline (a slow DNS server counts too)."""
    lookup = _DNS_POOL.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = lookup.result(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        raise FetchRefused(_late(where, policy)) from None
    except (OSError, UnicodeError):  # socket.gaierror is an OSError
        infos = []
    if not infos:
        raise FetchRefused(f"{where}: the image URL's host could not be resolved")
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


def _late(where: str, policy: FetchPolicy) -> str:
    return f"{where}: fetching the image took longer than {policy.timeout_s:g} s, this server's limit"


_DNS_POOL = ThreadPoolExecutor(FETCH_WORKERS, thread_name_prefix="gym-image-dns")


def _target(
    url: str, where: str, policy: FetchPolicy, deadline: float
) -> tuple[str, int, IPAddress, str, str]:
    """Scheme, port, the checked address to connect to, the Host header and the request target."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(
            f"{where}: the image URL led to a {parts.scheme or 'relative'}: URL; only http(s) is fetched"
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchRefused(f"{where}: the image URL has an invalid port") from None
    host = parts.hostname or ""
    if not host:
        raise FetchRefused(f"{where}: the image URL has no host")
    addresses = _resolve(host, port, where, policy, deadline)
    for address in addresses:  # every answer is checked: one public, one private is still refused
        reason = refusal(address)
        if reason is not None and not policy.allows(host, address):
            raise FetchRefused(
                f"{where}: the image URL's host resolves to {reason}, which this server does not fetch "
                "from (its operator can list the host in --allow-image-hosts)"
            )
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, port, addresses[0], parts.netloc.rpartition("@")[2], target


def _get(url: str, where: str, policy: FetchPolicy, deadline: float) -> tuple[str | None, bytes]:
    """One GET: ``(location, b"")`` for a redirect, ``(None, body)`` for the image."""
    scheme, port, address, host_header, target = _target(url, where, policy, deadline)
    late = _late(where, policy)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise FetchRefused(late)
    expired = threading.Event()
    open_socket: list[socket.socket] = []  # the plain socket, then its TLS wrapper (which takes its fd)

    def cut() -> None:  # the total deadline: a recv that waits on a drip returns when the socket shuts
        expired.set()
        for sock in open_socket[-1:]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(remaining, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        open_socket.append(socket.create_connection((str(address), port), timeout=remaining))
        if expired.is_set():
            raise TimeoutError
        if scheme == "https":  # the certificate is checked against the URL's host, not the address
            context = ssl.create_default_context()
            hostname = urlsplit(url).hostname
            open_socket.append(context.wrap_socket(open_socket[-1], server_hostname=hostname,
                                                   do_handshake_on_connect=False))  # fmt: skip
            open_socket[-1].do_handshake()  # after the watchdog can reach the wrapper: a stalled handshake
        sock = open_socket[-1]
        connection = http.client.HTTPConnection(str(address), port, timeout=remaining)
        connection.sock = sock
        connection.request("GET", target, headers={"Host": host_header, "User-Agent": "gym-serve",
                                                   "Accept": "image/*", "Accept-Encoding": "identity"})  # fmt: skip
        response = connection.getresponse()
        if response.status in (301, 302, 303, 307, 308):
            location = response.getheader("Location")
            if not location:
                raise FetchRefused(f"{where}: the image URL redirected without a Location")
            return location, b""
        if not 200 <= response.status < 300:
            raise FetchRefused(f"{where}: fetching the image URL failed with HTTP {response.status}")
        chunks, total = [], 0
        while chunk := response.read(64 * 1024):
            total += len(chunk)
            if total > REMOTE_IMAGE_MAX_BYTES:
                raise FetchRefused(
                    f"{where}: the image at that URL is larger than {REMOTE_IMAGE_MAX_BYTES // (1024 * 1024)} MB"
                )
            chunks.append(chunk)
        if expired.is_set():  # the watchdog's shutdown reads as an early end of the body
            raise FetchRefused(late)
        return None, b"".join(chunks)
    except FetchRefused:
        raise
    except (OSError, http.client.HTTPException, ValueError) as error:
        if expired.is_set() or isinstance(error, TimeoutError):
            raise FetchRefused(late) from None
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise FetchRefused(f"{where}: the image URL could not be fetched ({reason})") from None
    finally:
        watchdog.cancel()
        for sock in open_socket:
            sock.close()
