"""An elastic DDP training script: torchrun loses a node or gets one back, the data goes on.

The script itself ships with seekdata, so that ``python -m seekdata.demo --elastic`` runs it
from an installed wheel too: read it in ``src/seekdata/tools/demo/elastic_train.py``. This file
runs it, as its path in the docs always did. Launch the same line on every node
(docs/elastic.md, "Across nodes with torchrun", says why each setting is there)::

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes=1:2 --nproc-per-node=2 \\
        --max-restarts=3 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 --rdzv-id=job42 \\
        examples/elastic_train.py --out /shared/run --global-batch 16 --ckpt-every 3
"""

import seekdata
from seekdata.tools.demo.elastic_train import main

if __name__ == "__main__":
    main()
    seekdata.exit_ddp()  # torch's gloo threads can abort a finished rank at shutdown
