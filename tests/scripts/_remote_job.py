"""One loader run in a fresh process, for the remote tests: ``python _remote_job.py JOB``.

JOB is JSON: ``kind``, ``urls``, ``options`` (the dataset's keyword arguments: storage options,
index_dir), ``batch``, ``workers``, ``state`` (a loader state to resume from, or null) and
``steps`` (batches to run, 0: to the epoch's end). Prints JSON: ``batches``, each batch's items
as tests/helpers/remote_corpus.rows_of writes them, and ``state`` after the last one.
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.helpers import remote_corpus as corpus


def main() -> None:
    job = json.loads(sys.argv[1])
    ds = corpus.dataset(job["kind"], job["urls"], **job["options"])
    loader = corpus.make_loader(
        job["kind"], ds, batch_size=job["batch"], num_workers=job["workers"]
    )
    if job["state"] is not None:
        loader.load_state_dict(job["state"])
    batches = []
    for batch in loader:
        batches.append(corpus.rows_of(job["kind"], batch))
        if len(batches) == job["steps"]:
            break
    print(json.dumps({"batches": batches, "state": loader.state_dict()}))


if __name__ == "__main__":
    main()
