"""The run engine: checks become probe handles (:mod:`.checks`), the scheduler plans and
starts their runs (:mod:`.scheduler`), the runner runs one under its timeout and turns
whatever happened into a :class:`~alivemcp.engine.results.CheckResult` (:mod:`.runner`), and
every result flows through one pipeline (:mod:`.pipeline`) whose first stage is the status
store (:mod:`.status`). Never imports the web face, the cluster layer or the app."""
