"""Discrete-event simulator of a disaggregated GPU cluster running many RL jobs."""
