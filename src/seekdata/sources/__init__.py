"""Datasets that take part in exact resume, one package per family (mixtures, token corpora,
webdataset shards); each implements the one source protocol the loader reads."""
