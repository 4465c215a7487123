"""Reward functions. Each module is a pure function of a JSON trajectory summary,

`reward(summary: dict) -> float | dict`, plus a Lambda `handler(event, context)`
so the same file runs in process, in the local emulator and on AWS Lambda.
A module may import only the standard library and what its runtime has.
"""
