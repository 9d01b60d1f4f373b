"""The kernel tests, one folder per kernel family (``w4a16/``, ``gdn/``...),
``common/`` for the shared primitives and ``selection/`` for the decision
tables, as ``kernels/`` is laid out.

The helpers the families share stay in this folder (``ptx_harness``,
``tc_claims``, ``test_path_declarations``); pytest puts the folder of a
``conftest.py`` on ``sys.path``, so a test in any subfolder imports them by
name. Every test module's basename is unique across ``tests/``: pytest's
default import mode imports each by its basename, and ``tc_claims`` names
the SASS test modules that way.
"""
