"""The HTTP face: the server (:mod:`.server`), the JSON API (:mod:`.api`), the Prometheus
exposition (:mod:`.metrics`), badges (:mod:`.badges`) and the status page
(:mod:`.statuspage`). Reads what the engine and the result consumers keep; runs nothing."""
