"""Render an :class:`~reports.html.model.HtmlReport` to a self-contained folder: ``index.html``
(template, CSS and JS inline; every text autoescaped by Jinja2) and ``assets/`` (the plots).

The folder is written atomically (:func:`harness.io.atomic_dir`); an existing folder is replaced
only when it is a report this module wrote (its ``index.html`` carries :data:`GENERATOR`) and holds
nothing else (a user's file beside it makes the folder theirs: refused).
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2

from harness.io import atomic_dir, atomic_write, atomic_write_text
from reports.html.build import cards_json
from reports.html.model import HtmlReport

GENERATOR = "retrieval-harness suite report"
INDEX = "index.html"
ASSETS = "assets"


def _asset(name: str) -> str:
    return resources.files("reports.html").joinpath(name).read_text(encoding="utf-8")


def render_html(report: HtmlReport) -> str:
    """The page as one string (the plots are referenced as ``assets/<file>``)."""
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    template = env.from_string(_asset("template.html"))
    js = _asset("report.js")
    if "</script" in js.lower():            # would end the inline script early
        raise ValueError("report.js must not contain '</script'")
    return template.render(r=report, css=_asset("report.css"), js=js, generator=GENERATOR,
                           cards=cards_json(report.cards), ci_level=report.ci_level)


def is_report_dir(path: Path) -> bool:
    """True for a folder this module wrote (so it may be replaced by a newer report)."""
    index = Path(path) / INDEX
    try:
        head = index.read_text(encoding="utf-8")[:2000]
    except (OSError, UnicodeDecodeError):
        return False
    return f'content="{GENERATOR}"' in head


def write_html(report: HtmlReport, out_dir: str | Path) -> Path:
    """Write ``out_dir/index.html`` and ``out_dir/assets/*`` atomically; returns the index path."""
    out_dir = Path(out_dir)
    page = render_html(report)
    # owned: what a report written before folders carried a record of their files holds (harness.io.atomic)
    with atomic_dir(out_dir, is_ours=is_report_dir, what="an HTML suite report",
                    owned=(INDEX, f"{ASSETS}/*")) as tmp:
        for plot in report.plots:
            with atomic_write(tmp / ASSETS / plot.file, "wb") as handle:
                handle.write(plot.data)
        atomic_write_text(tmp / INDEX, page)
    return out_dir / INDEX
