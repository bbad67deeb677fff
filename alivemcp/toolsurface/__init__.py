"""Tool-surface integrity: versions of what a target offers, approvals, diffs, findings and
the alerts on change (a consumer of results: it sees ``CheckResult.surface``, never a probe)."""
