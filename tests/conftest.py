"""Test-session settings shared by every test.

The course's tensors are tiny: on a shared 2-core machine, torch's default thread
pool makes them slower, not faster. Kernels started by nbval and nbgrader inherit
this environment.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
