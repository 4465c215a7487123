"""Phase multiplexing of many RL jobs (RollMux): groups, placement, round robin.

Plain policy code: no Ray and no simulator in here, so that the simulator
(`roll_agentic.sim`) and the real multiplexer call the same decisions.
"""
