"""The main job: ``python -m seekdata.demo`` (a resumed stream; the DDP demo replaces it)."""

from __future__ import annotations

import json

import seekdata


def main() -> None:
    data = list(range(20))
    full = [seekdata.DistributedSampler(data, 2, r, seed=7) for r in range(2)]
    stream = [list(s) for s in full]
    part = [seekdata.DistributedSampler(data, 2, r, seed=7) for r in range(2)]
    for s in part:
        it = iter(s)
        for _ in range(4):
            next(it)
    state = json.dumps(part[0].state_dict())
    print("checkpoint after 4 steps on 2 ranks:", state)
    resumed = [seekdata.DistributedSampler(data, 3, r, seed=7) for r in range(3)]
    for s in resumed:
        s.load_state_dict(json.loads(state))
    rest = [list(s) for s in resumed]
    print("uninterrupted, rank 0 / 1:", stream[0], stream[1])
    print("resumed on 3 ranks:", rest)
    seen = sorted(i for r in stream for i in r[:4]) + sorted(i for r in rest for i in r)
    print("every sample exactly once:", sorted(seen) == data)


if __name__ == "__main__":
    main()
