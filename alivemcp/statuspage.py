"""The self-contained HTML status page served at ``GET /``. (Stub until the status-page work.)"""

PAGE_HTML = b"""<!doctype html><html><head><meta charset="utf-8"><title>alivemcp</title></head>
<body><h1>alivemcp</h1><p>See <a href="/status">/status</a> and <a href="/metrics">/metrics</a>.
</p></body></html>"""
