"""Open the report in headless Chromium (Debian's ``chromium``) over the DevTools protocol:
every image must load, nothing may be fetched from the network, no console error, no dialog
(the hostile trace id must not run), and a full-page screenshot is taken."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from report_fixtures import HOSTILE_ID

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # headless Chromium

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--remote-debugging-port=0", "--hide-scrollbars"]
TIMEOUT_S = 60


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is absent: install Debian's 'chromium' package (scripts/test.sh does)")


class DevTools:
    """A minimal Chrome DevTools Protocol client over one browser websocket (flat sessions)."""

    def __init__(self, socket):
        self.socket, self.next_id, self.events = socket, 0, []

    async def call(self, method: str, session: str | None = None, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        await self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(await asyncio.wait_for(self.socket.recv(), TIMEOUT_S))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    async def wait_for(self, method: str) -> dict:
        seen = [e for e in self.events if e.get("method") == method]
        while not seen:
            event = json.loads(await asyncio.wait_for(self.socket.recv(), TIMEOUT_S))
            self.events.append(event)
            if event.get("method") == method:
                seen.append(event)
        return seen[0]


async def _inspect(ws_url: str, page: Path, screenshot: Path) -> dict:
    import websockets

    async with websockets.connect(ws_url, max_size=None) as socket:
        tools = DevTools(socket)
        target = await tools.call("Target.createTarget", url="about:blank")
        session = (await tools.call("Target.attachToTarget", targetId=target["targetId"], flatten=True))["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            await tools.call(f"{domain}.enable", session)
        await tools.call("Emulation.setDeviceMetricsOverride", session, width=1280, height=900,
                         deviceScaleFactor=1, mobile=False)
        await tools.call("Page.navigate", session, url=page.as_uri())
        await tools.wait_for("Page.loadEventFired")
        probe = ("JSON.stringify({images: Array.from(document.images).map(i => [i.complete, i.naturalWidth]),"
                 " scripts: document.scripts.length, text: document.body.innerText})")
        result = await tools.call("Runtime.evaluate", session, expression=probe, returnByValue=True)
        state = json.loads(result["result"]["value"])
        size = (await tools.call("Page.getLayoutMetrics", session))["cssContentSize"]
        shot = await tools.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True,
                                clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        state["events"] = tools.events
        return state


def _devtools_url(profile: Path, process: subprocess.Popen) -> str:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if marker.is_file():
            lines = marker.read_text().split()
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        if process.poll() is not None:
            raise AssertionError(f"chromium exited with {process.returncode}")
        time.sleep(0.1)
    raise AssertionError("chromium did not open its DevTools port")


def test_report_renders_in_chromium(synthetic_report, tmp_path):
    pytest.importorskip("websockets", reason="the browser test drives Chromium with the 'websockets' package")
    binary = _chromium()
    profile = tmp_path / "profile"
    profile.mkdir()
    process = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    screenshot = Path(os.environ.get("SPECSCOPE_SCREENSHOT", tmp_path / "report.png"))
    try:
        state = asyncio.run(_inspect(_devtools_url(profile, process), synthetic_report.index, screenshot))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    assert len(state["images"]) == 8
    assert all(complete and width > 0 for complete, width in state["images"]), state["images"]
    assert state["scripts"] == 0
    assert HOSTILE_ID in state["text"]  # shown as text, not run
    events = state["events"]
    methods = {e.get("method") for e in events}
    assert "Page.javascriptDialogOpening" not in methods
    errors = [e for e in events
              if e.get("method") == "Runtime.exceptionThrown"
              or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
              or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert errors == []
    fetched = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    assert all(url.startswith(("file:", "data:")) for url in fetched), fetched
    assert screenshot.read_bytes().startswith(b"\x89PNG") and screenshot.stat().st_size > 20_000
