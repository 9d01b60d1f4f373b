"""Which CUDA errors end a run (the context is lost) and which fail one record."""

from __future__ import annotations

import enum

import pytest

from leverctl.bench.faults import STICKY, context_lost, cuda_code


class CudaAPIError(Exception):
    """numba's shape of a driver error: the CUresult in ``code``."""

    def __init__(self, code, msg):
        super().__init__(code, msg)
        self.code = code

    def __str__(self):
        return f"[{self.code}] {self.args[1]}"


class CUresult(enum.IntEnum):  # cuda-bindings hands enums, not ints
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701


@pytest.mark.parametrize(
    "code, name",
    [
        (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
        (710, "CUDA_ERROR_ASSERT"),
        (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
        (719, "CUDA_ERROR_LAUNCH_FAILED"),
        (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    ],
)
def test_a_sticky_error_loses_the_context(code, name):
    assert STICKY[code] == name
    assert context_lost(CudaAPIError(code, f"Call to cuCtxSynchronize results in {name}"))


@pytest.mark.parametrize(
    "code, name",
    [
        (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
        (1, "CUDA_ERROR_INVALID_VALUE"),
        (2, "CUDA_ERROR_OUT_OF_MEMORY"),
        (218, "CUDA_ERROR_INVALID_PTX"),
        (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    ],
)
def test_an_error_of_one_kernel_leaves_the_context_usable(code, name):
    assert not context_lost(CudaAPIError(code, f"Call to cuLaunchKernel results in {name}"))


def test_an_enum_code_from_cuda_bindings_is_read_as_its_number():
    assert cuda_code(CudaAPIError(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, "x")) == 700
    assert context_lost(CudaAPIError(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, "illegal memory access"))
    assert not context_lost(CudaAPIError(CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources"))


def test_the_error_name_in_a_message_counts_when_there_is_no_code():
    assert context_lost(RuntimeError("cuMemcpyDtoH failed: CUDA_ERROR_ILLEGAL_ADDRESS"))


def test_a_sticky_error_raised_from_inside_another_exception_still_counts():
    try:
        try:
            raise CudaAPIError(700, "CUDA_ERROR_ILLEGAL_ADDRESS")
        except CudaAPIError as inner:
            raise ValueError("copying the output back failed") from inner
    except ValueError as outer:
        assert context_lost(outer)


def test_errors_that_are_not_cuda_errors_never_lose_the_context():
    exit_like = SystemExit(700)  # has a `code` too
    assert cuda_code(exit_like) is None and not context_lost(exit_like)
    assert not context_lost(IndexError("index 1037 is out of bounds"))
    assert not context_lost(AssertionError())
