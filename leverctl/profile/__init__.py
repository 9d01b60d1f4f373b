"""``leverctl profile``: what decides a kernel's speed, read without a GPU.

machine.py    a kernel's machine code: ptxas's resource figures, the SASS instruction mix, flags
occupancy.py  theoretical occupancy from an architecture's published limits, and what limits it
memtrace.py   every global and shared access of a simulated launch, per warp instruction:
              sector efficiency, bank conflicts, bytes requested
"""
