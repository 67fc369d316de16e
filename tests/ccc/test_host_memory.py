"""Freed tensor buffers are reused instead of being unmapped and faulted in again on every batch
(``ccc.host_memory``): the settings, the user's own values, and the page faults they save."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from ccc.host_memory import ALLOCATOR_ENVIRONMENT, reuse_freed_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

FAULTS = """
import resource, sys
import torch
if sys.argv[1] == "reuse":
    from ccc.host_memory import reuse_freed_memory
    assert reuse_freed_memory()
torch.manual_seed(0)
layers = [torch.nn.Conv2d(3, 24, 8, 4), torch.nn.BatchNorm2d(24), torch.nn.ReLU(), torch.nn.Conv2d(24, 48, 3, 2)]
model = torch.nn.Sequential(*layers)
images = torch.rand(32, 3, 224, 224)
model(images).sum().backward()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    model(images).sum().backward()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
"""Ten forward and backward passes of a small CNN on a batch of 32 images of 224×224 (the demo
model's first layers), after one warm-up pass; prints the minor page faults they cost."""


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALLOCATOR_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def test_the_settings_reach_this_process_and_its_children(clean_environment) -> None:
    assert reuse_freed_memory() is GLIBC
    assert {name: os.environ[name] for name in ALLOCATOR_ENVIRONMENT} == ALLOCATOR_ENVIRONMENT


def test_a_threshold_the_user_set_is_kept(clean_environment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    reuse_freed_memory()
    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == "65536"
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == ALLOCATOR_ENVIRONMENT["MALLOC_TRIM_THRESHOLD_"]


@pytest.mark.skipif(not GLIBC, reason="the thresholds are glibc's")
def test_reused_buffers_save_most_page_faults_of_a_training_step() -> None:
    environment = {name: value for name, value in os.environ.items() if name not in ALLOCATOR_ENVIRONMENT}
    faults = {
        mode: int(
            subprocess.run(
                [sys.executable, "-c", FAULTS, mode], env=environment, capture_output=True, text=True, check=True
            ).stdout
        )
        for mode in ("reuse", "plain")
    }
    # measured on the shared 2-core machine: 6,807 against 36,073 (the kernel's zeroing of every page)
    assert faults["reuse"] * 3 < faults["plain"], faults
