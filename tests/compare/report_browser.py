"""Open a report.html in headless Chromium (Debian's package ``chromium``; .ci/run installs it):
what the page logged to the console, what its images and sections hold, and a screenshot.

Its problems: an image not shown or not inline, an empty section, the recommendation shown twice
(repeated in another paragraph, list item, cell or definition); the console lines are returned
beside them. The
report has no script of its own. To read what a browser made of it (each <img>'s naturalWidth,
each section's rendered text), ``check_page`` opens a copy with one checker script appended before
</body>, which writes its findings into a ``data-check`` attribute that ``--dump-dom`` prints;
the console is read from Chromium's log (``--enable-logging=stderr --v=1``: every console message,
an uncaught error included, is an ``INFO:CONSOLE`` line). The screenshot is of the report itself,
untouched. Everything is a local file: no network is asked for (``--disable-background-networking``
and kin), and a page that reached for one would log it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[1] / ".tmp" / "report-html"
NOT_INSTALLED = "chromium is not installed and cannot be installed here"

CHECKER = r"""<script>
window.addEventListener("load", function () {
  var problems = [], images = [], sections = [];
  for (var i = 0; i < document.images.length; i++) {
    var img = document.images[i];
    images.push({alt: img.alt, width: img.naturalWidth, height: img.naturalHeight});
    if (!img.complete || img.naturalWidth === 0) problems.push("image not shown: " + (img.alt || img.src.slice(0, 40)));
    if (img.src.indexOf("data:image/png;base64,") !== 0) problems.push("image not inline: " + img.src.slice(0, 80));
  }
  var all = document.querySelectorAll("section");
  for (var j = 0; j < all.length; j++) {
    var s = all[j], h = s.querySelector("h2"), text = s.innerText.trim();
    var body = h ? text.slice(h.innerText.trim().length).trim() : text;
    sections.push(s.id);
    if (!body && !s.querySelector("img")) problems.push("empty section: " + s.id);
  }
  // The recommendation shown once: no other paragraph, list item, cell or definition repeats it.
  var rec = document.querySelector(".recommendation"), blocks = document.querySelectorAll("p, li, dd, td, figcaption");
  var said = rec ? rec.innerText.replace(/\s+/g, " ").trim() : "";
  for (var m = 0; said.length >= 20 && m < blocks.length; m++) {
    var el = blocks[m];
    if (el === rec || el.contains(rec) || rec.contains(el)) continue;
    if (el.innerText.replace(/\s+/g, " ").indexOf(said) >= 0) problems.push("recommendation shown twice: " + said.slice(0, 80));
  }
  var links = [], anchors = document.querySelectorAll("a[href]");
  for (var k = 0; k < anchors.length; k++) links.push(anchors[k].getAttribute("href"));
  document.body.setAttribute("data-check", JSON.stringify({
    images: images, sections: sections, links: links, problems: problems,
    height: document.documentElement.scrollHeight}));
});
</script>"""
CONSOLE = re.compile(r":INFO:CONSOLE[^\]]*\] (.*)$")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def ensure_chromium() -> tuple[str | None, str]:
    """Chromium's path, installing Debian's package first where it is missing and this user may
    (root, or sudo without a password); else (None, why not). .ci/run installs it beforehand."""
    found = chromium()
    if found:
        return found, ""
    if not shutil.which("apt-get"):
        return None, f"{NOT_INSTALLED}: no apt-get (install Debian's package chromium, or its equivalent)"
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and subprocess.run([*sudo, "true"], capture_output=True, check=False).returncode != 0:
        return None, f"{NOT_INSTALLED}: not root and no sudo without a password (run: sudo apt-get install chromium)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps = ([*sudo, "apt-get", "update", "-qq"],
             [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"])
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, env=env, timeout=600, check=False)
        except subprocess.TimeoutExpired:
            return None, f"{NOT_INSTALLED}: {' '.join(step)} ran past 600 s"
        if done.returncode != 0:
            return None, f"{NOT_INSTALLED}: {' '.join(step)} failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return chromium(), "" if chromium() else f"{NOT_INSTALLED}: apt-get installed chromium but it is not on PATH"


def _run(binary: str, args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    """Chromium, headless, with a throw-away profile (nothing of it is kept)."""
    with tempfile.TemporaryDirectory(prefix="specbench-chromium-") as profile:
        argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--hide-scrollbars", f"--user-data-dir={profile}",
                "--enable-logging=stderr", "--v=1", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def check_page(page: Path, work: Path) -> dict:
    """What Chromium made of ``page``: {images, sections, links, problems, height, console}; console
    is every console line the page caused (none for a sound report)."""
    binary = chromium()
    assert binary, NOT_INSTALLED
    work.mkdir(parents=True, exist_ok=True)
    # A copy, away from the run's folder (other tests read it): the page is self-contained, and its
    # links are returned for the caller to resolve against the original's folder.
    copy = work / f"{page.stem}.checked.html"
    text = page.read_text(encoding="utf-8")
    copy.write_text(text.replace("</body>", CHECKER + "\n</body>", 1), encoding="utf-8")
    done = _run(binary, ["--window-size=1280,800", "--virtual-time-budget=10000", "--dump-dom", copy.as_uri()])
    match = re.search(r'data-check="([^"]*)"', done.stdout)
    assert match, f"Chromium gave no DOM for {page} (rc {done.returncode}): {done.stderr[-2000:]}"
    found = json.loads(match.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                       .replace("&amp;", "&"))
    found["console"] = [m.group(1) for m in map(CONSOLE.search, done.stderr.splitlines()) if m]
    return found


def screenshot(page: Path, path: Path, height: int, width: int = 1280) -> Path:
    """A screenshot of the whole page (``height``: its scroll height) into ``path``."""
    binary = chromium()
    assert binary, NOT_INSTALLED
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _run(binary, [f"--screenshot={path}", f"--window-size={width},{max(height, 600)}",
                         "--virtual-time-budget=10000", page.as_uri()])
    assert path.is_file() and path.stat().st_size > 10_000, f"no screenshot of {page}: {done.stderr[-2000:]}"
    return path
