"""StatefulDataLoader's machinery: the engines, the plan of an epoch, the fetch inside the
workers, device prefetch, the torch API checks, worker signals, and what a
framework's rebuild of a loader needs (rebuild.py; the frameworks' hooks are
:mod:`seekdata.integrations.hooks`)."""
