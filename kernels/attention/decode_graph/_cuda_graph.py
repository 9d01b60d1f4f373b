"""Capture a stream's work once as a CUDA graph and replay it, through the
driver's stream-capture API (``cuda.bindings.driver``, the bindings
numba-cuda itself runs on).

:func:`capture` begins a capture on the stream (thread-local mode: another
thread's unsafe call does not break it), lets ``enqueue`` launch the step's
kernels onto that stream (they are recorded, not run), ends the capture and
instantiates the graph; :func:`replay` launches the instantiated graph on
the stream. Every driver result is checked; a failure raises
:class:`CaptureError` naming the call, and a capture never leaves the
stream capturing or a graph leaked:

* begin fails: nothing was captured, ``enqueue`` is not called;
* ``enqueue`` raises: the capture is ended (and its graph, if any,
  destroyed) before the exception goes on;
* an illegal call inside the capture (a synchronisation, a host copy on
  the legacy stream...) invalidates it: the end call reports
  ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``, and the error says so;
* instantiation fails: the graph is destroyed.

The driver is a parameter, so the logic is tested with a fake one.
"""

from __future__ import annotations

from typing import Any, Callable


class CaptureError(RuntimeError):
    """A stream capture, instantiation or graph launch the driver refused."""


def _driver():
    from cuda.bindings import driver

    return driver


def _ok(driver, result, call: str) -> None:
    if result != driver.CUresult.CUDA_SUCCESS:
        name = getattr(result, "name", str(result))
        raise CaptureError(f"{call} failed: {name}")


def capture(stream_handle: Any, enqueue: Callable[[], None], driver=None) -> "Graph":
    """Record ``enqueue()``'s launches on the stream ``stream_handle`` (a
    ``CUstream``: numba's ``Stream.handle``) as an instantiated graph."""
    driver = driver or _driver()
    mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    (res,) = driver.cuStreamBeginCapture(stream_handle, mode)
    _ok(driver, res, "cuStreamBeginCapture")
    try:
        enqueue()
    except BaseException:
        res, graph = driver.cuStreamEndCapture(stream_handle)
        if graph is not None and res == driver.CUresult.CUDA_SUCCESS:
            driver.cuGraphDestroy(graph)
        raise
    res, graph = driver.cuStreamEndCapture(stream_handle)
    if res == driver.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
        raise CaptureError(
            "cuStreamEndCapture: the capture was invalidated by a call that is illegal "
            "while a stream captures (a synchronisation or a legacy-stream operation)"
        )
    _ok(driver, res, "cuStreamEndCapture")
    try:
        res, exe = driver.cuGraphInstantiate(graph, 0)
        _ok(driver, res, "cuGraphInstantiate")
    finally:
        driver.cuGraphDestroy(graph)
    return Graph(exe, stream_handle, driver)


class Graph:
    """An instantiated graph bound to the stream it replays on."""

    def __init__(self, exe, stream_handle, driver):
        self.exe, self.stream, self.driver = exe, stream_handle, driver

    def replay(self) -> None:
        (res,) = self.driver.cuGraphLaunch(self.exe, self.stream)
        _ok(self.driver, res, "cuGraphLaunch")

    def close(self) -> None:
        if self.exe is not None:
            self.driver.cuGraphExecDestroy(self.exe)
            self.exe = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown: the driver may be gone)
            pass
