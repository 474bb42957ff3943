"""The throughput and mixture scripts in benchmarks/ run and write what their docs cite.

Only that they run, print their table and write JSON and a plot: no timing is asserted.
"""

from __future__ import annotations

import json
import pathlib

from tests.helpers.scripts import script


def test_alternating_blocks_write_ratios_and_a_plot_that_replots(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "t.json"
    text = script(
        "throughput.py", "--alternate", "--workloads", "cheap", "--cycles", "3", "--block", "2",
        "--loaders", "seekdata reseed off,DataLoader", "--out", str(out),
    )  # fmt: skip
    written = tmp_path / "throughput_alternate.json"
    rows = json.loads(written.read_text())["rows"]
    assert [(r["loader"], r["vs"]) for r in rows] == [
        ("seekdata reseed off", "DataLoader"),
        ("DataLoader", "DataLoader"),
    ]
    assert all(r["ratio"] > 0 for r in rows) and "cycle ratios IQR" in text
    png = written.with_suffix(".png")
    png.unlink()
    script("throughput.py", "--replot", str(written))
    assert png.stat().st_size > 0


def test_mixture_throughput_pairs_each_loader_with_its_baseline(tmp_path: pathlib.Path) -> None:
    script("mixture.py", "--only-throughput", "--quick", "--workers", "0",
           "--out", str(tmp_path / "m.json"))  # fmt: skip
    rows = json.loads((tmp_path / "mixture_throughput.json").read_text())["throughput"]
    pairs = {r["loader"]: r["vs"] for r in rows}
    assert pairs["seekdata, Mixture"].startswith("DataLoader + reseed")
    assert pairs["seekdata, Mixture, reseed off"].startswith("DataLoader, ")
    assert all(r["samples/s"] > 0 for r in rows)


def test_batched_reads_write_ratios_to_the_dataloader_and_a_plot(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "b.json"
    argv = ["--quick", "--sources", "hf,rows", "--workers", "0", "--loaders", "seekdata"]
    text = script("batched.py", *argv, "--out", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert [(r["source"], r["loader"]) for r in rows] == [
        (source, loader) for source in ("hf", "rows") for loader in ("DataLoader", "seekdata")
    ]
    assert all(r["÷ DataLoader"] > 0 for r in rows) and "extra us/batch" in text
    assert out.with_suffix(".png").stat().st_size > 0
    script("batched.py", *argv, "--alternate", "--out", str(out))
    rows = json.loads((tmp_path / "b_alternate.json").read_text())["rows"]
    assert {r["loader"] for r in rows} == {"DataLoader", "seekdata"}
    assert (tmp_path / "b_alternate.png").stat().st_size > 0
