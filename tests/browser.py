"""Headless Chromium, driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
messages are JSON, each ended by a NUL byte, on file descriptors 3 and 4 of the browser), to
load a page from ``file://`` and report what a reader's browser would show: console errors,
uncaught exceptions, failed requests, each image's natural size, the ids of the page's
sections, and a screenshot.

Chromium is an anchor like the cross-check libraries: a test that needs it fails, never skips,
when it is missing (Debian: ``apt-get install chromium``; ``.ci/run`` installs it).
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: A fresh profile and no background traffic: on a closed network Chromium otherwise waits on
#: its own requests (updates, sync, QUIC probes) and starts slowly or not at all.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe")

#: What the page is asked once it has loaded: every image's source (its first characters),
#: natural width and height, and the ids and top edges (pixels) of the sections in document
#: order.
_PROBE = """JSON.stringify({
  images: Array.from(document.images).map(i => [i.getAttribute('src').slice(0, 40),
                                                 i.naturalWidth, i.naturalHeight]),
  sections: Array.from(document.querySelectorAll('section[id]')).map(s => s.id),
  tops: Array.from(document.querySelectorAll('section[id]')).map(s => s.offsetTop),
  height: document.documentElement.scrollHeight})"""


def chromium() -> str:
    """The Chromium executable; the test fails when there is none."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Chromium is required for the browser tests (Debian: apt-get install "
                    "chromium; .ci/run installs it)")
    return path


#: Asked after the page's fonts have loaded: which CJK characters of the page's text the page's
#: fonts cannot draw, in Chinese-language elements (lang="zh-Hans") and in the rest (Chinese
#: words quoted in English text) alike. Each character is drawn on a canvas in the computed
#: font of the element holding it and compared with U+E000 drawn in the same font, a
#: private-use character no font here holds (drawn as the missing-glyph box); characters drawn
#: alike are missing. The extra characters of ``also`` (a test of the probe itself) are
#: checked in the body's font. ``outside`` lists the CJK characters found outside
#: Chinese-language elements.
_GLYPHS = """(async (also) => {
  await document.fonts.ready;
  const cjk = c => c.codePointAt(0) >= 0x2E80;
  const found = new Map();  // font -> set of characters
  const outside = new Set();
  const add = (font, c) => { if (!found.has(font)) found.set(font, new Set());
                             found.get(font).add(c); };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const chars = Array.from(node.textContent).filter(cjk);
    if (!chars.length) continue;
    const element = node.parentElement;
    const font = '32px ' + getComputedStyle(element).fontFamily;
    const chinese = element.closest('[lang|="zh"]') !== null;
    for (const c of chars) { add(font, c); if (!chinese) outside.add(c); }
  }
  for (const c of Array.from(also)) add('32px ' + getComputedStyle(document.body).fontFamily, c);
  const canvas = document.createElement('canvas');
  canvas.width = 48; canvas.height = 48;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (font, c) => { ctx.clearRect(0, 0, 48, 48); ctx.font = font;
                              ctx.fillText(c, 4, 36); return ctx.getImageData(0, 0, 48, 48).data; };
  const same = (a, b) => a.every((v, i) => v === b[i]);
  const missing = new Set();
  let checked = 0;
  for (const [font, chars] of found) {
    await document.fonts.load(font, Array.from(chars).join(''));
    const box = draw(font, '\uE000');
    for (const c of chars) { checked += 1; if (same(draw(font, c), box)) missing.add(c); }
  }
  return JSON.stringify({checked, missing: Array.from(missing).sort().join(''),
                         outside: Array.from(outside).sort().join('')});
})"""
#: A fontconfig file that offers only the DejaVu fonts: a machine without any CJK font.
_NO_CJK_FONTS = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>/usr/share/fonts/truetype/dejavu</dir><cachedir>{cache}</cachedir>
</fontconfig>
"""


@dataclass
class PageReport:
    """What loading one page gave."""

    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    images: list[tuple[str, int, int]] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    tops: list[int] = field(default_factory=list)
    height: int = 0
    screenshot: bytes = b""
    #: the page printed (``Page.printToPDF``, A4), when asked for
    pdf: bytes = b""
    #: the CJK characters of the page's text no font of the page draws (see _GLYPHS), the
    #: number of (font, character) pairs checked, and the CJK characters found outside
    #: Chinese-language elements, when asked for
    missing_glyphs: str | None = None
    glyphs_checked: int = 0
    glyphs_outside_chinese: str = ""
    #: the values of the ``evaluate`` expressions, by name
    values: dict = field(default_factory=dict)

    @property
    def pdf_pages(self) -> int:
        """The printed page count: the PDF's page objects."""
        return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", self.pdf))


