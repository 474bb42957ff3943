"""Webdataset tar shards: the byte-offset index, its checks, and shard URLs."""
