"""History: uptime, incidents and latency per check, kept for months in one SQLite file.

Runs are rolled up as they are written into minute, hour and day buckets (counts by status
and a mergeable latency summary), so the file's size depends on checks x buckets, not on how
often checks run. See :mod:`alivemcp.history.writer` for the write path and its fault
handling, :mod:`alivemcp.history.queries` for windows and their exact meaning.

The package imports nothing itself: its config section (:mod:`alivemcp.history.config`)
belongs to the config layer, and loading it must not load the store. Import
:class:`~alivemcp.history.store.HistoryStore` from :mod:`alivemcp.history.store`.
"""
