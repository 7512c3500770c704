"""``--png`` draws a per-rank timeline that is not blank; ``--html`` is one page with the
tables and the picture inside it."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import orjson
import pytest

from nvrx_otel.report.cli import main
from tests.report import fixture

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _colours(data: bytes) -> int:
    import matplotlib.image as mpimg
    import numpy as np

    pixels = mpimg.imread(io.BytesIO(data), format="png")
    flat = (pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    return len(np.unique(flat, axis=0))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("png")
    directory = fixture.write(tmp / "job")
    png, page = tmp / "job.png", tmp / "job.html"
    assert main([str(directory), "--png", str(png), "--html", str(page), "--json"]) == 0
    return png, page


def test_the_png_is_produced_and_not_blank(outputs: tuple[Path, Path]) -> None:
    data = outputs[0].read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000
    # bars in four group colours, failure crosses, the silent band, text: far from one colour
    assert _colours(data) > 50


def test_the_html_page_holds_the_tables_and_the_picture(outputs: tuple[Path, Path]) -> None:
    text = outputs[1].read_text()
    assert text.startswith("<!doctype html>")
    for title in ("Phases", "Stragglers", "First failure", "Silent ranks", "Restart cycles"):
        assert f"<h2>{title}" in text
    assert "nv.nvrx.ckpt.save.write" in text
    assert "rank 1 on n0 (cycle 0)" in text
    m = re.search(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    assert m is not None
    assert base64.b64decode(m[1]).startswith(PNG_MAGIC)
    assert "http://" not in text and "https://" not in text  # self-contained


def test_the_html_escapes_what_the_records_say(tmp_path: Path) -> None:
    from tests.report.otlpkit import at, log, logs_line, resource

    path = tmp_path / "logs_a.jsonl"
    path.write_text(logs_line(resource("a", 0), [log(at(1), "<script>alert(1)</script>", "ERROR")]))
    page = tmp_path / "p.html"
    assert main([str(path), "--html", str(page), "--json"]) == 0
    text = page.read_text()
    assert "<script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_every_output_of_files_without_records(tmp_path: Path) -> None:
    (tmp_path / "logs_a.jsonl").write_text("")
    png, page, trace = tmp_path / "x.png", tmp_path / "x.html", tmp_path / "p.json"
    args = [str(tmp_path), "--png", str(png), "--html", str(page), "--perfetto", str(trace)]
    assert main(args) == 0
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert "<h2>Phases" in page.read_text()
    assert orjson.loads(trace.read_bytes()) == {"displayTimeUnit": "ms", "traceEvents": []}


def test_a_picture_of_many_ranks_with_a_straggler_between_labelled_rows(tmp_path: Path) -> None:
    from nvrx_otel import semconv as sc
    from tests.report.otlpkit import at, resource, sid, span, spans_line, tid

    lines = []
    for rank in range(150):
        slow = 3.0 if rank == 77 else 1.0  # rank 77: a straggler, not on a labelled row
        spans = [
            span(sc.SPAN_CKPT_SAVE_WRITE, at(step * 4), at(step * 4 + slow), trace=tid(1),
                 span_id=sid(rank * 100 + step))
            for step in range(3)
        ]  # fmt: skip
        lines.append(spans_line(resource(f"n{rank // 8}", rank), spans))
    (tmp_path / "traces_a.jsonl").write_text("".join(lines))
    png = tmp_path / "x.png"
    assert main([str(tmp_path), "--png", str(png), "--json"]) == 0
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert _colours(png.read_bytes()) > 50
