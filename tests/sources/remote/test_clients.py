"""Our clients leave nothing on stderr: a script that runs several 2-worker loaders over
``s3://`` ends without a traceback (issue 35, section 5).

The script is tests/scripts/_s3_loaders.py, a real process, reading from moto's S3 server
through the counting proxy (which keeps its connections to clients alive, as a real store
does: a worker inherits its parent's open connections, the case that went wrong).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest

from seekdata import _servers
from tests.helpers import remote_corpus as corpus
from tests.helpers.paths import SCRIPTS

BUCKET = "clients-tests"


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> str:
    root = tmp_path_factory.mktemp("clients")
    for kind in ("tar", "windows"):
        corpus.write(kind, root / kind)
    _servers.upload(s3_server, BUCKET, root)
    return BUCKET


def test_several_worker_loaders_over_s3_leave_no_traceback(bucket: str, proxy: Any) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "_s3_loaders.py"), proxy.url, bucket],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=pathlib.Path(SCRIPTS).parents[1],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["batches", "19"], done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "never retrieved" not in done.stderr and "Unclosed" not in done.stderr, done.stderr
