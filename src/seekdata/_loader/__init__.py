"""StatefulDataLoader's machinery: the engines, the plan of an epoch, the fetch inside the
workers, device prefetch, the torch API checks, worker signals, and the hooks frameworks call."""
