"""Named experiments: functions that build configs (and run them)."""
