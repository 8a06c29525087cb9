"""A real headless browser for the tests: Debian's chromium, driven over the Chrome DevTools
Protocol (a websocket), so a test sees what a user's browser does with a page: its console
errors, uncaught exceptions, the DOM its scripts built, and a screenshot.

    with HeadlessChromium() as browser:
        page = browser.open(Path("inspect.html"), ready="document.body.dataset.ready === '1'")
        page.evaluate("document.title"); page.screenshot(Path("shot.png")); page.errors
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DEVTOOLS_LINE = re.compile(r"DevTools listening on (ws://[^\s]+)")


class Page:
    """One tab; `errors` collects console errors, uncaught exceptions and failed loads as they come."""

    def __init__(self, ws_url: str):
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(ws_url, max_size=None, open_timeout=30))
        self.errors: list[str] = []
        self._next_id = 0
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")

    def call(self, method: str, timeout_s: float = 120.0, **params: Any) -> dict:
        self._next_id += 1
        self.ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied {expression!r}; errors: {self.errors}")
            time.sleep(0.2)

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], 6000), "scale": 1})
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return path


class HeadlessChromium:
    def __init__(self, width: int = 1400, height: int = 1000):
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
        self.profile = tempfile.mkdtemp(prefix="tandem-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.browser_ws = self._devtools_url()
        self.port = int(re.search(r":(\d+)/", self.browser_ws).group(1))
        self.pages: list[Page] = []

    def _devtools_url(self) -> str:
        for line in self.proc.stderr:  # chromium says where DevTools listens before anything else matters
            if match := DEVTOOLS_LINE.search(line):
                # keep reading what it writes later, or a full pipe would stall the browser
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()
                return match.group(1)
        raise RuntimeError(f"chromium exited ({self.proc.wait()}) without opening DevTools")

    def open(self, path: Path, ready: str, timeout_s: float = 120.0) -> Page:
        """A new tab on file `path`, once `ready` (a JS expression) is true."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=30) as r:
            target = next(t for t in json.load(r) if t.get("type") == "page")
        page = Page(target["webSocketDebuggerUrl"])
        self.pages.append(page)
        page.call("Page.navigate", url=path.resolve().as_uri())
        page.wait_for(ready, timeout_s)
        return page

    def close(self) -> None:
        for page in self.pages:
            page._stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "HeadlessChromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
