"""Webdataset tar shards: the byte-offset index, its checks, and shard URLs."""

try:
    import webdataset  # noqa: F401 - the tar member naming and decoders the shards use
except ImportError as exc:
    raise ImportError(
        "seekdata.wds needs the 'webdataset' extra (webdataset, braceexpand, pillow), which "
        "is not installed; pip install -e '.[webdataset]' in a clone of seekdata "
        "(pip install 'seekdata[webdataset]' once seekdata is on PyPI)"
    ) from exc
