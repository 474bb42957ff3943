"""The throughput, mixture and remote scripts in benchmarks/ run and write what their docs cite.

Only that they run, print their table and write JSON and a plot: no timing is asserted.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pytest
import torch

from tests.helpers.forker import Forker
from tests.helpers.scripts import script


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """One interpreter that imported torch, numpy and seekdata; each script runs in a process
    forked from it (a fresh process that does not pay those imports again)."""
    with Forker("torch", "numpy", "seekdata") as server:
        yield server


def test_alternating_blocks_write_ratios_and_a_plot_that_replots(
    tmp_path: pathlib.Path, forker: Forker
) -> None:
    out = tmp_path / "t.json"
    text = script(
        "throughput.py", "--alternate", "--workloads", "cheap", "--cycles", "3", "--block", "2",
        "--loaders", "seekdata reseed off,DataLoader", "--out", str(out), forker=forker,
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
    script("throughput.py", "--replot", str(written), forker=forker)
    assert png.stat().st_size > 0


def test_mixture_throughput_pairs_each_loader_with_its_baseline(
    tmp_path: pathlib.Path, forker: Forker
) -> None:
    script("mixture.py", "--only-throughput", "--quick", "--workers", "0", "--rounds", "1",
           "--out", str(tmp_path / "m.json"), forker=forker)  # fmt: skip
    rows = json.loads((tmp_path / "mixture_throughput.json").read_text())["throughput"]
    pairs = {r["loader"]: r["vs"] for r in rows}
    assert pairs["seekdata, Mixture"].startswith("DataLoader + reseed")
    assert pairs["seekdata, Mixture, reseed off"].startswith("DataLoader, ")
    assert all(r["samples/s"] > 0 for r in rows)


def test_batched_reads_write_ratios_to_the_dataloader_and_a_plot(
    tmp_path: pathlib.Path, forker: Forker
) -> None:
    out = tmp_path / "b.json"
    argv = ["--quick", "--sources", "hf,rows", "--workers", "0", "--loaders", "seekdata"]
    text = script("batched.py", *argv, "--out", str(out), forker=forker)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["source"], r["loader"]) for r in rows] == [
        (source, loader) for source in ("hf", "rows") for loader in ("DataLoader", "seekdata")
    ]
    assert all(r["÷ DataLoader"] > 0 for r in rows) and "extra us/batch" in text
    assert out.with_suffix(".png").stat().st_size > 0
    script("batched.py", *argv, "--alternate", "--out", str(out), forker=forker)
    rows = json.loads((tmp_path / "b_alternate.json").read_text())["rows"]
    assert {r["loader"] for r in rows} == {"DataLoader", "seekdata"}
    assert (tmp_path / "b_alternate.png").stat().st_size > 0


def test_remote_resume_prints_its_table_and_writes_its_json_keys(
    tmp_path: pathlib.Path, forker: Forker
) -> None:
    """benchmarks/remote.py at its smallest (moto, one kind, one position, one round): the
    resume table and the JSON keys benchmarks/README.md documents, the rounds' runs, a plot."""
    for module in ("moto", "s3fs", "uvicorn", "webdataset"):
        pytest.importorskip(module)
    out = tmp_path / "r.json"
    text = script(
        "remote.py", "--s3-server", "moto", "--kinds", "tar", "--size-mb", "2", "--file-mb", "1",
        "--positions", "0.5", "--rounds", "1", "--no-steady", "--out", str(out), forker=forker,
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert set(data) == {"meta", "resume", "steady", "compare"}
    assert data["meta"]["args"]["rounds"] == 1 and data["meta"]["cpus"] > 0
    (row,) = data["resume"]
    assert row["kind"] == "tar" and row["position"] == 0.5 and row["requests"] > 0
    for where in ("local", "s3", "http"):
        assert row[f"{where}_s"] > 0 and len(row[f"{where}_runs"]) == 1
    header = "| kind | position | local s | s3 s | s3 / local | s3 requests | s3 bytes | http s |"
    assert header in text and "| tar | 50% |" in text
    assert out.with_suffix(".png").stat().st_size > 0


def test_remote_backends_prints_its_table_and_writes_its_json(
    tmp_path: pathlib.Path, forker: Forker
) -> None:
    """benchmarks/remote_backends.py at its smallest: a row per installed back-end, the table's
    header, the interpreter's own start among the cold starts."""
    for module in ("moto", "s3fs", "uvicorn"):
        pytest.importorskip(module)
    out = tmp_path / "b.json"
    text = script(
        "remote_backends.py", "--objects", "1", "--size-mb", "2", "--small-n", "8",
        "--large-mb", "1", "--large-n", "1", "--threads", "2", "--batch-rounds", "1",
        "--rounds", "1", "--fork-timeout", "4", "--out", str(out), forker=forker,
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert data["meta"]["python_start_s"] > 0 and "versions" in data["meta"]
    rows = {(r["server"], r["backend"]): r for r in data["rows"]}
    assert {("s3", "fsspec/s3fs"), ("http", "fsspec/http")} <= set(rows)
    assert rows["s3", "fsspec/s3fs"]["cold_s"] > 0 and rows["s3", "fsspec/s3fs"]["fork"] == "ok"
    assert "| server | back-end | cold start s | 4K p50 ms |" in text


def test_threads_memory_part_writes_first_batch_and_pss(
    tmp_path: pathlib.Path, forker: Forker
) -> None:
    out = tmp_path / "t.json"
    text = script("threads.py", "--quick", "--parts", "memory", "--strings", "20000",
                  "--first-workers", "2", "--out", str(out), forker=forker)  # fmt: skip
    payload = json.loads(out.read_text())
    rows = {r["loader"]: r for r in payload["first_batch"]}
    assert set(rows) == {"seekdata threads", "seekdata processes"}
    assert all(r["first_batch_s"] > 0 and r["pss_mb"] > 0 for r in rows.values())
    assert rows["seekdata processes"]["pss_vs_processes"] == 1.0
    assert "pss_mb" in text and out.with_suffix(".png").stat().st_size > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA it measures (minutes)")
def test_threads_gpu_says_why_it_measures_nothing_without_cuda(
    tmp_path: pathlib.Path, forker: Forker
) -> None:
    text = script("threads_gpu.py", "--quick", "--out", str(tmp_path / "g.json"), forker=forker)
    assert "CUDA is not available" in text and not (tmp_path / "g.json").exists()
