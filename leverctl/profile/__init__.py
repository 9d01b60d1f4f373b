"""``leverctl profile``: what decides a kernel's speed, read without a GPU.

machine.py    a kernel's machine code: ptxas's resource figures, the SASS instruction mix, flags
occupancy.py  theoretical occupancy from an architecture's published limits, and what limits it
memtrace.py   every global and shared access of a simulated launch, per warp instruction:
              sector efficiency, bank conflicts, bytes requested
trace.py      memtrace run in a child process with the simulator chosen
run.py        plan to rows; capture.py and build.py compile each kernel a variant launches
block.py      a record's profile block (bench --profile) and compare's gate on two of them
ncu.py        Nsight Compute's hardware counters for bench --ncu
"""
