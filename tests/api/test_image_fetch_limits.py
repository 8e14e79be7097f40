"""`gym serve --fetch-remote-images` is not a proxy into the server's network and cannot be starved.

One real server (builtin:tiny-vl) allows only 127.0.0.2 through ``--allow-image-hosts``; a trap site on
127.0.0.1 serves a real PNG and counts its visitors, so a refused URL that were fetched anyway would
show up there. A drip site sends one byte every 0.1 s: the 3 s deadline is for the whole fetch, and six
such fetches never delay a text request (they have a pool of their own)."""

from __future__ import annotations

import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from gym.api.remote_images import FETCH_WORKERS, MAX_REMOTE_IMAGES
from tests.api.conftest import server_env, start_server, stop

pytestmark = pytest.mark.slow
DEADLINE_S = 3
DRIP_BYTES = 80  # 8 s at 0.1 s a byte, past two deadlines; a per-read timeout would never fire


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (20, 180, 40)).save(buffer, format="PNG")
    return buffer.getvalue()


class Site(ThreadingHTTPServer):
    """A loopback site: /image.png, /hop (redirects to /image.png), /to?url (redirects there), /drip."""

    daemon_threads = True

    def __init__(self, host: str) -> None:
        super().__init__((host, 0), Handler)
        self.hits: list[str] = []
        self.drips_started = 0
        self.pool_full = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: Site

    def log_message(self, *args: object) -> None:
        return None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        with self.server.lock:
            self.server.hits.append(self.path)
        if self.path.startswith("/to?"):
            self._redirect(self.path[4:])
        elif self.path == "/hop":
            self._redirect("/image.png")
        elif self.path == "/drip":
            self._drip()
        else:
            body = _png()
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _drip(self) -> None:
        with self.server.lock:
            self.server.drips_started += 1
            if self.server.drips_started >= FETCH_WORKERS:
                self.server.pool_full.set()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(DRIP_BYTES))
        self.end_headers()
        try:
            for _ in range(DRIP_BYTES):  # bounded: stops by itself after DRIP_BYTES / 10 seconds
                self.wfile.write(b"\x89")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:  # the server hung up at its deadline
            return


def _image_request(client: openai.OpenAI, model: str, *urls: str, text: str = "Colour?"):
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": [*parts, {"type": "text", "text": text}]}],
        max_tokens=2, temperature=0,
    )  # fmt: skip


@pytest.fixture(scope="module")
def sites():
    trap, allowed = Site("127.0.0.1"), Site("127.0.0.2")
    yield trap, allowed
    trap.close()
    allowed.close()


@pytest.fixture(scope="module")
def vl_server(cache_root, sites):
    args = ["builtin:tiny-vl", "--fetch-remote-images", "--image-fetch-timeout", str(DEADLINE_S),
            "--allow-image-hosts", "127.0.0.2"]  # fmt: skip
    url, process = start_server(args, server_env(cache_root))
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    yield client, client.models.list().data[0].id
    stop(process)


def test_non_public_addresses_are_refused_on_every_hop(vl_server, sites) -> None:
    client, model = vl_server
    trap, allowed = sites
    port = trap.server_address[1]
    refused = {
        f"http://127.0.0.1:{port}/image.png": "a loopback address",
        f"http://localhost:{port}/image.png": "a loopback address",
        f"http://2130706433:{port}/image.png": "a loopback address",
        f"http://0x7f.1:{port}/image.png": "a loopback address",
        f"http://[::1]:{port}/image.png": "a loopback address",
        f"http://[::ffff:127.0.0.1]:{port}/image.png": "a loopback address",
        "http://169.254.169.254/latest/meta-data/": "a cloud metadata address",
        "http://[fd00:ec2::254]/latest/meta-data/": "a cloud metadata address",
        "http://10.0.0.1/image.png": "a private address",
        f"{allowed.base}/to?{trap.base}/image.png": "a loopback address",  # the redirect's hop
        f"{allowed.base}/to?http://localhost:{port}/image.png": "a loopback address",
        f"{allowed.base}/to?file:///etc/passwd": "only http(s) is fetched",
    }
    for url, reason in refused.items():
        with pytest.raises(openai.BadRequestError) as error:
            _image_request(client, model, url)
        message = error.value.body["message"]
        assert message.startswith("messages[0].content[0]: ") and reason in message, (url, message)
        assert str(port) not in message and "127.0.0" not in message  # neither URL nor address echoed
    assert trap.hits == [], "a refused address was contacted"
    before = len(allowed.hits)
    reply = _image_request(client, model, f"{allowed.base}/hop")  # the allow-list, and a redirect followed
    assert reply.usage.prompt_tokens > 16 and allowed.hits[before:] == ["/hop", "/image.png"]


def test_slow_images_meet_one_deadline_and_never_hold_up_text(vl_server, sites) -> None:
    client, model = vl_server
    _trap, allowed = sites

    def text() -> str:
        messages = [{"role": "user", "content": "Say hi"}]
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
        return reply.choices[0].message.content

    reference = text()
    finished: dict[str, float] = {}
    with ThreadPoolExecutor(7) as pool:

        def slow_image(i: int) -> str:
            try:
                _image_request(client, model, f"{allowed.base}/drip")
            except openai.BadRequestError as error:
                return error.body["message"]
            finally:
                finished[f"image{i}"] = time.monotonic()
            return "accepted"

        images = [pool.submit(slow_image, i) for i in range(6)]
        assert allowed.pool_full.wait(30), "the slow image fetches never started"
        answer = text()
        finished["text"] = time.monotonic()
        messages = [f.result(timeout=120) for f in images]
    assert answer == reference  # the text request was answered in full, not cut short
    assert finished["text"] < min(v for k, v in finished.items() if k != "text"), finished
    for message in messages:
        assert message == (
            f"messages[0].content[0]: fetching the image took longer than {DEADLINE_S} s, this server's limit"
        )
    assert allowed.drips_started == 6


def test_a_request_may_fetch_only_so_many_images(vl_server, sites) -> None:
    client, model = vl_server
    _trap, allowed = sites
    before = len(allowed.hits)
    with pytest.raises(openai.BadRequestError) as error:
        _image_request(client, model, *[f"{allowed.base}/image.png"] * (MAX_REMOTE_IMAGES + 1))
    assert error.value.body["message"] == (
        f"messages: {MAX_REMOTE_IMAGES + 1} remote image URLs; this server fetches at most "
        f"{MAX_REMOTE_IMAGES} per request (send the others as data: URLs)."
    )
    assert allowed.hits[before:] == []  # refused before any fetch
