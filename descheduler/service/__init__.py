"""The long-running service: wiring of cache, usage source, planner and evictor into a periodic loop."""
