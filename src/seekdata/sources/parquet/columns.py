"""Arrow columns to what a training loop takes, a whole column at a time (no per-row loop).

``format="torch"``: numbers and booleans without nulls become 1-d tensors, fixed-size lists
of them 2-d tensors (rows × list size); other columns (strings, binary, variable-length lists,
nulls, timestamps) become Python lists, as ``default_collate`` leaves strings.
``format="numpy"``: the same as arrays (object arrays for the others). ``format="arrow"``:
the ``pyarrow.ChunkedArray`` as taken.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch

FORMATS = ("torch", "numpy", "arrow")


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def convert(column: pa.ChunkedArray, fmt: str) -> Any:
    """``column`` in format ``fmt`` (see the module docstring)."""
    if fmt == "arrow":
        return column
    kind = column.type
    array: np.ndarray | None = None
    if column.null_count == 0 and _numeric(kind):
        array = column.to_numpy()
    elif column.null_count == 0 and pa.types.is_fixed_size_list(kind) and _numeric(kind.value_type):
        flat = pa.concat_arrays(
            [chunk.flatten() for chunk in column.chunks] or [pa.array([], kind.value_type)]
        )
        if flat.null_count == 0:
            array = flat.to_numpy(zero_copy_only=False).reshape(len(column), kind.list_size)
    if array is not None:
        if fmt == "numpy":
            return np.array(array)  # writable, its own memory
        return torch.from_numpy(np.array(array))
    if fmt == "numpy":
        return column.to_numpy(zero_copy_only=False)
    return column.to_pylist()


def row(columns: dict[str, Any], at: int) -> dict[str, Any]:
    """Row ``at`` of a batch of columns as one sample (``ds[i]``)."""
    return {name: values[at] for name, values in columns.items()}
