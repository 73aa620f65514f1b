# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""report.html and index.html: the report and the fleet index as one self-contained HTML file each.

One implementation of what a report says: report.html is rendered from report.md's own text
(``render.render_markdown``) and the summary both come from, never from a second copy of the
report's wording. ``markdown_blocks`` reads the Markdown subset the report writes (headings,
paragraphs, lists one level deep, quotes, tables, fenced code, images) into blocks; the Jinja2
templates (``templates.py``, autoescape on) lay them out verdict first, with the plots inline as
base64 PNG data URIs. No script, no external file, no network: it opens from an AWX artifact, an
e-mail or a laptop offline. Jinja2 (ansible-core's own dependency) is imported when called, so only
the controller needs it.
"""

from __future__ import annotations

import base64
import re
import struct

from ansible_collections.specbench.core.plugins.module_utils.report.index import host_notes, host_row, kind_rows
from ansible_collections.specbench.core.plugins.module_utils.report.templates import STYLE, TEMPLATES
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import fmt_conc

# The plots in report.html: the speedup (what the verdict reads) first.
FIGURE_ORDER = ("speedup", "throughput", "per_stream", "latency", "latency_p99", "energy", "terms")
FIGURE_CAPTIONS = {
    "speedup": "each level's speedup (above 1: speculation pays). The wide pale bar is the family-wise interval, "
               "all levels at once, that decides the verdict; the thin bar with caps is the level's own 95% interval, "
               "which decides nothing; the red band and line are the crossover's 95% interval and its interpolated "
               "estimate",
    "throughput": "output tokens per second of every mode, with 95% intervals",
    "per_stream": "decode tokens per second one user sees, with 95% intervals",
    "latency": "time to first token (p50) and time per output token of every mode",
    "terms": "speedup ~= accept length / step-time ratio, per level",
    "latency_p99": "p99 time per output token and to first token of every mode per level, with their distribution-free "
                   "95% intervals by request; dashed: the SLO targets (compare_slo) where given",
    "energy": "joules on the server's GPUs per output token of every mode per level, with 95% intervals (the "
              "emulator's power model on emulated GPUs)",
}
VERDICTS = ("pays", "loses", "unclear", "failed", "saturated", "missing")
# Sections first in report.html after the verdict's card (report.md's Verdict section, in it), by the
# start of their report.md heading; the others follow in report.md's order.
FIRST = ("Plots", "Confounders")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_CODE = re.compile(r"`([^`]*)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_TABLE_SPLIT = re.compile(r"(?<!\\)\|")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")


# ---------------------------------------------------------------------------------------------
# Markdown (the subset report.md and index.md write) -> blocks
# ---------------------------------------------------------------------------------------------
def _cells(line: str) -> list[str]:
    return [c.strip() for c in _TABLE_SPLIT.split(line.strip().strip("|"))] if line.strip() != "|" else []


def markdown_blocks(lines: list[str]) -> list[dict]:
    """Blocks of Markdown lines: ``p`` (text), ``h`` (text), ``list`` (items: text, sub), ``quote``
    (blocks, cls), ``code`` (text), ``table`` (header, align, rows), ``image`` (alt, src)."""
    blocks: list[dict] = []
    para: list[str] = []
    i = 0

    def flush() -> None:
        if para:
            blocks.append({"kind": "p", "text": " ".join(para)})
            para.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append({"kind": "code", "text": "\n".join(body)})
        elif stripped.startswith(">"):
            flush()
            inner = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                inner.append(re.sub(r"^\s*> ?", "", lines[i]))
                i += 1
            text = " ".join(inner)
            cls = "emulated" if "EMULATED" in text else "incomplete" if "INCOMPLETE" in text else ""
            blocks.append({"kind": "quote", "blocks": markdown_blocks(inner), "cls": cls})
            continue
        elif stripped.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            header, rest = rows[0], rows[1:]
            align = ["num" if c.endswith(":") and set(c) <= {"-", ":"} else "" for c in rest[0]] if rest else []
            if rest and all(set(c) <= {"-", ":"} for c in rest[0]):
                rest = rest[1:]
            align += [""] * (len(header) - len(align))
            blocks.append({"kind": "table", "header": header, "align": align, "rows": rest})
            continue
        elif stripped.startswith("- "):
            flush()
            items: list[dict] = []
            while i < len(lines) and (lines[i].startswith("- ") or (items and lines[i].startswith("  - "))):
                if lines[i].startswith("  - "):
                    items[-1]["sub"].append(lines[i][4:])
                else:
                    items.append({"text": lines[i][2:], "sub": []})
                i += 1
            blocks.append({"kind": "list", "items": items})
            continue
        elif stripped.startswith("#"):
            flush()
            blocks.append({"kind": "h", "text": stripped.lstrip("#").strip()})
        elif _IMAGE.match(stripped):
            flush()
            alt, src = _IMAGE.match(stripped).groups()
            blocks.append({"kind": "image", "alt": alt, "src": src})
        elif not stripped:
            flush()
        else:
            para.append(stripped)
        i += 1
    flush()
    return blocks


def split_sections(text: str) -> tuple[str, list[str], list[tuple[str, list[str]]]]:
    """report.md -> (its title, the lines before the first section, [(section title, lines)])."""
    title, preamble, sections = "", [], []
    for line in text.splitlines():
        if line.startswith("# ") and not title and not sections:
            title = line[2:].strip()
        elif line.startswith("## "):
            sections.append((line[3:].strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            preamble.append(line)
    return title, preamble, sections


# ---------------------------------------------------------------------------------------------
# Inline Markdown -> escaped HTML (the templates' ``inline`` filter)
# ---------------------------------------------------------------------------------------------
def _unescape_md(text: str) -> str:
    return text.replace("\\|", "|")


def inline(text) -> object:
    """Escaped HTML of one line of Markdown text: code spans, **bold**, [links](href); the rest as
    text. Returns markupsafe.Markup (safe in an autoescaping template)."""
    from markupsafe import Markup, escape

    out = []
    pos = 0
    text = "" if text is None else str(text)
    for match in _CODE.finditer(text):
        out.append(_rich(text[pos:match.start()]))
        out.append(Markup("<code>{}</code>").format(_unescape_md(match.group(1))))
        pos = match.end()
    out.append(_rich(text[pos:]))
    return Markup("").join(escape(part) if not isinstance(part, Markup) else part for part in out)


def _rich(text: str):
    from markupsafe import Markup, escape

    html = str(escape(_unescape_md(text)))
    html = _BOLD.sub(r"<strong>\1</strong>", html)
    html = _LINK.sub(lambda m: f'<a href="{_safe_href(m.group(2))}">{m.group(1)}</a>', html)
    return Markup(html)


def _safe_href(href: str) -> str:
    """Relative links and http(s) only (an escaped href: no quote can end the attribute)."""
    return href if re.match(r"^(https?:|[A-Za-z0-9_./#-])", href) and not href.lower().startswith("javascript") \
        else "#"


def plain(text) -> str:
    """One line of Markdown as plain text (a navigation link's words)."""
    return _unescape_md(re.sub(r"[`*]", "", "" if text is None else str(text)))


def _slug(title: str, used: set) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", plain(title).lower()).strip("-") or "section"
    slug, n = base, 2
    while slug in used:
        slug, n = f"{base}-{n}", n + 1
    used.add(slug)
    return slug


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------
def _environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.DictLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters["inline"] = inline
    env.filters["plain"] = plain
    env.globals["verdicts"] = VERDICTS
    return env


def png_size(data: bytes) -> tuple[int, int] | None:
    """A PNG's width and height from its IHDR chunk, None when ``data`` is no PNG."""
    if len(data) < 24 or not data.startswith(PNG_MAGIC) or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def figures(images: dict[str, bytes], titles: dict[str, str]) -> list[dict]:
    """The plots as report.html's figures (speedup first): title, caption, base64 data, size."""
    out = []
    for kind in list(FIGURE_ORDER) + [k for k in images if k not in FIGURE_ORDER]:
        data = images.get(kind)
        size = png_size(data) if data else None
        if not size:
            continue
        out.append({"kind": kind, "title": titles.get(kind, kind), "caption": FIGURE_CAPTIONS.get(kind, ""),
                    "data": base64.b64encode(data).decode("ascii"), "width": size[0], "height": size[1]})
    return out


# report.md's Verdict items that the card shows in its own form (the recommendation on top, the regions
# as chips): left out of the card's copy of that section, so that each is shown once.
CARD_ITEMS = ("**Recommendation**", "**Regions**")


def card_blocks(blocks: list[dict]) -> list[dict]:
    """report.md's Verdict section for the card: without the items the card already shows."""
    out = []
    for block in blocks:
        if block["kind"] != "list":
            out.append(block)
            continue
        items = [item for item in block["items"] if not item["text"].startswith(CARD_ITEMS)]
        if items:
            out.append(dict(block, items=items))
    return out


def render_html(summary: dict, markdown: str, images: dict[str, bytes] | None = None, titles: dict | None = None,
                generated: str | None = None) -> str:
    """report.html of one host: ``markdown`` is the host's report.md (render_markdown of ``summary``),
    ``images`` the plots' PNG bytes by kind (render.PLOTS), inlined."""
    from markupsafe import Markup

    title, preamble, md_sections = split_sections(markdown)
    used: set = {"verdict"}  # the card's id
    sections = []
    verdict_blocks = []
    for name, lines in md_sections:
        if name == "Verdict":  # in the card, verdict and recommendation first, once
            verdict_blocks = card_blocks(markdown_blocks(lines))
            continue
        section = {"id": _slug(name, used), "title": name, "blocks": markdown_blocks(lines), "figures": None}
        if name == "Plots":
            section["figures"] = figures(images or {}, titles or {})
            if not section["figures"]:
                continue
        sections.append(section)
    rank = {name: i for i, name in enumerate(FIRST)}
    sections.sort(key=lambda s: next((rank[n] for n in FIRST if s["title"].startswith(n)), len(FIRST)))
    bracket = summary.get("crossover_bracket") or [None, None]
    bracket_text = " to ".join("open" if c is None else f"C={c:g}" for c in bracket)
    crossover = summary.get("crossover_concurrency")
    return _environment().get_template("report.html").render(
        title=title or f"Speculative decoding A/B: {summary.get('host')}", preamble=markdown_blocks(preamble),
        sections=sections, summary=summary, bracket=bracket_text, verdict_blocks=verdict_blocks,
        crossover=fmt_conc(crossover) if crossover is not None else "-", style=Markup(STYLE), generated=generated)


def render_index_html(index: dict) -> str:
    """index.html: the fleet index (index.json), one row per host, linking each report.html."""
    from markupsafe import Markup

    hosts = [(host, h, host_row(h), host_notes(h)) for host, h in index["hosts"].items()]
    return _environment().get_template("index.html").render(index=index, hosts=hosts, kinds=kind_rows(index),
                                                            style=Markup(STYLE))
