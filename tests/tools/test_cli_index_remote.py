"""`seekdata index` over remote files: the installed command as a real process, against moto's
S3 server on 127.0.0.1 (issue 35): its memory does not grow with the number of shards, and it
reaches the server through the storage options it is given, with nothing in the environment.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import seekdata.sources.wds.tarindex as tarindex
from seekdata import _servers
from seekdata.tools.cli import main

pytest.importorskip("s3fs")

BUCKET = "index-remote"
#: two shard counts, 4x apart; each shard is 4 samples of 100 bytes (the issue's corpus)
FEW, MANY = 10, 40
#: how much more the peak RSS may be at MANY shards than at FEW. Before the fix each shard kept
#: its own S3 client, ~14 MB: 30 shards more grew it by ~400 MB. An index of 4 samples is ~1 KB.
GROWTH_BOUND = 48 * 2**20


def tar_bytes(shard: int, samples: int = 4, size: int = 100) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for k in range(samples):
            info = tarfile.TarInfo(f"s{shard:06d}_{k}.bin")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes([k]) * size))
    return out.getvalue()


def pattern(n: int, prefix: str = "") -> str:
    return f"s3://{BUCKET}/{prefix}s{{000000..{n - 1:06d}}}.tar"


@pytest.fixture(scope="module")
def s3() -> Iterator[_servers.Server]:
    with _servers.s3_server() as server:
        client = _servers.s3_client(server)
        client.create_bucket(Bucket=BUCKET)
        for i in range(MANY):
            client.put_object(Bucket=BUCKET, Key=f"s{i:06d}.tar", Body=tar_bytes(i))
        yield server


def bare_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything an S3 client reads, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BOTO"))}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull  # not ~/.aws
    return {**env, **extra}


def command(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run ``python -m seekdata ARGS``: its result and its peak RSS in bytes, read from the
    rusage of this one child (``wait4``), so no other child of the test process counts."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "seekdata", *args], env=env, stdout=out, stderr=err
        )
        deadline = time.monotonic() + 600
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    return done, usage.ru_maxrss * 1024  # Linux: kilobytes


def test_peak_memory_does_not_grow_with_the_shards(
    s3: _servers.Server, tmp_path: pathlib.Path
) -> None:
    env = bare_env(
        AWS_ENDPOINT_URL=s3.url,
        AWS_ACCESS_KEY_ID=_servers.S3_KEY,
        AWS_SECRET_ACCESS_KEY=_servers.S3_SECRET,
        AWS_DEFAULT_REGION=_servers.S3_REGION,
    )  # the environment only: the command as it was before --storage-option
    peaks = {}
    for n in (FEW, MANY):
        index_dir = tmp_path / f"idx-{n}"
        done, peaks[n] = command(["index", "--index-dir", str(index_dir), pattern(n)], env)
        assert done.returncode == 0, done.stderr
        first, manifest = done.stdout.splitlines()
        assert first.endswith(f": {n} shards, {4 * n} samples; indexes {index_dir}")
        assert manifest.startswith(f"manifest {index_dir}") and manifest.endswith(f": {n} files")
        assert len(list(index_dir.iterdir())) == n + 1  # and the bucket folder's manifest
    growth = peaks[MANY] - peaks[FEW]
    assert growth < GROWTH_BOUND, (
        f"peak RSS {peaks[FEW] / 2**20:.0f} MB at {FEW} shards, {peaks[MANY] / 2**20:.0f} MB at "
        f"{MANY}: it grows with the shards"
    )


def test_storage_options_reach_the_server_without_the_environment(
    s3: _servers.Server, tmp_path: pathlib.Path
) -> None:
    options: dict[str, Any] = _servers.s3_options(s3)
    flags = [
        f"--storage-option=endpoint_url={options['endpoint_url']}",  # not JSON: a string
        f"--storage-option=key={options['key']}",
        f"--storage-option=secret={options['secret']}",
        "--storage-option=client_kwargs=" + json.dumps(options["client_kwargs"]),  # a dict
    ]
    done, _ = command(["index", *flags, pattern(3)], bare_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "built or found current 3 remote indexes: 3 shards, 12 samples; indexes beside the shards\n"
        "manifest s3://index-remote/seekdata-manifest-tar.json: 3 files\n"
    )
    client = _servers.s3_client(s3)
    kept = client.get_object(Bucket=BUCKET, Key=f"s000001.tar{tarindex.INDEX_SUFFIX}")
    assert json.loads(kept["Body"].read())["shard"] == f"s3://{BUCKET}/s000001.tar"
    # all of them as one JSON object in a file (secrets off the command line)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    done, _ = command(["index", "--storage-options", f"@{path}", pattern(3)], bare_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("built or found current 3 remote indexes: 3 shards, 12")
    assert options["secret"] not in done.stdout + done.stderr


def test_storage_options_reach_token_files(s3: _servers.Server) -> None:
    tokens = np.array([5, 6, 0, 7, 8, 9, 0, 1], dtype=np.uint16)  # eos 0: 3 documents
    _servers.s3_client(s3).put_object(Bucket=BUCKET, Key="tok/t0.bin", Body=tokens.tobytes())
    options = json.dumps(_servers.s3_options(s3))
    url = f"s3://{BUCKET}/tok/t0.bin"
    done, _ = command(["index", "--eos-id", "0", "--storage-options", options, url], bare_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "built or found current 1 remote index: 1 token file, 8 tokens, 3 documents; "
        "indexes beside the files\n"
        "manifest s3://index-remote/tok/seekdata-manifest-tokens.json: 1 file\n"
    )
    kept = _servers.s3_client(s3).get_object(Bucket=BUCKET, Key="tok/seekdata-manifest-tokens.json")
    manifest = json.loads(kept["Body"].read())
    assert (manifest["family"], manifest["files"]["name"]) == ("tokens", ["t0.bin"])
    assert manifest["files"]["documents"] == [3]


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    return err[err.index("seekdata index: error: ") :]


def test_bad_storage_options_are_refused_without_quoting_them(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"s3://{BUCKET}/s000000.tar"
    secret = "hunter2-do-not-print"
    message = error_of(["index", "--storage-option", secret, url], capsys)
    assert "--storage-option must be KEY=VALUE" in message and secret not in message
    message = error_of(["index", "--storage-option", f"={secret}", url], capsys)
    assert "a key before '='" in message and secret not in message
    message = error_of(["index", "--storage-options", f"{{'secret': '{secret}'}}", url], capsys)
    assert "must be a JSON object" in message and "not JSON" in message and secret not in message
    message = error_of(["index", "--storage-options", f'["{secret}"]', url], capsys)
    assert "got a JSON array" in message and secret not in message
    both = ["--storage-options", '{"key": "a"}', "--storage-option", "key=b"]
    assert "'key' is given twice" in error_of(["index", *both, url], capsys)
    missing = tmp_path / "absent.json"
    assert str(missing) in error_of(["index", "--storage-options", f"@{missing}", url], capsys)
    local = str(tmp_path / "x.tar")
    message = error_of(["index", "--storage-option", "anon=true", local], capsys)
    assert "storage options are for remote files" in message


def test_help_names_the_options_and_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--storage-option KEY=VALUE" in text and "--storage-options JSON" in text
    assert "storage_options=" in text
    for variable in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "HF_TOKEN"):
        assert variable in text
