"""Alerting: turns check results into notifications (see alivemcp.alerting.config)."""
