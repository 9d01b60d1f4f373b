"""leverctl: resolve, inspect, benchmark and verify an inference engine's kernel-path levers."""

__version__ = "0.1.0"
