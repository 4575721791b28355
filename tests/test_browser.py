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


@pytest.fixture(autouse=True)
def browser_present():
    """A skip on a developer's machine without a browser; a failure in CI, where .ci/run installs one."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium/google-chrome on PATH in CI (.ci/run installs it)")
        pytest.skip("no chromium/google-chrome on PATH (Debian: apt-get install chromium)")


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


def open_report(path: Path, profile: Path, screenshot: Path | None = None, js: bool = True, extra: str | None = None) -> dict:
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
        if extra is not None:  # a test's own probe, a JSON.stringify expression
            facts["extra"] = json.loads(b.send("Runtime.evaluate", {"expression": extra, "returnByValue": True}, session=sid)["result"]["value"])
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


def test_memory_chart_in_browser(tmp_path):
    """The GPU memory chart: drawn (allocated and reserved lines with real extent, capacity, peak, step marks) on the
    x axis of the timeline's whole-trace overview, and an op name from the trace stays text."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace(memory_bytes=16 << 30)
    level = 2 << 30
    for s in range(4):
        t0 = s * 10_000
        t.step(s + 1, t0, 9_000)
        t.cpu_op("<script>alert(1)</script>", t0 + 100, 50)
        level += 1 << 30
        t.memory(t0 + 120, 1 << 30, allocated=level, reserved=8 << 30)
        t.kernel("gemm", t0 + 300, 5_000)
        level -= 1 << 30
        t.memory(t0 + 8_000, -(1 << 30), allocated=level, reserved=8 << 30)
    a = traceinsight.analyze(t.write(tmp_path / "mem.json"))
    page = tmp_path / "mem.html"
    page.write_text(render(a, "html"), encoding="utf-8")
    probe = """JSON.stringify((() => {
        const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.width, r.height]; };
        const mem = document.querySelector('#memory svg.mem');
        const ov = document.querySelector('#timeline svg.tl');
        return {
          chart: mem ? box(mem) : null, overview: ov ? box(ov) : null,
          alloc: Array.from(document.querySelectorAll('#memory polyline.mem-alloc')).map(p => p.getBBox().width),
          reserved: document.querySelectorAll('#memory polyline.mem-res').length,
          capacity: document.querySelectorAll('#memory line.mem-cap').length,
          peak: document.querySelectorAll('#memory circle.mem-peak').length,
          steps: document.querySelectorAll('#memory line.mem-step').length,
          summary: (document.querySelector('#memory .mem-sum') || {}).textContent || ''
        };
    })())"""
    r = open_report(page, tmp_path / "profile", screenshot=tmp_path / "mem.png", extra=probe)
    assert r["errors"] == [] and r["dialogs"] == []
    x = r["facts"]["extra"]
    assert x["chart"] and x["chart"][1] > 600 and x["chart"][2] > 80
    assert x["overview"] and abs(x["chart"][0] - x["overview"][0]) < 1 and abs(x["chart"][1] - x["overview"][1]) < 1  # same x axis
    assert x["alloc"] and x["alloc"][0] > 300 and x["reserved"] == 1 and x["capacity"] == 1 and x["peak"] == 1
    assert x["steps"] == 4
    assert "peak allocated 3.0 GiB" in x["summary"] and "peak reserved 8.0 GiB" in x["summary"] and "<script>" in x["summary"]
