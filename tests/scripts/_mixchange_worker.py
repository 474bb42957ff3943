"""One rank of a DDP run over a Mixture changed at resume, for
tests/sources/mixtures/test_mixture_changes.py (gloo, CPU).

python _mixchange_worker.py MODE BATCH STEPS OUT CKPT
MODE: "full" runs STEPS global steps of the changed mixture (built with the literal position
AT); "save" runs STEPS steps of the original mixture and saves a checkpoint to CKPT; "resume"
loads CKPT, changes the mixture from the state (``changed(state, ...)``) and runs until global
step STEPS. Rank 0 writes, per step run, the global batch's samples (source, index, a
global-RNG draw, a sample_rng draw), sorted, to OUT (JSON).
"""

from __future__ import annotations

import sys
from typing import Any

from seekdata import exit_ddp

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
import seekdata
from tests.scripts._mixsched_worker import Source, main

LENGTH = 36  # 6 global steps of 6 per mixture epoch
AT = 12  # where "save" stops: 2 global steps of 6
WEIGHTS = {"code": 1, "maths": 2, "books": 1}  # web removed, books added


def original() -> seekdata.Mixture:
    sources = {"web": Source(0, 11), "code": Source(1, 7), "maths": Source(2, 5)}
    return seekdata.Mixture(sources, {"web": 3, "code": 1, "maths": 1}, length=LENGTH, seed=6)


def changed(at: Any) -> seekdata.Mixture:
    return original().changed(
        at, WEIGHTS, add={"books": Source(3, 4)}, remove=["web"], grown={"code": Source(1, 9)}
    )


def make(mode: str, saved: Any) -> seekdata.Mixture:
    if saved is not None:  # resume: the change decided now, at the checkpoint's position
        return changed(saved["loader"])
    return changed(AT) if mode == "full" else original()


if __name__ == "__main__":
    main(make)
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
