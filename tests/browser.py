"""A real headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for page tests.

The browser runs offline-minded (no background networking, no component updates, a fresh profile) so a
page that tries to reach the network shows up as an error, never as a silent download. Console errors,
uncaught exceptions and browser log errors (failed loads, Content-Security-Policy violations) are
collected from before navigation until the page has loaded.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import websocket

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-allow-origins=*",
)
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("'chromium' is not on PATH: install the Debian package 'chromium' (see .ci/run)")


@dataclass
class PageProblems:
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return self.console_errors + self.exceptions + self.log_errors


class Page:
    """One tab: navigate, evaluate JavaScript, screenshot; events are gathered on a reader thread."""

    def __init__(self, ws_url: str) -> None:
        self._ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._next = 0
        self._lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: list[dict[str, Any]] = []
        self._arrived = threading.Condition(self._lock)
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()
        self.problems = PageProblems()
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _read(self) -> None:
        while True:
            try:
                message = json.loads(self._ws.recv())
            except (websocket.WebSocketException, OSError, ValueError):
                with self._arrived:
                    self._arrived.notify_all()
                return
            with self._arrived:
                if "id" in message:
                    self._replies[message["id"]] = message
                else:
                    self._events.append(message)
                    self._note(message)
                self._arrived.notify_all()

    def _note(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
            self.problems.console_errors.append(" ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.problems.exceptions.append(
                str(details.get("exception", {}).get("description") or details.get("text"))
            )
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            text = f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}"
            self.problems.log_errors.append(text)

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        with self._arrived:
            self._next += 1
            ident = self._next
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        with self._arrived:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise TimeoutError(f"no reply to {method} within {timeout}s")
                self._arrived.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise RuntimeError(f"{method} failed: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def _wait_event(self, method: str, since: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while not any(e.get("method") == method for e in self._events[since:]):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {method} within {timeout}s")
                self._arrived.wait(left)

    def open(self, url: str, *, width: int = 1280, height: int = 900, timeout: float = 30.0) -> None:
        """Navigate and wait for the load event, then a short settle for late errors."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)  # fmt: skip
        with self._arrived:
            since = len(self._events)
        self.call("Page.navigate", url=url)
        self._wait_event("Page.loadEventFired", since, timeout)
        time.sleep(0.3)

    def evaluate(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"evaluating {expression!r}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path, *, full_page: bool = True, max_height: int | None = None) -> Path:
        """PNG of the whole page (or the viewport), cut at ``max_height`` pixels when given."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            height = min(size[1], max_height) if max_height else size[1]
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": height, "scale": 1}
        data = self.call("Page.captureScreenshot", timeout=60, **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()
        self._reader.join(timeout=5)


@contextlib.contextmanager
def chromium(timeout: float = 30.0) -> Iterator[Page]:
    """A fresh headless Chromium with one blank tab; the browser and its profile are gone afterwards."""
    binary = chromium_binary()
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    process = subprocess.Popen(
        [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the wrapper script's children go with it
    )
    lines: list[str] = []
    try:
        endpoint = ""
        deadline = time.monotonic() + timeout
        assert process.stderr is not None
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            match = LISTENING.search(line)
            if match:
                endpoint = match.group(1)
                break
        if not endpoint:
            pytest.fail("chromium did not start its DevTools endpoint:\n" + "".join(lines[-20:]))
        threading.Thread(target=lambda: [None for _ in process.stderr or []], daemon=True).start()
        port = int(endpoint.split(":")[2].split("/")[0])
        import urllib.request

        request = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            target = json.loads(response.read())
        page = Page(target["webSocketDebuggerUrl"])
        try:
            yield page
        finally:
            page.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
