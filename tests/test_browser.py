"""The HTML report in a real browser: it renders, logs no errors, loads nothing, and trace strings run no script.

Drives Debian's headless chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``: fd 3 in,
fd 4 out, NUL-separated JSON), so it needs no Python packages beyond the standard library and no open port.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from traceinsight.render import render

from .test_render_synth import synthetic_analysis

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium/google-chrome on PATH (Debian: apt-get install chromium)")


class Browser:
    def __init__(self, profile: Path) -> None:
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def wire() -> None:  # runs in the child: the protocol wants exactly fds 3 and 4
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=wire, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def _read(self, timeout: float) -> dict | None:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._r], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self._id += 1
        msg: dict = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self._read(deadline - time.monotonic())
            if m is None:
                break
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)
        raise TimeoutError(method)

    def wait_for(self, method: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        if any(e.get("method") == method for e in self.events):
            return
        while time.monotonic() < deadline:
            m = self._read(deadline - time.monotonic())
            if m is None:
                break
            self.events.append(m)
            if m.get("method") == method:
                return
        raise TimeoutError(method)

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            m = self._read(max(end - time.monotonic(), 0.01))
            if m is not None:
                self.events.append(m)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._r)
        os.close(self._w)


def open_report(path: Path, profile: Path, screenshot: Path | None = None, js: bool = True) -> dict:
    """Load ``path`` and return what happened: console errors, requests, dialogs, DOM facts, screenshot size."""
    b = Browser(profile)
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            b.send(m, session=sid)
        b.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": False}, session=sid)
        if not js:
            b.send("Emulation.setScriptExecutionDisabled", {"value": True}, session=sid)
        b.events.clear()
        b.send("Page.navigate", {"url": path.resolve().as_uri()}, session=sid)
        b.wait_for("Page.loadEventFired")
        b.drain(0.5)
        probe = """JSON.stringify({
            title: document.title,
            injected: document.querySelectorAll('#injected, img[src="x"], img[onerror]').length,
            scripts: document.scripts.length,
            js: document.documentElement.classList.contains('js'),
            tabbars: document.querySelectorAll('.tabbar').length,
            fixesVisible: Array.from(document.querySelectorAll('.fix')).filter(e => e.offsetParent !== null).length,
            fixes: document.querySelectorAll('.fix').length,
            text: document.body.innerText.length,
            svgs: document.querySelectorAll('svg').length,
            hasHostileText: document.body.textContent.includes('<script>alert(1)</script>')
        })"""
        facts = json.loads(b.send("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=sid)["result"]["value"])
        if screenshot is not None:
            shot = b.send("Page.captureScreenshot", {"format": "png"}, session=sid)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        b.drain(0.2)
        ev = b.events
        errors = [e["params"] for e in ev if e.get("method") == "Runtime.exceptionThrown"]
        errors += [e["params"] for e in ev if e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "assert")]
        errors += [e["params"]["entry"] for e in ev if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error"]
        requests = [e["params"]["request"]["url"] for e in ev if e.get("method") == "Network.requestWillBeSent"]
        dialogs = [e["params"] for e in ev if e.get("method") == "Page.javascriptDialogOpening"]
        return {"facts": facts, "errors": errors, "requests": requests, "dialogs": dialogs}
    finally:
        b.close()


def _external(urls: list[str]) -> list[str]:
    return [u for u in urls if not u.startswith(("file:", "data:", "about:"))]


def test_report_in_browser(tmp_path):
    a = synthetic_analysis()
    page = tmp_path / "report.html"
    page.write_text(render(a, "html"), encoding="utf-8")
    shot = tmp_path / "report.png"
    r = open_report(page, tmp_path / "profile", screenshot=shot)
    assert r["errors"] == [], r["errors"]
    assert _external(r["requests"]) == []
    assert r["requests"] and all(u.startswith("file:") for u in r["requests"])  # only the page itself
    assert r["dialogs"] == []
    f = r["facts"]
    assert f["js"] and f["tabbars"] >= 1 and f["svgs"] >= 2
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_readable_without_js(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render(synthetic_analysis(), "html"), encoding="utf-8")
    r = open_report(page, tmp_path / "profile", js=False)
    f = r["facts"]
    assert not f["js"] and f["tabbars"] == 0
    assert f["fixes"] > 0 and f["fixesVisible"] == f["fixes"]  # every framework's fix shows
    assert f["text"] > 500


def test_hostile_trace_runs_no_script(tmp_path):
    a = synthetic_analysis(hostile=True)
    page = tmp_path / "hostile.html"
    html = render(a, "html")
    page.write_text(html, encoding="utf-8")
    r = open_report(page, tmp_path / "profile")
    f = r["facts"]
    assert r["dialogs"] == [], "a trace string ran alert()"
    assert f["injected"] == 0 and f["scripts"] == 1
    # document.title unchanged: exactly the (hostile) file name, as text
    assert f["title"] == "traceinsight · " + a.timeline.meta.path.rsplit("/", 1)[-1]
    assert f["hasHostileText"]
    assert _external(r["requests"]) == []
    assert r["errors"] == [], r["errors"]


def test_diff_page_in_browser(tmp_path):
    """The diff page: renders with no errors, loads nothing, runs no script (it has none), hostile names stay text."""
    from traceinsight.delta import diff

    from .helpers.model_traces import write_model

    base = write_model(tmp_path / "base.json", data_wait_us=2000, seed=1)
    head = write_model(tmp_path / "head.json", seed=2)
    page = tmp_path / "diff.html"
    page.write_text(diff(base, head).render("html"), encoding="utf-8")
    shot = tmp_path / "diff.png"
    r = open_report(page, tmp_path / "profile", screenshot=shot)
    assert r["errors"] == [], r["errors"]
    assert _external(r["requests"]) == [] and r["dialogs"] == []
    f = r["facts"]
    assert f["scripts"] == 0 and f["title"] == "traceinsight diff · faster" and f["text"] > 500
    assert shot.stat().st_size > 20_000