class _Pipe:
    def __init__(self, to_browser: int, from_browser: int, timeout: float):
        self.to_browser, self.from_browser = to_browser, from_browser
        self.buffer, self.next_id, self.events = b"", 0, []
        self.deadline = time.monotonic() + timeout

    def send(self, method: str, params: dict | None = None, session: str | None = None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        reply = self.wait(lambda m: m.get("id") == self.next_id)
        if "error" in reply:
            raise AssertionError(f"DevTools {method}: {reply['error']}")
        return reply.get("result", {})

    def wait(self, matches):
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if matches(message):
                    return message
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("Chromium did not answer in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    raise AssertionError("Chromium closed the DevTools pipe")
                self.buffer += chunk


def _above_nine(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def load_page(path: Path, width: int = 1280, height: int = 900, timeout: float = 90.0,
              full_page: bool = False, *, no_cjk_fonts: bool = False, pdf: bool = False,
              glyphs: str | None = None, evaluate: dict | None = None) -> PageReport:
    """Open ``path`` in headless Chromium from ``file://`` and report on it (see the module).

    ``full_page`` makes the screenshot the whole page instead of the first ``height`` pixels.
    ``no_cjk_fonts`` hides every font but DejaVu (a ``FONTCONFIG_FILE`` listing no CJK font).
    ``pdf`` prints the page to PDF too. ``glyphs`` (a string, possibly empty) asks which CJK
    characters of the page's text, and of ``glyphs``, no font of the page draws.
    ``evaluate`` maps names to JavaScript expressions whose JSON-able values are reported.
    """
    executable = chromium()
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    # above 9 first, so that putting them on 3 and 4 in the child overwrites neither
    to_browser_r, from_browser_w = _above_nine(to_browser_r), _above_nine(from_browser_w)

    def on_3_and_4():
        os.dup2(to_browser_r, 3)  # dup2 leaves 3 and 4 open across exec
        os.dup2(from_browser_w, 4)

    profile = tempfile.mkdtemp(prefix="refseg-chromium-")
    errors = open(Path(profile).with_suffix(".log"), "w+b")
    env = dict(os.environ)
    if no_cjk_fonts:
        conf = Path(profile) / "fonts.conf"
        conf.write_text(_NO_CJK_FONTS.format(cache=Path(profile) / "fontcache"))
        env["FONTCONFIG_FILE"] = str(conf)
    process = subprocess.Popen(
        [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        preexec_fn=on_3_and_4, close_fds=False, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=errors, env=env)
    os.close(to_browser_r)
    os.close(from_browser_w)
    pipe = _Pipe(to_browser_w, from_browser_r, timeout)
    report = PageReport()
    try:
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        except AssertionError as exc:
            errors.seek(0)
            tail = errors.read().decode(errors="replace").strip().splitlines()[-5:]
            raise AssertionError(f"{exc}; Chromium's last words: {tail}") from None
        session = pipe.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session)
        pipe.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session=session)
        pipe.wait(lambda m: m.get("method") == "Page.loadEventFired")
        probe = json.loads(pipe.send("Runtime.evaluate", {
            "expression": _PROBE, "returnByValue": True}, session=session)["result"]["value"])
        report.images = [tuple(i) for i in probe["images"]]
        report.sections, report.height = probe["sections"], probe["height"]
        report.tops = probe["tops"]
        if full_page:
            pipe.send("Emulation.setDeviceMetricsOverride", {
                "width": width, "height": report.height, "deviceScaleFactor": 1,
                "mobile": False}, session=session)
        for name, expression in (evaluate or {}).items():
            report.values[name] = pipe.send("Runtime.evaluate", {
                "expression": expression, "returnByValue": True},
                session=session)["result"].get("value")
        if glyphs is not None:
            found = json.loads(pipe.send("Runtime.evaluate", {
                "expression": f"({_GLYPHS})({json.dumps(glyphs)})", "awaitPromise": True,
                "returnByValue": True}, session=session)["result"]["value"])
            report.missing_glyphs = found["missing"]
            report.glyphs_checked = found["checked"]
            report.glyphs_outside_chinese = found["outside"]
        shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)
        report.screenshot = base64.b64decode(shot["data"])
        if pdf:
            printed = pipe.send("Page.printToPDF", {"paperWidth": 8.27, "paperHeight": 11.69,
                                                    "printBackground": True},
                                session=session)
            report.pdf = base64.b64decode(printed["data"])
        for event in pipe.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error",
                                                                               "assert"):
                report.console_errors.append(json.dumps(params.get("args"))[:300])
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                report.console_errors.append(f"{entry['text']} {entry.get('url', '')}"[:300])
            elif method == "Runtime.exceptionThrown":
                report.exceptions.append(json.dumps(params["exceptionDetails"])[:300])
            elif method == "Network.loadingFailed":
                report.failed_requests.append(f"{params.get('type')}: {params['errorText']}")
        try:
            pipe.send("Browser.close")
        except AssertionError:
            pass
    finally:
        os.close(to_browser_w)
        os.close(from_browser_r)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)
        errors.close()
        Path(errors.name).unlink(missing_ok=True)
    return report
